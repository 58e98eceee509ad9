"""Extraction on real model outputs (captured from smollm2 runs of this harness), exact match, Wilson."""

import json
from pathlib import Path

import pytest

from harness.scoring import RULES, answer_line, extract, is_correct, wilson_interval

REAL = [json.loads(line) for line in (Path(__file__).parent / "data" / "real_outputs.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("case", REAL, ids=[c["output"][:40] for c in REAL])
def test_extraction_on_real_outputs(case):
    assert extract(case["output"], case["base"]).answer == case["expected"]


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
    assert extract(text, base).answer == expected


# (output, base, gold, verdict): every output the issue found accepted wrongly (or refused wrongly), and their kin.
ADVERSARIAL = [
    # signs, fractions, continuations, hedges, negations
    ("12 + 3 = -15", 10, "15", False),
    ("The answer is -15.", 10, "15", False),
    ("12 + 3 = −15", 10, "15", False),
    ("= 15.5", 10, "15", False),
    ("= 15.0", 10, "15", False),
    ("15.0", 10, "15", False),
    ("= 15 + 1", 10, "15", False),
    ("12 + 3 = 15 - 0", 10, "15", False),
    ("15 or 16", 10, "15", False),
    ("The sum is 15 (wait, 16)", 10, "15", False),
    ("The answer isn't 15", 10, "15", False),
    ("The answer is not 15", 10, "15", False),
    ("12 + 3 = 15 (because 2 + 3 = 5)", 10, "15", False),
    ("12 + 3 = 15 (because 2 + 3 = 5)", 10, "5", False),
    ("= 15, which is correct", 10, "15", False),
    ("= 15 <= 16", 10, "15", False),
    # echoes of the question
    ("23 * 96 = 23 * 96", 10, "23", False),
    ("5 * 1 = 5 * 1", 10, "5", False),
    ("1 + 0 = 1 + 0", 2, "1", False),
    ("23 * 96", 10, "23", False),
    # bases and subscripts
    ("= 1F_{16}", 16, "1f", True),
    ("= 1F₁₆", 16, "1f", True),
    ("= 1f_16", 16, "1f", True),
    ("= (1F)_{16}", 16, "1f", True),
    ("= 1F (base 16)", 16, "1f", True),
    ("= 1F in base 16", 16, "1f", True),
    ("7 + 3 = 12_{10}", 10, "10", False),
    ("7 + 3 = 12_{10}", 10, "12", True),
    ("= 1F_{10}", 16, "1f", False),
    ("= 1010_{2}", 2, "1010", True),
    ("10 + 12 = 22", 2, "100", False),
    ("32 + 78 = aa", 16, "aa", True),
    ("= AA", 16, "aa", True),
    # words are never digits
    ("The result is a 5-digit number", 16, "a", False),
    ("The answer is a", 16, "a", True),  # a stated numeral, alone, is an answer in base 16
    ("To calculate the arithmetic expression in base 10 with the specified format, you", 10, "10", False),
    ("The arithmetic expression is 8 + 0.", 10, "8", False),
    ("Let me think about it.", 16, "ea", False),
    # one policy for leading zeros and separators
    ("= 0015", 10, "15", True),
    ("0015", 10, "15", True),
    ("= 1,234", 10, "1234", True),
    ("1,234", 10, "1234", True),
    ("= 1,23", 10, "123", False),
    ("= 1 234", 10, "1234", False),
    ("= 1_234", 10, "1234", False),
    # markup and sentence punctuation around the one numeral are fine
    ("The final answer is **541**.", 10, "541", True),
    ("The answer is \\(541\\).", 10, "541", True),
    ("\\boxed{541}", 10, "541", True),
    ("430 + 111 = \\boxed{541}", 10, "541", True),
    ("The answer: 541!", 10, "541", True),
    ("$541$", 10, "541", True),
    ("The arithmetic expression is 3 + 1, which is 4.", 10, "4", True),
    ("3 + 4 = 7 = 7", 10, "7", True),
    ("x == 7", 10, "7", False),
    ("", 10, "0", False),
]


# Outputs a reviewer found misjudged (issue 20), and more of their kind: (output, base, gold, verdict, rule).
LABELS_MARKUP_AND_HEDGES = [
    # a colon after the keyword
    ("The answer is: 15", 10, "15", True, "keyword"),
    ("The product is: 15", 10, "15", True, "keyword"),
    ("The answer is: 6e", 16, "6e", True, "keyword"),
    ("The final answer: 15", 10, "15", True, "keyword"),
    ("The answer is: -15", 10, "15", False, "none: signed"),
    # a markdown-bolded label
    ("**Answer**: 15", 10, "15", True, "keyword"),
    ("**Answer:** 15", 10, "15", True, "keyword"),
    ("### Answer: 15", 10, "15", True, "keyword"),
    ("**The answer is 15**", 10, "15", True, "keyword"),
    # LaTeX around the answer
    ("The final answer is $\\boxed{15}$.", 10, "15", True, "keyword"),
    ("7 + 8 = $\\boxed{15}$", 10, "15", True, "equals"),
    ("\\boxed{6E_{16}}", 16, "6e", True, "boxed"),
    ("\\boxed{6E_{10}}", 16, "6e", False, "none: written in base 10, not 16"),
    ("\\(7 + 8 = 15\\)", 10, "15", True, "equals"),
    ("\\[ 7 + 8 = 15 \\]", 10, "15", True, "equals"),
    ("$$7 + 8 = 15$$", 10, "15", True, "equals"),
    ("\\boxed{7 + 8 = 15}", 10, "15", True, "boxed"),
    ("\\boxed{\\text{15}}", 10, "15", True, "boxed"),
    ("Therefore \\boxed{15}", 10, "15", True, "boxed"),
    ("The answer is \\(\\boxed{15}\\).", 10, "15", True, "keyword"),
    # hedging between boxed answers is not an answer
    ("\\boxed{15} or \\boxed{16}", 10, "15", False, "none: several boxed answers (hedged)"),
    ("\\boxed{15}, no wait, \\boxed{16}", 10, "16", False, "none: several boxed answers (hedged)"),
    ("7 + 8 = \\boxed{15} or \\boxed{16}", 10, "15", False, "none: several boxed answers (hedged)"),
    # a dangling operator is not markdown
    ("7 * 8 = 56 * ", 10, "56", False, "none: an operator follows the numeral (unpaired '*', not markdown)"),
    ("7 + 8 = 15 *", 10, "15", False, "none: an operator follows the numeral (unpaired '*', not markdown)"),
    ("7 * 8 = 56*", 10, "56", False, "none: an operator follows the numeral (unpaired '*', not markdown)"),
    ("1f * 2 = 3e *", 16, "3e", False, "none: an operator follows the numeral (unpaired '*', not markdown)"),
    ("**7 + 8 = 15**", 10, "15", True, "equals"),
    ("7 * 8 = *56*", 10, "56", True, "equals"),
    ("The answer is **56**.", 10, "56", True, "keyword"),
    # an explicit "the answer is" after an equation is the answer; an equation after it, its last side
    ("Let x = 7 + 8; the answer is 15.", 10, "15", True, "keyword"),
    ("The answer is 7 + 8 = 15", 10, "15", True, "equals"),
    ("7 + 8 = 15, which is correct", 10, "15", False, "none: no numeral where the answer should be"),
    # plain sentences that state the answer, and ones that do not
    ("The sum of 7 and 8 is 15.", 10, "15", True, "keyword"),
    ("The product of 7 and 8 is 56.", 10, "56", True, "keyword"),
    ("15 is the answer.", 10, "15", True, "bare"),
    ("The answer is probably 15", 10, "15", False, "none: no numeral where the answer should be"),
    ("The sum of 7 and 8 is 15 or 16", 10, "15", False, "none: a second numeral follows"),
]


@pytest.mark.parametrize(
    "output,base,gold,verdict,rule", LABELS_MARKUP_AND_HEDGES, ids=[c[0][:30] for c in LABELS_MARKUP_AND_HEDGES]
)
def test_labels_markup_and_hedges_are_judged_as_written(output, base, gold, verdict, rule):
    extraction = extract(output, base)
    assert is_correct(extraction.answer, gold, base) == verdict, extraction
    assert extraction.rule == rule


@pytest.mark.parametrize("answer", ["+15", "1_5", "15 ", "1,5", "١٥", "１５", "0x1f", "0o17", "", "f"])
def test_is_correct_takes_only_what_extract_can_produce(answer):
    """Python's int() reads all of these as 15 (or 31 in base 16); an extracted answer is never one of them."""
    base = 16 if answer == "0x1f" else 10
    gold = "1f" if base == 16 else "15"
    assert not is_correct(answer, gold, base)
    assert extract(f"= {answer}", base).answer != answer or not answer


@pytest.mark.parametrize("output,base,gold,verdict", ADVERSARIAL, ids=[f"{c[0][:30]} b{c[1]}" for c in ADVERSARIAL])
def test_adversarial_outputs_get_the_right_verdict(output, base, gold, verdict):
    extraction = extract(output, base, expression="23 * 96" if "23 * 96" in output else None)
    assert is_correct(extraction.answer, gold, base) == verdict, extraction
    assert (extraction.rule in RULES) == (extraction.answer is not None), extraction
    if extraction.answer is None:
        assert extraction.rule.startswith("none: ")


def test_the_rule_that_found_the_answer_is_named():
    assert extract("430 + 41 = 541", 10).rule == "equals"
    assert extract("The final answer is 541.", 10).rule == "keyword"
    assert extract("\\boxed{541}", 10).rule == "boxed"
    assert extract("**541**", 10).rule == "bare"
    assert extract("23 * 96 = 23 * 96", 10, expression="23 * 96").rule == "none: echo of the question"
    assert extract("= 1F_{10}", 16).rule == "none: written in base 10, not 16"


def test_the_adversarial_table_is_large():
    assert len(ADVERSARIAL) >= 40


def test_only_the_first_line_counts():
    assert answer_line("\n 12 + 3 = 15\n 12 + 3 = 16") == "12 + 3 = 15"
    assert extract("7 + 8 = 15\nThe final answer is 16", 10).answer == "15"


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
