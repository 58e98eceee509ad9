"""Readings of real and adversarial outputs in the paper's first-line answer mode: what is credited, what is refused
and why (free-form outputs: test_free_form_readings.py)."""

import json
import re
from pathlib import Path

import pytest

from harness.questions.answers import FIRST_LINE
from harness.scoring import CONFLICT, RULES, Question, Refusal, extract, is_correct

DATA = Path(__file__).parents[1] / "data"
REAL = [json.loads(line) for line in (DATA / "real_outputs.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("case", REAL, ids=[c["output"][:40] for c in REAL])
def test_extraction_on_real_outputs(case):
    assert extract(case["output"], case["base"], case["expression"]).answer == case["expected"]


@pytest.mark.parametrize(
    "text,base,expression,expected",
    [
        ("The final answer is 1,234.", 10, "1000 + 234", "1234"),
        ("\\boxed{56}", 10, "7 * 8", "56"),
        ("1f + 2 = 21", 16, "1f + 2", "21"),
        ("= 1A3", 16, "1a0 + 3", "1a3"),
        ("101 + 11 = 1000", 2, "101 + 11", "1000"),
        ("10 + 12 = 22", 2, "10 + 11", None),  # '12' and '22' are no base-2 numbers
        ("\n\n  42  \nmore text", 10, "40 + 2", "42"),
        ("To calculate the arithmetic expression in base 10 with the specified format, you", 10, "3 + 7", None),
        ("The arithmetic expression is 8 + 0.", 10, "8 + 0", None),
        ("", 10, "1 + 1", None),
    ],
)
def test_extraction_rules(text, base, expression, expected):
    assert extract(text, base, expression).answer == expected


ASKED = {"The arithmetic expression is 3 + 1, which is 4.": "3 + 1", "The sum of 7 and 8 is 15 or 16": "7 + 8"}


def asked(output: str, base: int) -> str:
    """The question of a table row: the left side of the output's first equation, else one any answer may answer
    (the rows that state an answer without an equation answer whatever was asked)."""
    equation = re.search(r"([0-9a-fA-F]+(?:\s*[*+]\s*[0-9a-fA-F]+)+)\s*=", output)
    if output in ASKED:
        return ASKED[output]
    if equation and Question.of(equation[1], base):
        return equation[1]
    return "7 + 8" if base > 8 else "1 + 1"


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
    ("= 15, which is correct", 10, "15", True),  # the answer, then words about it
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


# Labels, markup and hedges around the answer: (output, base, gold, verdict, rule).
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
    ("\\boxed{15} or \\boxed{16}", 10, "15", False, f"{CONFLICT[:-1]}: 15, then 16)"),
    ("\\boxed{15}, no wait, \\boxed{16}", 10, "16", False, f"{CONFLICT[:-1]}: 15, then 16)"),
    ("7 + 8 = \\boxed{15} or \\boxed{16}", 10, "15", False, f"{CONFLICT[:-1]}: 15, then 16)"),
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
    ("7 + 8 = 15, which is correct", 10, "15", True, "equals"),
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
    extraction = extract(output, base, asked(output, base))
    assert is_correct(extraction.answer, gold, base) == verdict, extraction
    assert extraction.rule == rule


@pytest.mark.parametrize("answer", ["+15", "1_5", "15 ", "1,5", "١٥", "１５", "0x1f", "0o17", "", "f"])
def test_is_correct_takes_only_what_extract_can_produce(answer):
    """Python's int() reads all of these as 15 (or 31 in base 16); an extracted answer is never one of them."""
    base = 16 if answer == "0x1f" else 10
    gold = "1f" if base == 16 else "15"
    assert not is_correct(answer, gold, base)
    assert extract(f"= {answer}", base, "7 + 8").answer != answer or not answer


@pytest.mark.parametrize("output,base,gold,verdict", ADVERSARIAL, ids=[f"{c[0][:30]} b{c[1]}" for c in ADVERSARIAL])
def test_adversarial_outputs_get_the_right_verdict(output, base, gold, verdict):
    extraction = extract(output, base, asked(output, base))
    assert is_correct(extraction.answer, gold, base) == verdict, extraction
    assert (extraction.rule in RULES) == (extraction.answer is not None), extraction
    if extraction.answer is None:
        assert extraction.rule.startswith("none: ")


def test_the_rule_that_found_the_answer_is_named():
    assert extract("430 + 41 = 541", 10, "430 + 41").rule == "equals"
    assert extract("The final answer is 541.", 10, "430 + 41").rule == "keyword"
    assert extract("\\boxed{541}", 10, "430 + 41").rule == "boxed"
    assert extract("**541**", 10, "430 + 41").rule == "bare"
    assert extract("23 * 96 = 23 * 96", 10, "23 * 96").rule == "none: echo of the question"
    assert extract("= 1F_{10}", 16, "1e + 1").rule == "none: written in base 10, not 16"


def test_the_adversarial_table_is_large():
    assert len(ADVERSARIAL) >= 40


def test_only_the_first_line_counts():
    assert FIRST_LINE.answer_text("\n 12 + 3 = 15\n 12 + 3 = 16") == "12 + 3 = 15"
    assert extract("7 + 8 = 15\nThe final answer is 16", 10, "7 + 8").answer == "15"


def test_exact_match_by_value():
    assert is_correct("0042", "42", 10) and is_correct("1A", "1a", 16)
    assert not is_correct("43", "42", 10) and not is_correct(None, "42", 10) and not is_correct("zz", "42", 10)


OTHERS = Refusal.ABOUT_OTHERS.value  # no answer to the question stated: its equations are about other expressions
# An answer belongs to the question. (output, base, asked expression, gold, verdict, rule)
ANSWERS_OF_THE_QUESTION = [
    # the committed quantization-cpu report's GPTQ W4 outputs: the prompt's example restated, cut by the budget
    (
        "The arithmetic expression you are asked to calculate is 32 + 78 = 11",
        10,
        "6 + 5",
        "11",
        False,
        OTHERS,
    ),
    ("The arithmetic expression you are asked to calculate is 32 + 78 = 110", 10, "32 + 78", "110", True, "equals"),
    # a check after the answer is not the answer
    ("47 + 85 = 132. Check: 132 - 85 = 47.", 10, "47 + 85", "132", True, "equals"),
    ("47 + 85 = 132. Check: 132 - 85 = 47.", 10, "47 + 85", "47", False, "equals"),
    # a wrong stated total followed by correct partial sums is wrong
    ("12 + 34 + 56 = 100, 12 + 34 = 46, 46 + 56 = 102", 10, "12 + 34 + 56", "102", False, "equals"),
    # the first step of a worked answer states no answer
    (
        "First, 12 + 34 = 46.",
        10,
        "12 + 34 + 56",
        "102",
        False,
        OTHERS,
    ),
    (
        "First, 12 + 34 = 46.",
        10,
        "12 + 34 + 56",
        "46",
        False,
        OTHERS,
    ),
    # a chain that starts from the question reads its last side; the operands in any order
    ("12 + 34 + 56 = 46 + 56 = 102", 10, "12 + 34 + 56", "102", True, "equals"),
    ("56 + 12 + 34 = 102", 10, "12 + 34 + 56", "102", True, "equals"),
    # the partial sums written as a run-on chain, the asked operands in order: their last sum
    ("12 + 34 = 46 + 56 = 102", 10, "12 + 34 + 56", "102", True, "steps"),
    ("7 \\times 8 = 56", 10, "7 * 8", "56", True, "equals"),
    ("7 × 8 = 56", 10, "7 * 8", "56", True, "equals"),
    (
        "1 + 1 + 1 = 2",
        10,
        "0 + 1 + 1",
        "2",
        False,
        OTHERS,
    ),
    # plain statements of the answer, the committed reports' own phrasing among them
    ("The answer to 47 + 85 is 132.", 10, "47 + 85", "132", True, "keyword"),
    ("The final answer to the arithmetic expression 47 + 85 is 132.", 10, "47 + 85", "132", True, "keyword"),
    ("47 + 85 is 132.", 10, "47 + 85", "132", True, "keyword"),
    ("The value of 47 + 85 is 132.", 10, "47 + 85", "132", True, "keyword"),
    ("The last 2 digits of 7 * 15 are 05.", 10, "7 * 15", "05", True, "keyword"),
    ("The answer to 32 + 78 is 110.", 10, "47 + 85", "110", False, "none: no answer stated"),
    ("The sum of 6 and 8 is 15.", 10, "7 + 8", "15", False, "none: no answer stated"),
    ("The answer to the first example is 110", 10, "7 + 8", "110", False, "none: no answer stated"),
    # the Minerva / lm-eval line
    ("Final Answer: The final answer is 15. I hope it is correct.", 10, "7 + 8", "15", True, "keyword"),
    ("Final Answer: The final answer is $15$. I hope it is correct.", 10, "7 + 8", "15", True, "keyword"),
    ("Final Answer: The final answer is $\\boxed{15}$. I hope it is correct.", 10, "7 + 8", "15", True, "keyword"),
    # a second answer, a question, a negation, differing statements
    ("7 + 8 = 15. Wait, 16.", 10, "7 + 8", "15", False, "none: a number follows the answer (a second answer?)"),
    ("7 + 8 = 16? No, 7 + 8 = 15.", 10, "7 + 8", "15", False, "none: asked, not stated (a question mark follows)"),
    ("7 + 8 = 15?", 10, "7 + 8", "15", False, "none: asked, not stated (a question mark follows)"),
    ("Not 7 + 8 = 15", 10, "7 + 8", "15", False, "none: negated"),
    (
        "7 * 8 = 56. So the answer is 54.",
        10,
        "7 * 8",
        "56",
        False,
        f"{CONFLICT[:-1]}: 56, then 54)",
    ),
    ("7 * 8 = 56. So the answer is 56.", 10, "7 * 8", "56", True, "keyword"),
    ("7 + 8 = 15 or 7 + 8 = 16", 10, "7 + 8", "15", False, "none: text follows the numeral"),
    ("No, 7 + 8 = 15.", 10, "7 + 8", "15", True, "equals"),
    ("The answer is: 7 + 8 = 15", 10, "7 + 8", "15", True, "equals"),
    ("= 15", 10, "7 + 8", "15", True, "equals"),  # the line continues the prompt's last line, the expression
]


@pytest.mark.parametrize(
    "output,base,expression,gold,verdict,rule",
    ANSWERS_OF_THE_QUESTION,
    ids=[f"{c[0][:40]}|{c[2]}" for c in ANSWERS_OF_THE_QUESTION],
)
def test_an_answer_belongs_to_the_question(output, base, expression, gold, verdict, rule):
    extraction = extract(output, base, expression)
    assert is_correct(extraction.answer, gold, base) == verdict, extraction
    assert extraction.rule == rule, extraction


def test_a_numeral_of_any_length_is_scored_without_int():
    """Python's int() refuses strings past 4,300 digits: a degenerate output of digits once stopped eval and rescore."""
    digits = "7" * 5000
    for output in (digits, f"7 + 8 = {digits}", f"The answer is {digits}."):
        extraction = extract(output, 10, "7 + 8")
        assert extraction.answer == digits and not is_correct(extraction.answer, "15", 10)
    assert is_correct("0" * 6000 + "15", "15", 10) and is_correct(digits, digits, 10)


@pytest.mark.parametrize(
    "piece", ["the sum of ", "1 ", "= 1 ", "*a ", "7 + 8 = ", "\\boxed{", "\\boxed{1} ", "answer is ", "15, which is "]
)
def test_reading_time_is_linear_in_the_line(piece):
    """200,000 characters of each shape that made a reader quadratic ("the sum of " repeated took 91 s at 176,000):
    four times the line takes about four times the work, a quadratic reader sixteen. The work is this thread's CPU
    time (time.thread_time: the time other processes take the cores from it does not count, which made a wall-clock
    ratio flip on a loaded machine), the best of three, against the same thread's for a quarter of the line."""
    import time

    def seconds(repeats: int) -> float:
        line = piece * (repeats // len(piece))
        best = float("inf")
        for _ in range(3):
            started = time.thread_time()
            extract(line, 10, "7 + 8")
            best = min(best, time.thread_time() - started)
        return best

    short, long = seconds(50_000), seconds(200_000)
    assert long < 8 * max(short, 0.005), (short, long)
