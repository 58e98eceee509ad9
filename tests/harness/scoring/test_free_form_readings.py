"""Readings of free-form outputs (issue 32): final-answer formats after a thinking block, a truncated output as its
own verdict, reasoning models' markers and formats read as a careful grader reads them."""

import pytest

from harness.questions.answers import FIRST_LINE, FreeForm, answer_mode
from harness.scoring import TRUNCATED, extract, is_correct, judge

FREE = FreeForm(512)
FREE_FORM = [
    # (output after any thinking, expression, gold, right?, rule): the final-answer formats of common math models
    ("<think>\n7 + 8 = 16? no.\n</think>\nThe final answer is 15.", "7 + 8", "15", True, "final"),
    ("Final Answer: The final answer is 15. I hope it is correct.", "7 + 8", "15", True, "final"),
    ("Final Answer: The final answer is $15$. I hope it is correct.", "7 + 8", "15", True, "final"),
    ("Adding the units: 7 + 8 = 15.\nAnswer: 15", "7 + 8", "15", True, "final"),
    ("So the total is\n\\boxed{15}", "7 + 8", "15", True, "boxed"),
    ('{"reasoning": "units then tens", "answer": 15}', "7 + 8", "15", True, "json"),
    ('{"answer": "1f"}', "f + 10", "1f", True, "json"),
    ('```json\n{"final_answer": 132}\n```', "47 + 85", "132", True, "json"),
    ("First the units.\n47 + 85 = 132", "47 + 85", "132", True, "equals"),
    ("47 + 85 = 122\nNo, the carry: 47 + 85 = 132", "47 + 85", "132", True, "equals"),  # the last statement stands
    ("15", "7 + 8", "15", True, "bare"),
    # what is never the answer
    ("<think>\nThe final answer is 15.\n</think>\n", "7 + 8", "15", False, "none: no answer after the thinking"),
    ("<think>\nThe final answer is 15, surely", "7 + 8", "15", False, "none: no answer after the thinking"),
    ("The final answer is 15.\nWorking: 7 + 8 = 16", "7 + 8", "15", False, "none: conflict"),  # working disagrees
    ("I think it is 15.\nLet me check.\n16", "7 + 8", "15", False, "none: no answer to the question stated"),
    ("The final answer is 15 or 16.", "7 + 8", "15", False, "none: a second numeral follows"),
    ('{"answer": 15.5}', "7 + 8", "15", False, "none: the JSON answer is float, not a numeral"),
    ('{"answer": [15]}', "7 + 8", "15", False, "none: the JSON answer is list, not a numeral"),
    ("Example: 32 + 78 = 110\nSo 110.", "7 + 8", "15", False, "none: no answer to the question stated"),
]


@pytest.mark.parametrize("output,expression,gold,verdict,rule", FREE_FORM, ids=[c[0][:40] for c in FREE_FORM])
def test_free_form_answers_are_read_after_the_thinking(output, expression, gold, verdict, rule):
    base = 16 if "f" in expression else 10
    extraction = extract(output, base, expression, FREE)
    assert is_correct(extraction.answer, gold, base) == verdict, extraction
    assert extraction.rule.startswith(rule), extraction


def test_a_truncated_free_form_output_is_its_own_verdict_and_the_first_line_is_read_whatever_its_length():
    cut = "Let me add. 7 + 8 = 15. And then"
    verdict = judge(cut, 10, "7 + 8", FREE, truncated=True)
    assert (verdict.answer, verdict.rule) == (None, TRUNCATED)
    assert judge(cut, 10, "7 + 8", FREE, truncated=False).answer == "15"
    assert judge("7 + 8 = 15", 10, "7 + 8", FIRST_LINE, truncated=True).answer == "15"


def test_a_marker_of_the_models_own_ends_the_thinking():
    mode = FreeForm(64, "</reasoning>")
    output = "<reasoning>The final answer is 16.\n</reasoning>\n7 + 8 = 15"
    assert mode.split(output) == ("<reasoning>The final answer is 16.\n</reasoning>", "\n7 + 8 = 15")
    assert extract(output, 10, "7 + 8", mode).answer == "15"
    assert extract(output, 10, "7 + 8", FREE).answer == "15", "a known block is never read, whatever --think-end"


