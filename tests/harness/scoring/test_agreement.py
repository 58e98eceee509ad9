"""Issue 55's forms, each read by its value: the same answer restated in another form (a base marked, words, the
last L digits of a truncated product, a confirmation after a check) agrees, a different one conflicts; retractions
take back only what they point at; working never conflicts; labels that name the operands are labels; a list marker
is layout. Then outputs that must never be credited, whatever their form."""

from __future__ import annotations

import pytest

from harness.questions.answers import FIRST_LINE, FreeForm
from harness.scoring import extract, is_correct

F, L = FreeForm(512), FIRST_LINE

# (mode, output, asked, base, what it reads (None: no answer), last_digits)
FORMS = [
    (F, "58 + 67 = 125\nLet me recheck: 125 - 67 = 58. So 125 is right.", "58 + 67", 10, "125", None),
    (F, "The answer is 125.\nDouble-check: 58 + 67 = 125 ✓. Yes, 125.", "58 + 67", 10, "125", None),
    (F, "47 + 85 = 132\nVerifying: 132 - 85 = 47, correct, the sum is 132.", "47 + 85", 10, "132", None),
    (F, "The answer is 10001 (in base 2), which is 17 in base 10.", "1011 + 110", 2, "10001", None),
    (F, "1011 + 110 = 10001₂ = 17₁₀", "1011 + 110", 2, "10001", None),
    (L, "1011 + 110 = 10001₂ = 17₁₀", "1011 + 110", 2, "10001", None),
    (F, "5f + f = 6e (hex)", "5f + f", 16, "6e", None),
    (L, "The answer is 0x6E.", "5f + f", 16, "6e", None),
    (F, "5f + f = 6e_{16} (110 in base 10)", "5f + f", 16, "6e", None),
    (F, "The answer is (6E)_16.", "5f + f", 16, "6e", None),
    (F, "5f + f = 110 (in base 10) = 6e", "5f + f", 16, "6e", None),
    (L, "1011 + 110 = 17 (in base 10)", "1011 + 110", 2, "10001", None),
    (F, "53 * 490 = 25970, so the last 2 digits are 70.", "53 * 490", 10, "70", 2),
    (L, "53 * 490 = 25970, so the last 2 digits are 70.", "53 * 490", 10, "70", 2),
    (F, "The product is 25970; its last 2 digits: 70", "53 * 490", 10, "70", 2),
    (F, "47 + 44 = 91\nSo the total is ninety-two.", "47 + 44", 10, None, None),
    (F, "47 + 44 = 91, so the total is ninety-one.", "47 + 44", 10, "91", None),
    (F, "The answer is one hundred thirty-two.", "47 + 85", 10, "132", None),
    (L, "47 + 85 = 132 (one hundred thirty-two)", "47 + 85", 10, "132", None),
    (F, "The answer is 132 (in base 10).", "47 + 85", 10, "132", None),
    (F, "The answer is 132.\nNo correction needed.", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 132\nI made an error earlier in the units but fixed it above.", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 132\nDid I forget the carry? No, I included it.", "47 + 85", 10, "132", None),
    (F, "The final answer is 132.\nWait, actually the answer is 122.", "47 + 85", 10, "122", None),
    (F, "47 + 85 = 132\nHmm, let me start over.", "47 + 85", 10, None, None),
    (F, "47 + 85 = 122\nThat's wrong.", "47 + 85", 10, None, None),
    (F, "The answer is 125. Correction: it is 126.", "58 + 67", 10, "126", None),
    (F, "47 + 85 = 132\nMy earlier mistake with the carry is corrected now.", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 122\nWait, actually 47 + 85 = 132.", "47 + 85", 10, "132", None),
    (F, "Let me start over.\n47 + 85 = 132", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 122, wait let me redo this from scratch.", "47 + 85", 10, None, None),
    (F, "27 + 48 = 75\n75 + 19 = 94\nThe answer is 95.", "27 + 48 + 19", 10, "95", None),
    (F, "27 + 48 = 75, 75 + 19 = 94\nSo the final answer is 94.", "27 + 48 + 19", 10, "94", None),
    (F, "The answer is 125.\nCheck: 67 + 58 = 125.", "58 + 67", 10, "125", None),
    (F, "The sum of the three numbers is 94.", "27 + 48 + 19", 10, "94", None),
    (L, "The sum of the three numbers is 94.", "27 + 48 + 19", 10, "94", None),
    (L, "Their product is 2208.", "23 * 96", 10, "2208", None),
    (F, "The total of these is 94.", "27 + 48 + 19", 10, "94", None),
    (F, "The sum of the three numbers is:\n94", "27 + 48 + 19", 10, "94", None),
    (F, "- 47 + 85 = 132", "47 + 85", 10, "132", None),
    (L, "- 47 + 85 = 132", "47 + 85", 10, "132", None),
    (F, "Steps:\n- 7 + 5 = 12\n- 40 + 80 = 120\n- 47 + 85 = 132", "47 + 85", 10, "132", None),
    (F, "1. 47 + 85 = 132", "47 + 85", 10, "132", None),
    (L, "* The answer is 132", "47 + 85", 10, "132", None),
    (F, "The sum of both numbers is 132.", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 122\nLet me start over.", "47 + 85", 10, None, None),
    (F, "The answer is 122.\nActually, no: the answer is 132.", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 132. So the total is one hundred twenty-two.", "47 + 85", 10, None, None),
    (F, "1011 + 110 = 10010₂ = 17₁₀", "1011 + 110", 2, None, None),
    (F, "53 * 490 = 25970, so the last 2 digits are 71", "53 * 490", 10, None, 2),
    (L, "- 15", "7 + 8", 10, "15", None),
    (L, "-15", "7 + 8", 10, None, None),
    (F, "The sum of the first two numbers is 75.", "27 + 48 + 19", 10, None, None),
    (F, "Is the answer 122? No, it is 132.", "47 + 85", 10, "132", None),
    (F, "The answer is 132. Is that right? No doubt about it.", "47 + 85", 10, "132", None),
    (F, "The answer is 132.\nLet me check for errors. No, there are none.", "47 + 85", 10, "132", None),
    (F, "7 * 15 = 105\nSo the last 2 digits of 7 * 15 are 05.", "7 * 15", 10, "05", 2),
    (L, "7 * 15 = 105", "7 * 15", 10, "05", 2),
]

# (mode, output, asked, base, gold, last_digits): none of these states the gold answer as its one answer
NEVER_CREDITED = [
    (F, "47 + 85 = 132\nSo the total is one hundred twenty-two.", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 132. Is that right? No, it is 122.", "47 + 85", 10, "132", None),
    (F, "The answer is 132.\nIs that correct? No.", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 132\nLet me start over.", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 132\nWait, actually the answer is 122.", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 132\nActually, it's 142.", "47 + 85", 10, "132", None),
    (F, "The answer is 132. Correction: 142.", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 132, correction: 142", "47 + 85", 10, "132", None),
    (F, "27 + 48 = 75, 75 + 19 = 94\nThat's wrong.", "27 + 48 + 19", 10, "94", None),
    (F, "1011 + 110 = 10001₂ = 18₁₀", "1011 + 110", 2, "10001", None),
    (L, "1011 + 110 = 10001₂ = 18₁₀", "1011 + 110", 2, "10001", None),
    (F, "5f + f = 6e (111 in base 10)", "5f + f", 16, "6e", None),
    (L, "47 + 85 = 132 (one hundred forty-two)", "47 + 85", 10, "132", None),
    (F, "53 * 490 = 25970, so the last 2 digits are 71.", "53 * 490", 10, "70", 2),
    (F, "53 * 490 = 25971", "53 * 490", 10, "70", 2),
    (F, "The sum of the first two numbers is 94.\nThe total is 95.", "27 + 48 + 19", 10, "94", None),
    (F, "- 47 + 85 = -132", "47 + 85", 10, "132", None),
    (L, "The answer is 132? Not sure.", "47 + 85", 10, "132", None),
    (F, "The answer is 122.\nCheck: 47 + 85 = 132.", "47 + 85", 10, "132", None),
    (F, "Is the answer 132? No, it is 122.", "47 + 85", 10, "132", None),
    (F, "The answer is 132.\nI made a mistake: the answer is 131.", "47 + 85", 10, "132", None),
    (F, "The answer is one hundred thirty-two.\nNo, one hundred thirty-one.", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 132\nNo wait, 47 + 85 = 131.", "47 + 85", 10, "132", None),
    (F, "The answer is 132.\nHmm, I'll redo this.", "47 + 85", 10, "132", None),
    (L, "132 + 1 = 133", "47 + 85", 10, "132", None),
    (F, "The sum of 47 and 85 is 131, so 132 is wrong.", "47 + 85", 10, "132", None),
    (F, "47 + 85 = 0x85", "47 + 85", 10, "132", None),
    (F, "The answer is 132 (in base 16).", "47 + 85", 10, "132", None),
    (F, "The answer is 1,32.", "47 + 85", 10, "132", None),
    (F, "Their sum is 131. 47 + 85 = 132 is what I first thought, but no.", "47 + 85", 10, "132", None),
]


def _id(case) -> str:
    return ("F:" if case[0] is F else "L:") + case[1][:48]


@pytest.mark.parametrize("case", FORMS, ids=[_id(case) for case in FORMS])
def test_each_form_reads_by_its_value(case):
    mode, output, asked, base, reads, last_digits = case
    answer = extract(output, base, asked, mode, last_digits).answer
    assert (answer if answer is None else answer.lstrip("0")) == (reads if reads is None else reads.lstrip("0"))


@pytest.mark.parametrize("case", NEVER_CREDITED, ids=[_id(case) for case in NEVER_CREDITED])
def test_an_answer_not_stated_as_the_one_answer_is_never_credited(case):
    mode, output, asked, base, gold, last_digits = case
    extraction = extract(output, base, asked, mode, last_digits)
    assert not is_correct(extraction.answer, gold, base), extraction
