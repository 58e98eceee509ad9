"""Extraction on real model outputs (captured from smollm2 runs of this harness), exact match, Wilson."""

import json
from pathlib import Path

import pytest

from harness.scoring import answer_line, extract_answer, is_correct, wilson_interval

REAL = [json.loads(line) for line in (Path(__file__).parent / "data" / "real_outputs.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("case", REAL, ids=[c["output"][:40] for c in REAL])
def test_extraction_on_real_outputs(case):
    assert extract_answer(case["output"], case["base"]) == case["expected"]


@pytest.mark.parametrize(
    "text,base,expected",
    [
        ("The final answer is 1,234.", 10, "1234"),
        ("\\boxed{56}", 10, "56"),
        ("1f + 2 = 21", 16, "21"),
        ("= 1A3", 16, "1a3"),
        ("101 + 11 = 1000", 2, "1000"),
        ("10 + 12 = 22", 2, None),  # '22' is no base-2 number
        ("\n\n  42  \nmore text", 10, "42"),
        ("To calculate the arithmetic expression in base 10 with the specified format, you", 10, None),
        ("The arithmetic expression is 8 + 0.", 10, None),
        ("", 10, None),
    ],
)
def test_extraction_rules(text, base, expected):
    assert extract_answer(text, base) == expected


def test_only_the_first_line_counts():
    assert answer_line("\n 12 + 3 = 15\n 12 + 3 = 16") == "12 + 3 = 15"
    assert extract_answer("7 + 8 = 15\nThe final answer is 16", 10) == "15"


def test_exact_match_by_value():
    assert is_correct("0042", "42", 10) and is_correct("1A", "1a", 16)
    assert not is_correct("43", "42", 10) and not is_correct(None, "42", 10) and not is_correct("zz", "42", 10)


def test_wilson_interval():
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-3)  # textbook value for 0/10
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(1 - high) and low == pytest.approx(0.4038, abs=1e-3)
    low, high = wilson_interval(30, 30)
    assert high == pytest.approx(1.0) and 0.88 < low < 0.9