def test_the_answer_mode_a_row_records_reads_back():
    for mode in (FIRST_LINE, FREE, FreeForm(64, "</reasoning>")):
        assert answer_mode(mode.describe()) == mode
    with pytest.raises(ValueError):
        answer_mode("free-form:many:</think>")


# Reasoning models' answers read as a careful grader reads them. (output, expression, base, mode,
# gold, right?, the rule that read it or a refusal's start)
KIMI_END, MAGISTRAL = FreeForm(512, "◁/think▷"), FreeForm(512, "[/THINK]")
REASONING_OUTPUTS = [
    # free form: thinking is never read, whatever its marker, closed or not
    ("[THINK]Adding: the final answer is 132.", "47 + 85", 10, MAGISTRAL, "132", False, "none: no answer after"),
    ("◁think▷The final answer is 132.", "47 + 85", 10, KIMI_END, "132", False, "none: no answer after"),
    ("◁think▷The final answer is 132.", "47 + 85", 10, FREE, "132", False, "none: no answer after"),
    ("[THINK]units[/THINK]The final answer is 132.", "47 + 85", 10, FREE, "132", True, "final"),
    (
        "<think>\nadd\n</think>\nThe answer is 15.\n<think>\nWait, the answer is 16",
        "7 + 8",
        10,
        FREE,
        "15",
        True,
        "final",
    ),
    # a corrected statement never stands; two final statements that differ are a conflict
    (
        "The final answer is 132. Wait, no — 47 + 85: 7 + 5 = 12, carry 1, 4 + 8 + 1 = 13, so it is 122.",
        "47 + 85",
        10,
        FREE,
        "132",
        False,
        "keyword",
    ),
    ("The final answer is 122.\nThe final answer is 132.", "47 + 85", 10, FREE, "132", False, "none: conflict"),
    ("47 + 85 = 122 (wrong)", "47 + 85", 10, FREE, "122", False, "none: no answer to the question"),
    ("47 + 85 = 122, which is wrong. 47 + 85 = 132", "47 + 85", 10, FREE, "132", True, "equals"),
    ("The answer is 132.\n(I first thought 122, but that was wrong.)", "47 + 85", 10, FREE, "132", True, "final"),
    # JSON by its key, however laid out, never from another field
    (
        '{\n  "reasoning": "47 + 85 = 132 after the carry",\n  "answer": 131\n}',
        "47 + 85",
        10,
        FREE,
        "132",
        False,
        "json",
    ),
    ('```json\n{\n  "answer": 132\n}\n```', "47 + 85", 10, FREE, "132", True, "json"),
    # a label's answer on the next line
    ("Final Answer:\n132", "47 + 85", 10, FREE, "132", True, "final"),
    ("**Final Answer**\n\n$$\n132\n$$", "47 + 85", 10, FREE, "132", True, "final"),
    # chains with any arithmetic on the way
    ("23 * 96 = 2300 - 92 = 2208", "23 * 96", 10, FREE, "2208", True, "equals"),
    ("23 * 96 = 23 * 90 + 23 * 6 = 2070 + 138 = 2208", "23 * 96", 10, FREE, "2208", True, "equals"),
    ("23 * 96 = (23 * 100) - (23 * 4) = 2208", "23 * 96", 10, FIRST_LINE, "2208", True, "equals"),
    # a line that continues an expression is about that expression
    ("Start with 27 + 48\n= 75\nthen add 19\n= 94", "27 + 48 + 19", 10, FREE, "75", False, "none"),
    # first line: bracketed, chained, in words, with bases
    ("(7 + 8) = 15", "7 + 8", 10, FIRST_LINE, "15", True, "equals"),
    ("7 + 8 = 16 - 1 = 15", "7 + 8", 10, FIRST_LINE, "15", True, "equals"),
    ("Answer = 15", "7 + 8", 10, FIRST_LINE, "15", True, "keyword"),
    ("<think>7 and 8 make 15</think>7 + 8 = 15", "7 + 8", 10, FIRST_LINE, "15", True, "equals"),
    ("47 plus 85 is 132.", "47 + 85", 10, FIRST_LINE, "132", True, "keyword"),
    ("7 times 8 is 56.", "7 * 8", 10, FIRST_LINE, "56", True, "keyword"),
    ("1011_2 + 110_2 = 10001_2", "1011 + 110", 2, FIRST_LINE, "10001", True, "equals"),
    ("1011 + 110 = 17₁₀ = 10001₂", "1011 + 110", 2, FIRST_LINE, "10001", True, "equals"),
    # a value marked with another base is read into the task's base (issue 55): 17 in base 10 is 10001 in base 2
    ("1011 + 110 = 17₁₀", "1011 + 110", 2, FIRST_LINE, "10001", True, "equals"),
    ("1011 + 110 = 19₂", "1011 + 110", 2, FIRST_LINE, "10001", False, "none"),
    # partial sums that add exactly the asked operands in order: their last sum
    ("27 + 48 = 75, 75 + 19 = 94", "27 + 48 + 19", 10, FIRST_LINE, "94", True, "steps"),
    ("27 + 48 = 75, 75 + 19 = 95", "27 + 48 + 19", 10, FIRST_LINE, "94", False, "steps"),
    ("27 + 48 = 76, 75 + 19 = 94", "27 + 48 + 19", 10, FIRST_LINE, "94", False, "none"),
    ("27 + 19 = 46, 46 + 48 = 94", "27 + 48 + 19", 10, FIRST_LINE, "94", False, "none"),
    ("27 + 48 = 75\n75 + 19 = 94", "27 + 48 + 19", 10, FREE, "94", True, "steps"),
]


