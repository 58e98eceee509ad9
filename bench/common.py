"""What the bench sections share: progress lines, medians, and the quick grid's problems as every engine gets them."""

from __future__ import annotations

import statistics
import sys
import time

from harness.questions.problems import generate
from harness.runs.config import build_spec, load_config


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return statistics.median(values)


def quick_grid_problems(count: int, tokenizer=None) -> list[dict]:
    """``count`` problems spread evenly over the quick grid's cells, chat-templated once for every engine (by the
    default model's tokenizer, or ``tokenizer``)."""
    from transformers import AutoTokenizer

    from harness.models.weights import default_tokenizer_dir
    from harness.questions.answers import FIRST_LINE
    from harness.questions.prompts import TEMPLATE_FOR_TASK, user_message

    name, config = load_config("quick")
    spec = build_spec(name, config)
    cells = [(task, length) for task, lengths in spec.grid for length in lengths]
    tokenizer = tokenizer or AutoTokenizer.from_pretrained(default_tokenizer_dir())

    class Counter:  # the answer mode's budget counts tokens; the tokenizer is all it needs
        @staticmethod
        def count_tokens(text: str) -> int:
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    problems = []
    for position, (task, length) in enumerate(cells):
        share = count // len(cells) + (position < count % len(cells))
        budget = FIRST_LINE.budget(task, spec.base, length, Counter.count_tokens)
        for problem in generate(task, spec.base, length, share, spec.seed):
            prompt = tokenizer.apply_chat_template(
                [{"role": "user", "content": user_message(problem)}], tokenize=False, add_generation_prompt=True
            )
            problems.append(
                {
                    "cell": f"{task.label} n={length}",
                    "template": TEMPLATE_FOR_TASK[task.name],
                    "prompt": prompt,
                    "max_new_tokens": budget,
                    "prompt_tokens": Counter.count_tokens(prompt),
                }
            )
    return problems
