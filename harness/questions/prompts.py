"""Fill the prompt templates (``prompts/*.txt``) with a problem: the paper's few-shot prompts (the default), or a
zero-shot instruction or a chain-of-thought prompt for models that answer in their own words (``--prompt``).

The templates are the paper's (appendix "Prompts"), whose few-shot examples are base-10 sums and products. For
another base the examples are the same numbers written in that base (``32 + 78= 110`` becomes ``20 + 4e= 6e`` in
base 16), so that the prompt shows correct arithmetic in the base it asks for; the paper evaluated LLMs in base 10
only, so this is a deviation, recorded in the run (``prompt_deviations``). For ``mul:trunc=L`` the prompt asks for
the last L digits in its own words and its examples show them.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from harness.questions.problems import Problem, Task, to_base

TEMPLATE_FOR_TASK = {"add": "add.txt", "iter_add": "add.txt", "mul": "mul.txt"}  # the paper's, few-shot
# The prompt styles a run can ask with: the paper's few-shot prompt (appendix tab:prompt_add, tab:prompt_mul), an
# instruction with no examples, and an instruction to reason step by step before a final-answer line.
PROMPT_STYLES = {"few-shot": None, "zero-shot": "zero_shot.txt", "cot": "cot.txt"}
SLOT = "<Expression>"
_EXAMPLE = re.compile(r"^(\d+(?:\s*[+*]\s*\d+)+)\s*=\s*(\d+)\s*$")


def template_name(task: str, style: str = "few-shot") -> str:
    """The file a task's prompt comes from in this style."""
    return PROMPT_STYLES[style] or TEMPLATE_FOR_TASK[task]


@cache
def template(task: str, style: str = "few-shot") -> str:
    return resources.files("prompts").joinpath(template_name(task, style)).read_text(encoding="utf-8")


def _example(line: str, base: int, truncate: int | None) -> str:
    """One few-shot line in ``base`` (the same numbers), its result cut to the last ``truncate`` digits."""
    match = _EXAMPLE.match(line)
    if not match:
        return line
    value = int(match[2])
    if truncate is not None:
        result = to_base(value % base**truncate, base).rjust(truncate, "0")
    else:
        result = to_base(value, base)
    expression = re.sub(r"\d+", lambda number: to_base(int(number.group()), base), match[1])
    return line[: match.start(1)] + expression + line[match.end(1) : match.start(2)] + result + line[match.end(2) :]


@cache
def filled_template(task_name: str, base: int, truncate: int | None, style: str = "few-shot") -> str:
    text = template(task_name, style).replace("<base>", str(base))
    if style != "few-shot":
        if truncate is not None:
            text = text.replace("Calculate the following", f"Calculate the last {truncate} digits of the following", 1)
        return text
    if base == 10 and truncate is None:
        return text  # the paper's prompt, byte for byte
    lines = [_example(line, base, truncate) for line in text.split("\n")]
    text = "\n".join(lines)
    if truncate is not None:
        text = text.replace(
            "Please directly calculate the following arithmetic expression",
            f"Please directly calculate the last {truncate} digits of the following arithmetic expression",
            1,
        )
    return text


def user_message(problem: Problem, style: str = "few-shot") -> str:
    """The user turn for one problem: the task's template in ``style`` with its base and, in the last slot, the
    expression."""
    text = filled_template(problem.task, problem.base, problem.truncate, style)
    # Only the last <Expression> is the slot; the first belongs to the format line "<Expression> = <Result>".
    cut = text.rindex(SLOT)
    return text[:cut] + problem.expression + text[cut + len(SLOT) :]


def prompt_deviations(task: Task, base: int, style: str = "few-shot") -> list[str]:
    """How this task's prompt departs from the paper's, in words for the run record."""
    found = []
    if style != "few-shot":
        found.append(f"{task.label}: the {style} prompt (prompts/{PROMPT_STYLES[style]}), not the paper's few-shot one")
        return found
    if base != 10:
        found.append(f"{task.label} base {base}: few-shot examples are the paper's numbers written in base {base}")
    if task.truncate is not None:
        found.append(f"{task.label}: the prompt asks for the last {task.truncate} digits; its examples show them")
    return found