@pytest.mark.parametrize(
    "output,expression,base,mode,gold,verdict,rule",
    REASONING_OUTPUTS,
    ids=[f"{c[0][:40]}|{c[3].name}" for c in REASONING_OUTPUTS],
)
def test_reasoning_outputs_are_read_as_a_careful_grader(output, expression, base, mode, gold, verdict, rule):
    extraction = extract(output, base, expression, mode)
    assert is_correct(extraction.answer, gold, base) == verdict, extraction
    assert extraction.rule.startswith(rule), extraction


def test_a_retracted_final_answer_reads_the_correction():
    output = "The final answer is 132. Wait, no — 47 + 85: 7 + 5 = 12, carry 1, 4 + 8 + 1 = 13, so it is 122."
    assert extract(output, 10, "47 + 85", FREE).answer == "122"


FREE_FORM_FORMATS = [  # (output, asked, base, the answer it states or None): how models that reason write
    (
        "<think>\nok\n</think>\n\nTo find 47 + 85:\n\n1. Add the units: 7 + 5 = 12, write 2 carry 1.\n"
        "2. Add the tens: 4 + 8 + 1 = 13.\n\nSo 47 + 85 = 132.\n\n**Final Answer**\n\\boxed{132}",
        "47 + 85",
        10,
        "132",
    ),
    ("The answer is $\\boxed{132}$.", "47 + 85", 10, "132"),
    ("<think>\n\n</think>\n\n47 + 85 = 132", "47 + 85", 10, "132"),
    ("analysisWe need 47+85. 47+85=132.assistantfinal132", "47 + 85", 10, "132"),
    ('```json\n{"answer": 132}\n```', "47 + 85", 10, "132"),
    ("The product is DC₁₆.", "2c * 5", 16, "dc"),
    ("2c * 5 = 0xDC", "2c * 5", 16, "dc"),
    ("47 + 85 = 132 ✓", "47 + 85", 10, "132"),
    ("36 + 57 + 28\n= 93 + 28\n= 121", "36 + 57 + 28", 10, "121"),
    ("<think>x</think>\n\n$$\n132\n$$", "47 + 85", 10, "132"),
    ("Hmm, 47 + 85 = 122? Let me check: 7 + 5 = 12, carry 1, 4 + 8 + 1 = 13. So 47 + 85 = 132.", "47 + 85", 10, "132"),
    ("So the answer should be 132.", "47 + 85", 10, "132"),
    ("47 + 85 gives 132.", "47 + 85", 10, "132"),
    ("1011 + 110 = 10001 (in binary)", "1011 + 110", 2, "10001"),
    ("Wait, I think I made a mistake. Let me recompute: 47 + 85 = 132.", "47 + 85", 10, "132"),
    ("47 + 85 = 122\nWait, I made a mistake. 47 + 85 = 132.", "47 + 85", 10, "132"),
    ("Step 1: 7 + 5 = 12\nStep 2: 4 + 8 + 1 = 13\nTherefore, 47 + 85 = 132.", "47 + 85", 10, "132"),
    (
        "Let me calculate 47 + 85.\n\n47 + 85 = 132\n\nLet me double check: 132 - 85 = 47. Yes, that's correct.\n\n"
        "The answer is 132.",
        "47 + 85",
        10,
        "132",
    ),
    ("**Answer:** 132", "47 + 85", 10, "132"),
    ("Answer: **132**", "47 + 85", 10, "132"),
    ("The sum of 47 and 85 is **132**.", "47 + 85", 10, "132"),
    ("$47 + 85 = 132$", "47 + 85", 10, "132"),
    ("Sure! Here's the calculation:\n\n47 + 85 = 132\n\nSo, the final answer is 132.", "47 + 85", 10, "132"),
    ("Sure! Here's the calculation:\n\n47 + 85 = 132\n\nSo, the final answer is 122.", "47 + 85", 10, None),
    ("36 + 57 = 93\n93 + 28 = 121\n\nThe answer is 121.", "36 + 57 + 28", 10, "121"),
    (
        "36 + 57 = 93\n93 + 28 = 121\n\nThe answer is 121.\n\n"
        "Wait, let me verify: 36 + 57 = 93, 93 + 28 = 121. Correct!",
        "36 + 57 + 28",
        10,
        "121",
    ),
    ("23 * 96\n= 23 * 100 - 23 * 4\n= 2300 - 92\n= 2208", "23 * 96", 10, "2208"),
    ('{"reasoning": "23 * 96 = 2208", "answer": "2208"}', "23 * 96", 10, "2208"),
    ('{"answer": 2208}\n{"answer": 2209}', "23 * 96", 10, None),
    ("The final answer is 132.\nWait, no. Let me recompute. 47 + 85 = 132. Yes.", "47 + 85", 10, "132"),
    ("47 + 85 = 132. Hmm, wait. Actually, 47 + 85 = 132. Final answer: 132", "47 + 85", 10, "132"),
    ("<think>47 + 85 = 132</think>\nThe answer is 131.", "47 + 85", 10, "131"),
    ("Answer: 132\n\nExplanation: 47 + 85 = 132 because 7 + 5 = 12.", "47 + 85", 10, "132"),
    ("Answer: 132\n\nExplanation: 47 + 85 = 131.", "47 + 85", 10, None),
    ("\\[\n\\begin{aligned}\n47 + 85 &= 132\n\\end{aligned}\n\\]", "47 + 85", 10, "132"),
    ("The result is 132 (one hundred thirty-two).", "47 + 85", 10, "132"),  # the same value restated in words
    ("The result is 132 (one hundred twenty-two).", "47 + 85", 10, None),
    ("47 + 85 = 132\n\nCheck: 10 + (47 + 85) = 142", "47 + 85", 10, "132"),
    ("First, add 47 and 85: 47 + 85 = 132.", "47 + 85", 10, "132"),
    ("Yes.", "47 + 85", 10, None),
    ("132.", "47 + 85", 10, "132"),
    ("The answer is 132. I hope it is correct.", "47 + 85", 10, "132"),
    ("Final Answer: The final answer is 132. I hope it is correct.", "47 + 85", 10, "132"),
    ("47 + 85 = 132\n\nNo further steps needed.", "47 + 85", 10, "132"),
    ("No, 47 + 85 is not 122. It is 132.", "47 + 85", 10, "132"),
    ("47 + 85 = 122. No wait, that's wrong. 47 + 85 = 132.", "47 + 85", 10, "132"),
    ("The answer is 122. Hmm, that doesn't seem right. The answer is 132.", "47 + 85", 10, None),
    ("Let's compute 58 + 67.\n58 + 67 = 125.\n\\boxed{125}", "58 + 67", 10, "125"),
    (
        "<|START_THINKING|>58 + 67 = 124?<|END_THINKING|><|START_RESPONSE|>\\boxed{125}<|END_RESPONSE|>",
        "58 + 67",
        10,
        "125",
    ),
]


@pytest.mark.parametrize("output,expression,base,answer", FREE_FORM_FORMATS, ids=[c[0][:40] for c in FREE_FORM_FORMATS])
def test_the_formats_of_reasoning_models_are_read_by_the_principle(output, expression, base, answer):
    assert extract(output, base, expression, FREE).answer == answer
