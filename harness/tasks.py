"""numprec's problems as tasks of the harnesses people already run.

    python -m harness.tasks --harness lm-eval --out tasks/numprec                # the quick grid, seed 0
    lm_eval --model hf --model_args pretrained=DIR --apply_chat_template --include_path tasks/numprec --tasks numprec

writes an lm-evaluation-harness task group ``numprec``: a task per task and length (``numprec_add_n2``), each cell's
problems as a local JSON-lines dataset (data/), and numprec_metric.py, the metric: numprec's own answer reading and
exact match (harness/scoring/), imported, not copied, so numprec must be installed where lm-eval runs. Prompts are
harness.questions.prompts' user messages (with ``--apply_chat_template`` lm-eval wraps them in the model's chat
template, as harness.eval does); generation is greedy within the cell's budget (harness/questions/answers.py, counted
with ``--model``'s tokenizer) and the metric keeps the first non-blank line, where numprec's backends stop: under greedy
decoding the kept line is the one harness.eval gets. Every task's version is numprec's version and the seed, and the
metric refuses to score under another numprec.

inspect_ai: ``inspect eval numprec/arithmetic -T task=add -T length=3`` (numprec/inspect_task.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import cache
from importlib import metadata
from pathlib import Path

import yaml

from harness.core.bounds import SAMPLES, SEED
from harness.core.cli import ArgParser, int_list, invocation, name_list, output_dir, run
from harness.core.errors import UserError
from harness.core.files import atomic_write_text
from harness.models import get_model, tokenizer_model
from harness.models.weights import resolve_weights
from harness.questions.answers import FIRST_LINE, AnswerMode
from harness.questions.problems import Task, generate, parse_task
from harness.questions.prompts import PROMPT_STYLES, user_message
from harness.reports.promotion import prepare_out_dir, staged_dir
from harness.runs.config import build_spec, load_config
from harness.scoring import Extraction, is_correct, judge

GROUP = "numprec"
METRIC_MODULE = '''"""The metric of numprec's lm-eval tasks: numprec's own reading of an answer and its exact match,
imported from the installed numprec (harness/scoring/), which must be the version that wrote these tasks."""

from importlib import metadata

from harness.tasks import verdict

WRITTEN_BY = "{version}"


def process_results(doc, results):
    installed = metadata.version("numprec")
    if installed != WRITTEN_BY:
        raise RuntimeError(
            f"these tasks were written by numprec {{WRITTEN_BY}} and numprec {{installed}} is installed: "
            "write them again with python -m harness.tasks"
        )
    return {{"exact_match": float(verdict(results[0], doc)[1])}}
'''


def verdict(output: str, document: dict) -> tuple[Extraction, bool]:
    """How both harnesses score a document's output, as harness.eval does: its first non-blank line (where numprec's
    backends stop) read by harness/scoring/, and whether that answer is exactly the gold one."""
    last_digits = parse_task(document["task"]).truncate
    extraction = judge(
        FIRST_LINE.kept(output), document["base"], document["expression"], FIRST_LINE, False, last_digits
    )
    return extraction, is_correct(extraction.answer, document["gold"], document["base"])


def numprec_version() -> str:
    return metadata.version("numprec")


def task_id(task: Task, length: int) -> str:
    """lm-eval's name of a cell: numprec_add_n2, numprec_iter_add_3_n1, numprec_mul_trunc2_n4."""
    label = re.sub(r"[^a-z0-9_]+", "", task.label.replace(":", "_").replace("=", ""))
    return f"{GROUP}_{label}_n{length}"


def cell_documents(task: Task, base: int, length: int, samples: int, seed: int, style: str) -> list[dict]:
    """The problems of a cell as the documents both harnesses read: harness.eval's problems and user messages."""
    return [
        {
            "index": problem.index,
            "seed": seed,
            "task": task.label,
            "base": base,
            "length": length,
            "expression": problem.expression,
            "gold": problem.answer,
            "prompt": user_message(problem, style),
        }
        for problem in generate(task, base, length, samples, seed)
    ]


@cache
def _tokenizer(model: str):
    from transformers import AutoTokenizer

    owner = tokenizer_model(get_model(model))
    if owner is None:
        raise UserError(
            f"{model} is served elsewhere and its registry entry names no tokenizer to count budgets with; pass "
            "--model with the local model it serves (or add tokenizer: to its entry in harness/models.yaml)"
        )
    return AutoTokenizer.from_pretrained(resolve_weights(owner))


