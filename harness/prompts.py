"""Fill the paper's prompt templates (``prompts/*.txt``) with a problem."""

from __future__ import annotations

from functools import cache
from importlib import resources

from harness.problems import Problem

TEMPLATE_FOR_TASK = {"add": "add.txt", "iter_add": "add.txt", "mul": "mul.txt"}
SLOT = "<Expression>"


@cache
def template(task: str) -> str:
    return resources.files("prompts").joinpath(TEMPLATE_FOR_TASK[task]).read_text(encoding="utf-8")


def user_message(problem: Problem) -> str:
    """The user turn for one problem: the task's template with its base and, in the last slot, the expression."""
    text = template(problem.task).replace("<base>", str(problem.base))
    # Only the last <Expression> is the slot; the first belongs to the format line "<Expression> = <Result>".
    cut = text.rindex(SLOT)
    return text[:cut] + problem.expression + text[cut + len(SLOT) :]
