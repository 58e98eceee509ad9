"""Fill the paper's prompt templates (``prompts/*.txt``) with a problem.

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

from harness.problems import Problem, Task, to_base

TEMPLATE_FOR_TASK = {"add": "add.txt", "iter_add": "add.txt", "mul": "mul.txt"}
SLOT = "<Expression>"
_EXAMPLE = re.compile(r"^(\d+(?:\s*[+*]\s*\d+)+)\s*=\s*(\d+)\s*$")


@cache
def template(task: str) -> str:
    return resources.files("prompts").joinpath(TEMPLATE_FOR_TASK[task]).read_text(encoding="utf-8")


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
def filled_template(task_name: str, base: int, truncate: int | None) -> str:
    text = template(task_name).replace("<base>", str(base))
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


def user_message(problem: Problem) -> str:
    """The user turn for one problem: the task's template with its base and, in the last slot, the expression."""
    text = filled_template(problem.task, problem.base, problem.truncate)
    # Only the last <Expression> is the slot; the first belongs to the format line "<Expression> = <Result>".
    cut = text.rindex(SLOT)
    return text[:cut] + problem.expression + text[cut + len(SLOT) :]


def prompt_deviations(task: Task, base: int) -> list[str]:
    """How this task's prompt departs from the paper's, in words for the run record."""
    found = []
    if base != 10:
        found.append(f"{task.label} base {base}: few-shot examples are the paper's numbers written in base {base}")
    if task.truncate is not None:
        found.append(f"{task.label}: the prompt asks for the last {task.truncate} digits; its examples show them")
    return found