def cell_budget(task: Task, base: int, length: int, model: str = "smollm2", answer: AnswerMode = FIRST_LINE) -> int:
    """The cell's generation budget as harness.eval sets it (harness/questions/answers.py), counted with ``model``'s
    tokenizer
    as its backends count tokens."""
    tokenizer = _tokenizer(model)
    return answer.budget(task, base, length, lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]))


def write_lm_eval(out: Path, grid, base: int, samples: int, seed: int, style: str, budget_of, final: Path) -> list[str]:
    """The group's files in ``out``, where they are built, naming their data files where they will be, under
    ``final``; returns the task names."""
    version = numprec_version()
    (out / "data").mkdir(parents=True, exist_ok=True)
    names = []
    for task, lengths in grid:
        for length in lengths:
            name = task_id(task, length)
            documents = cell_documents(task, base, length, samples, seed, style)
            data = out / "data" / f"{name}.jsonl"
            atomic_write_text(data, "".join(json.dumps(doc, ensure_ascii=False) + "\n" for doc in documents))
            config = {
                "task": name,
                "dataset_path": "json",
                "dataset_kwargs": {"data_files": {"test": str(final.resolve() / "data" / data.name)}},
                "test_split": "test",
                "output_type": "generate_until",
                "num_fewshot": 0,
                "doc_to_text": "{{prompt}}",
                "doc_to_target": "{{gold}}",
                "generation_kwargs": {
                    "until": [],  # the metric keeps the first non-blank line (numprec's stop); see the module
                    "do_sample": False,
                    "temperature": 0.0,
                    "max_gen_toks": budget_of(task, length),
                },
                "process_results": "!function numprec_metric.process_results",
                "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
                "metadata": {"version": f"{version}+seed{seed}", "numprec_version": version, "seed": seed},
            }
            text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
            function = "!function numprec_metric.process_results"  # lm-eval's YAML tag: safe_dump quotes it
            atomic_write_text(out / f"{name}.yaml", text.replace(f"'{function}'", function))
            names.append(name)
    group = {
        "group": GROUP,
        "task": names,
        "aggregate_metric_list": [{"metric": "exact_match", "aggregation": "mean", "weight_by_size": True}],
        "metadata": {"version": f"{version}+seed{seed}"},
    }
    atomic_write_text(out / f"_{GROUP}.yaml", yaml.safe_dump(group, sort_keys=False))
    atomic_write_text(out / "numprec_metric.py", METRIC_MODULE.format(version=version))
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m harness.tasks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--harness", choices=("lm-eval",), required=True, help="whose tasks to write")
    parser.add_argument("--out", type=output_dir, required=True, help="the task directory (--include_path)")
    parser.add_argument("--config", default="quick", help="eval_configs/NAME.yaml: the grid (default: quick)")
    parser.add_argument("--tasks", type=name_list, help="e.g. add,iter_add:3,mul (default: the config's grid)")
    parser.add_argument("--lengths", type=int_list, help="operand lengths for every task, e.g. 1-3")
    parser.add_argument("--samples", type=SAMPLES.arg, help="problems per cell (default: the config's)")
    parser.add_argument("--seed", type=SEED.arg, help="the problems' seed (default: the config's)")
    parser.add_argument("--prompt", choices=tuple(PROMPT_STYLES), help="prompt style (default few-shot)")
    parser.add_argument("--model", default="smollm2", help="whose tokenizer counts each cell's budget")
    args = parser.parse_args(argv)
    invoked = invocation("harness.tasks", args, argv)
    prepare_out_dir(args.out, [], "harness.tasks")
    config_name, config = load_config(args.config)
    settings = {"samples": args.samples, "seed": args.seed, "prompt": args.prompt}
    spec = build_spec(
        config_name, config, models=[args.model], tasks=args.tasks, lengths=args.lengths,
        **{name: value for name, value in settings.items() if value is not None},
    )  # fmt: skip

    # every budget first (the tokenizer loaded, or its absence said) before anything is written
    budgets = {
        (task.label, length): cell_budget(task, spec.base, length, args.model, spec.answer)
        for task, lengths in spec.grid
        for length in lengths
    }
    with staged_dir(args.out, [], "harness.tasks", invoked) as stage:
        names = write_lm_eval(
            stage, spec.grid, spec.base, spec.samples, spec.seed, spec.prompt,
            lambda task, length: budgets[(task.label, length)], args.out,
        )  # fmt: skip
    print(
        f"wrote {args.out}/ (group {GROUP}: {len(names)} tasks of {spec.samples} problems, seed {spec.seed}); run:\n"
        f"lm_eval --model hf --model_args pretrained=MODEL_DIR --apply_chat_template --include_path {args.out} "
        f"--tasks {GROUP}"
    )
    return 0


if __name__ == "__main__":
    run(main)
