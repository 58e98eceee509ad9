"""Prompts in every base say correct arithmetic in that base; base 10 is the paper's prompt byte for byte."""

import re

import pytest

from harness.questions.problems import generate, parse_task
from harness.questions.prompts import filled_template, prompt_deviations, template, user_message

EXAMPLE = re.compile(r"^([0-9a-z]+(?:\s*[+*]\s*[0-9a-z]+)+)\s*=\s*([0-9a-z]+)$")


def examples(text: str, base: int) -> list[tuple[int, str, int]]:
    """(value of the left side, operator, value stated) of every few-shot line."""
    found = []
    for line in text.splitlines():
        match = EXAMPLE.match(line.strip())
        if match and "Expression" not in line:
            operator = "*" if "*" in match[1] else "+"
            values = [int(v, base) for v in re.split(r"\s*[+*]\s*", match[1])]
            value = values[0] * values[1] if operator == "*" else sum(values)
            found.append((value, operator, int(match[2], base), match[2]))
    return found


@pytest.mark.parametrize("base", [2, 3, 7, 10, 16, 36])
@pytest.mark.parametrize("task", ["add", "iter_add:3", "mul"])
def test_every_example_is_right_in_the_prompts_base(task, base):
    problem = generate(parse_task(task), base, 2, 1, 0)[0]
    message = user_message(problem)
    assert f"in base {base}" in message and message.endswith(problem.expression)
    found = examples(message, base)
    assert len(found) >= 3
    for value, _, stated, _ in found:
        assert stated == value


def test_base_10_is_the_papers_prompt():
    for task in ("add", "mul"):
        assert filled_template(task, 10, None) == template(task).replace("<base>", "10")
    assert prompt_deviations(parse_task("add"), 10) == []


def test_truncated_multiplication_asks_for_the_last_digits():
    problem = generate(parse_task("mul:trunc=3"), 10, 3, 1, 0)[0]
    message = user_message(problem)
    assert "calculate the last 3 digits of the following" in message
    for value, _, stated, text in examples(message, 10):
        assert len(text) == 3 and stated == value % 1000
    assert len(problem.answer) == 3
    assert prompt_deviations(parse_task("mul:trunc=3"), 16) == [
        "mul:trunc=3 base 16: few-shot examples are the paper's numbers written in base 16",
        "mul:trunc=3: the prompt asks for the last 3 digits; its examples show them",
    ]
