"""Every rule of the scorer as a record: its name (what samples.jsonl records as ``rule``), the answer modes it serves,
what it finds, and its examples. The examples are the tests (tests/harness/scoring/test_examples.py runs each in
each of its modes) and docs/scoring.md's table of rules is generated from them (``python -m harness.scoring.docs``;
a test fails when the page differs): the rules are written once, here.

The rules without a name of their own ("(none)", "conflict", "(any)") are the principle's: what is never an answer,
what two differing statements are, what holds before any rule reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.scoring.verdicts import Refusal, differing, unexplained_number

BOTH, FIRST, FREE = "both", "first line", "free form"


@dataclass(frozen=True)
class Example:
    """An output, the expression it was asked (in ``base``; of which the last ``last_digits`` digits), what it reads
    (None: no answer) and the rule recorded (a refusal's text where it reads none), in the answer ``modes`` given."""

    output: str
    asked: str
    reads: str | None
    rule: str
    base: int = 10
    modes: str = BOTH
    last_digits: int | None = None  # the task asks for the last L digits (mul:trunc=L)


@dataclass(frozen=True)
class Reader:
    rule: str
    finds: str
    examples: tuple[Example, ...]


def _none(refusal: Refusal) -> str:
    return refusal.value


def _differ(*answers: str) -> str:
    return differing(answers).rule


def _never_leaves_thinking(output: str) -> Example:
    """An output whose thinking is never closed: no answer, whatever it says."""
    return Example(output, "47 + 85", None, _none(Refusal.NOTHING_AFTER_THINKING), modes=FREE)


READERS = (
    Reader(
        "equals",
        "an equation whose left side is the asked expression, its operands in any order, bare or bracketed (flattened"
        " where every operator is the same), or a chain from it through any arithmetic: its last side",
        (
            Example("41 + 430 = 471", "430 + 41", "471", "equals"),
            Example("(7 + 8) = 15", "7 + 8", "15", "equals"),
            Example("(36 + 57) + 28 = 121", "36 + 57 + 28", "121", "equals"),
            Example("23 * 96 = 23 * 90 + 23 * 6 = 2070 + 138 = 2208", "23 * 96", "2208", "equals"),
            Example("1011 + 110 = 17₁₀ = 10001₂", "1011 + 110", "10001", "equals", base=2),
            Example("1011 + 110 = 10001₂ = 17₁₀", "1011 + 110", "10001", "equals", base=2),
            Example("5f + f = 110 (in base 10) = 6e", "5f + f", "6e", "equals", base=16),
            Example("= 15", "7 + 8", "15", "equals", modes=FIRST),
            Example("\\[ 58 + 67 &= 120 + 5 \\\\\n&= 125 \\]", "58 + 67", "125", "equals", modes=FREE),
            Example("58 + 67 =\n125", "58 + 67", "125", "equals", modes=FREE),
        ),
    ),
    Reader(
        "keyword",
        '"the answer / result / sum / product / total / value [of, to or for X] is / are / equals / :", "answer ='
        ' N", "X is N" (operators in words read as signs), "X, which is N", "the last L digits of X are N"',
        (
            Example("The answer to 47 + 85 is 132.", "47 + 85", "132", "keyword", modes=FIRST),
            Example("Answer = 15", "7 + 8", "15", "keyword", modes=FIRST),
            Example("47 plus 85 is 132.", "47 + 85", "132", "keyword"),
            Example("2c times 5 is dc", "2c * 5", "dc", "keyword", base=16),
            Example("The expression is 3 + 1, which is 4.", "3 + 1", "4", "keyword"),
            Example("The last 2 digits of 7 * 15 are 05.", "7 * 15", "05", "keyword"),
            Example("53 * 490 = 25970, so the last 2 digits are 70.", "53 * 490", "70", "keyword", last_digits=2),
            Example("The answer is 0x84.", "47 + 85", "132", "keyword", modes=FIRST),
            Example(
                "The answer is 10001 (in base 2), which is 17 in base 10.", "1011 + 110", "10001", "keyword", base=2
            ),
            Example("So the total is one hundred thirty-two.", "47 + 85", "132", "keyword"),
            Example("The sum of the three numbers is 94.", "27 + 48 + 19", "94", "keyword"),
            Example("Their product is 2208.", "23 * 96", "2208", "keyword"),
            Example("1. The answer is 132.", "47 + 85", "132", "keyword", modes=FIRST),
            Example(
                "Final Answer: The final answer is $15$. I hope it is correct.", "7 + 8", "15", "keyword", modes=FIRST
            ),
            Example("Final Answer 132", "47 + 85", "132", "keyword", modes=FIRST),
            Example("Final answer — 132", "47 + 85", "132", "final", modes=FREE),
            Example("The last two digits are 70.", "53 * 490", "70", "keyword", last_digits=2),
            Example("Is it 125? Yes, 125.", "58 + 67", "125", "keyword", modes=FREE),
            Example("58 + 67 = 125\nDouble-check: 125 - 67 = 58 ✓. Yes, 125.", "58 + 67", "125", "keyword", modes=FREE),
        ),
    ),
    Reader(
        "boxed",
        "inside `\\boxed{...}`, braces balanced (an equation in it read as an equation)",
        (Example("\\boxed{6E_{16}}", "5f + f", "6e", "boxed", base=16),),
    ),
    Reader(
        "bare",
        "the whole line is the numeral (free form: all that follows the thinking)",
        (Example("**541**", "430 + 111", "541", "bare"),),
    ),
    Reader(
        "steps",
        "where nothing is stated: partial sums that take the asked operands in order, each from the result before,"
        " ending on the asked computation: the last (a wrong step gives a wrong answer)",
        (
            Example("27 + 48 = 75, 75 + 19 = 94", "27 + 48 + 19", "94", "steps"),
            Example("27 + 48 = 75, 75 + 19 = 95", "27 + 48 + 19", "95", "steps"),
            Example("27 + 19 = 46, 46 + 48 = 94", "27 + 48 + 19", None, _none(Refusal.ABOUT_OTHERS), modes=FIRST),
            Example(
                "36 + 57 = 93, 93 + 28 = 121, 121 + 10 = 131",
                "36 + 57 + 28",
                None,
                _none(Refusal.NOT_THE_QUESTION),
                modes=FREE,
            ),
            Example(
                "36 + 57 = 93\n93 + 28 = 121\nWait, that's wrong.",
                "36 + 57 + 28",
                None,
                _none(Refusal.NOT_THE_QUESTION),
                modes=FREE,
            ),
        ),
    ),
    Reader(
        "final",
        "a statement on a line that says it gives the final answer, or a label's answer on the next line",
        (
            Example("Adding the units: 7 + 8 = 15.\nAnswer: 15", "7 + 8", "15", "final", modes=FREE),
            Example("**Final Answer**\n\n$$\n132\n$$", "47 + 85", "132", "final", modes=FREE),
            Example("The sum is:\n\n125", "58 + 67", "125", "final", modes=FREE),
            Example("The sum of the three numbers is:\n94", "27 + 48 + 19", "94", "final", modes=FREE),
            Example(
                "58 + 67 = 125\nLet me recheck: 125 - 67 = 58. Correct.\nThe answer is 125.",
                "58 + 67",
                "125",
                "final",
                modes=FREE,
            ),
        ),
    ),
    Reader(
        "json",
        "the `answer` (`final_answer`, `result`) field of a JSON object, however laid out or written (trailing"
        " commas, comments, single quotes, prose around it); never another field",
        (
            Example('{\n  "reasoning": "47 + 85 = 132",\n  "answer": 131\n}', "47 + 85", "131", "json", modes=FREE),
            Example("Here it is: {'work': '58 + 67 = 125', 'answer': 124,}", "58 + 67", "124", "json", modes=FREE),
            Example('{"answer": 124, // 58 + 67\n "work": "58 + 67 = 125"}', "58 + 67", "124", "json", modes=FREE),
        ),
    ),
    Reader(
        "conflict",
        "statements of the answer whose values differ (in any base marked, in words, after the task's last-L-digits"
        " transform), with no retraction between them: never correct",
        (
            Example("7 * 8 = 56. So the answer is 54.", "7 * 8", None, _differ("56", "54")),
            Example("\\boxed{15} or \\boxed{16}", "7 + 8", None, _differ("15", "16")),
            Example(
                "58 + 67 = 125\nThe final answer is 124.\nWait, let me double-check.",
                "58 + 67",
                None,
                _differ("125", "124"),
                modes=FREE,
            ),
            Example("58 + 67 = 125\n\\boxed{124}\nOops.", "58 + 67", None, _differ("125", "124"), modes=FREE),
            Example('58 + 67 = 125\n{"answer": 124}\nWait.', "58 + 67", None, _differ("125", "124"), modes=FREE),
            Example(
                "The final answer is 122.\nThe final answer is 132.",
                "47 + 85",
                None,
                _differ("122", "132"),
                modes=FREE,
            ),
            Example("47 + 85 = 132. So the total is one hundred twenty-two.", "47 + 85", None, _differ("132", "122")),
            Example("1011 + 110 = 10010₂ = 17₁₀", "1011 + 110", None, _differ("10010", "10001"), base=2),
            Example("The sum is 132.\nFinal Answer 122", "47 + 85", None, _differ("132", "122"), modes=FREE),
            Example("The sum is 132.\nFinal answer — 122", "47 + 85", None, _differ("132", "122"), modes=FREE),
            Example(
                "53 * 490 = 25970, so the last three digits are 971.",
                "53 * 490",
                None,
                _differ("25970", "971"),
                last_digits=3,
            ),
            Example(
                "53 * 490 = 25970, so the last 2 digits are 71.",
                "53 * 490",
                None,
                _differ("25970", "71"),
                last_digits=2,
            ),
        ),
    ),
    Reader(
        "(doubt)",
        "default to doubt: once an answer is read, every other numeral and number word of the answer part must be"
        " explained (the answer restated, an operand, working that holds, a digit, a partial sum or product, a prompt"
        " example's, a percentage, a base's name, a value asked or denied); a value none explains is a conflict,"
        " its words shown (base 10; harness/scoring/doubt.py)",
        (
            Example(
                "The answer is 132. In words: one hundred twenty-two.",
                "47 + 85",
                None,
                unexplained_number("one hundred twenty-two").rule,
            ),
            Example(
                "47 + 85 = 132\nThat's 122 once the carry is dropped.",
                "47 + 85",
                None,
                unexplained_number("122").rule,
                modes=FREE,
            ),
            Example("7 + 5 = 12, carry 1; 4 + 8 + 1 = 13; so 47 + 85 = 132.", "47 + 85", "132", "equals"),
            Example(
                "7 and 5 make 12; 4 and 8 and 1 make 13. The answer is 132.", "47 + 85", "132", "final", modes=FREE
            ),
            Example(
                "The tens (40 + 80 = 120) and the ones (7 + 5 = 12).\nThe answer is 132.",
                "47 + 85",
                "132",
                "final",
                modes=FREE,
            ),
            Example("23 * 96 = 2070 + 138 = 2208", "23 * 96", "2208", "equals"),
            Example("47 + 85 = 132\nI'm 100% sure of it.", "47 + 85", "132", "equals", modes=FREE),
            Example("Is it 122? No: 47 + 85 = 132.", "47 + 85", "132", "equals"),
            Example("47 + 85 = 132 (that's one hundred thirty-two).", "47 + 85", "132", "equals"),
            Example("47 + 85 = 132 (which is 0x84)", "47 + 85", "132", "equals"),
            Example("47 + 85 = 132 (that's 0x85)", "47 + 85", None, _none(Refusal.SECOND_NUMERAL)),
        ),
    ),
    Reader(
        "(retraction)",
        "a retraction takes back only what it points at: the answer just stated (or the line of working just read)"
        ' is void and what follows stands; "actually" replaces only where a new answer follows; "let me start'
        ' over" voids everything before it. A noun, an error owned as fixed, a "No" answering the output\'s own'
        ' question or denying an error, doubt, a condition or pleasantry ("tell me if I made a mistake"), a'
        ' denial ("nothing was wrong") and "from scratch" saying how the work was done take back nothing',
        (
            Example("47 + 85 = 122\nNo, the carry: 47 + 85 = 132", "47 + 85", "132", "equals", modes=FREE),
            Example(
                "The final answer is 132. Wait, no: 7 + 5 = 12, so it is 122.", "47 + 85", "122", "keyword", modes=FREE
            ),
            Example("47 + 85 = 122\nI forgot the carry, so it is 132.", "47 + 85", "132", "keyword", modes=FREE),
            Example("47 + 85 = 122 (wrong)", "47 + 85", None, _none(Refusal.NOT_THE_QUESTION), modes=FREE),
            Example("The answer is 122, no — it is 132.", "47 + 85", "132", "keyword", modes=FREE),
            Example(
                "The final answer is 132.\nWait, actually the answer is 122.", "47 + 85", "122", "final", modes=FREE
            ),
            Example("The answer is 132.\nWait, actually, let me double-check.", "47 + 85", "132", "final", modes=FREE),
            Example("47 + 85 = 122\nLet me start over.", "47 + 85", None, _none(Refusal.NOT_THE_QUESTION), modes=FREE),
            Example(
                "27 + 48 = 75, 75 + 19 = 95\nThat's wrong.",
                "27 + 48 + 19",
                None,
                _none(Refusal.NOT_THE_QUESTION),
                modes=FREE,
            ),
            Example("The answer is 132.\nNo correction needed.", "47 + 85", "132", "final", modes=FREE),
            Example(
                "47 + 85 = 132\nI made an error earlier but fixed it above.", "47 + 85", "132", "equals", modes=FREE
            ),
            Example(
                "47 + 85 = 132\nDid I forget the carry? No, I included it.", "47 + 85", "132", "equals", modes=FREE
            ),
            Example("Is it 122? No, it is 132.", "47 + 85", "132", "keyword", modes=FREE),
            Example("47 + 85 = 132. Tell me if I got anything wrong!", "47 + 85", "132", "equals"),
            Example("47 + 85 = 132. Let me know if my answer is wrong.", "47 + 85", "132", "final", modes=FREE),
            Example("47 + 85 = 132\nNothing was wrong with the carry.", "47 + 85", "132", "equals", modes=FREE),
            Example("47 + 85 = 132, computed from scratch.", "47 + 85", "132", "equals"),
            Example(
                "47 + 85 = 122\nTell me if I made a mistake.\nThe answer is 132.",
                "47 + 85",
                None,
                _differ("122", "132"),
                modes=FREE,
            ),
            Example("47 + 85 = 122\nLet me start from scratch: 47 + 85 = 132", "47 + 85", "132", "equals", modes=FREE),
        ),
    ),
    Reader(
        "(any)",
        "thinking is never read, whatever its marker, closed or not; operands may carry the task's base; a list"
        " marker opening a line (`- `, `* `, `1. `), bold markers around or inside an equation, LaTeX's spacing and"
        " grouping within a number (`5\\,124`, `5{,}124`) and full-width or CJK punctuation (`。`, `，`) are layout,"
        " not signs",
        (
            Example("<think>7 and 8 make 15</think>7 + 8 = 15", "7 + 8", "15", "equals"),
            _never_leaves_thinking("[THINK]The final answer is 132."),
            _never_leaves_thinking("<|START_THINKING|>The final answer is 132."),
            _never_leaves_thinking("<|channel|>analysis<|message|>The final answer is 132."),
            Example(
                "<|channel|>analysis<|message|>132<|end|><|start|>assistant<|channel|>final<|message|>"
                "The answer is 132.<|return|>",
                "47 + 85",
                "132",
                "final",
                modes=FREE,
            ),
            Example("1011_2 + 110_2 = 10001_2", "1011 + 110", "10001", "equals", base=2),
            Example("- 47 + 85 = 132", "47 + 85", "132", "equals"),
            Example("**47** + **85** = **132**", "47 + 85", "132", "equals"),
            Example("$1234 + 3890 = 5{,}124$", "1234 + 3890", "5124", "equals"),
            Example("$1234 + 3890 = 5\\,124$", "1234 + 3890", "5124", "equals"),
            Example("47 + 85 = 132。", "47 + 85", "132", "equals"),
            Example("47 + 85 = 132，which is the sum.", "47 + 85", "132", "equals"),
        ),
    ),
    Reader(
        "(none)",
        "working is never the answer, and never conflicts with one: an equation about another expression, a partial"
        " sum, a check, the prompt's examples (one cited with its result leaves the line's statement to the question),"
        " a question the output invents and its answer; nor a hedged, negated or continued statement",
        (
            Example("First, 12 + 34 = 46.", "12 + 34 + 56", None, _none(Refusal.ABOUT_OTHERS), modes=FIRST),
            Example("58 + 67 = 124\nCheck: 10 + (58 + 67) = 125", "58 + 67", "124", "equals", modes=FREE),
            Example("27 + 48 = 75, 75 + 19 = 94\nThe answer is 95.", "27 + 48 + 19", "95", "final", modes=FREE),
            Example("The answer is 125.\nCheck: 67 + 58 = 124.", "58 + 67", "125", "final", modes=FREE),
            Example("For 32 + 78, the answer is 110.", "55 + 55", None, _none(Refusal.NOTHING_STATED), modes=FIRST),
            Example("Start with 27 + 48\n= 75", "27 + 48 + 19", None, _none(Refusal.NOT_THE_QUESTION), modes=FREE),
            Example("123 + 389 = 512. Question: 2 + 2? Answer: 4", "123 + 389", "512", "equals"),
            Example("123 + 389 = 512\nQuestion: 2 + 2\nAnswer: 4", "123 + 389", "512", "equals", modes=FREE),
            Example("Question: 123 + 389\nAnswer: 512", "123 + 389", "512", "final", modes=FREE),
            Example("As in the example 32 + 78 = 110, the answer is 512.", "123 + 389", "512", "keyword", modes=FIRST),
            Example("7 + 8 = 15. Wait, 16.", "7 + 8", None, _none(Refusal.NUMBER_AFTER)),
            Example("Not 7 + 8 = 15", "7 + 8", None, _none(Refusal.NEGATED)),
            Example("The answer is -15.", "7 + 8", None, _none(Refusal.SIGNED)),
        ),
    ),
)


def examples() -> list[tuple[Reader, Example]]:
    """Every example with its reader, in the table's order."""
    return [(reader, example) for reader in READERS for example in reader.examples]
