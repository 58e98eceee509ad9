"""Error anatomy: carry chains computed column by column, digit positions aligned at the last digit."""

import matplotlib.image
import pytest

from harness.reports.anatomy import anatomy_plot_png, anatomy_rows, digit_hits, longest_carry_chain


@pytest.mark.parametrize(
    "task,operands,base,chain",
    [
        ("add", ["999", "1"], 10, 3),  # 9+1 carries, then 9+0+1 twice
        ("add", ["123", "456"], 10, 0),
        ("add", ["1", "1"], 2, 1),
        ("add", ["1011", "1"], 2, 2),  # two carries, then the third column has none
        ("iter_add", ["9", "9", "9"], 10, 1),  # a carry of 2 is a carry
        ("add", ["f", "1"], 16, 1),
        ("mul", ["5", "5"], 10, 1),
        ("mul", ["99", "99"], 10, 3),  # columns 81, 162, 81: carries 8, 17, 9
        ("mul", ["11", "11"], 10, 0),
    ],
)
def test_longest_carry_chain(task, operands, base, chain):
    assert longest_carry_chain(task, operands, base) == chain


def test_digit_positions_align_at_the_last_digit():
    assert digit_hits("125", "123") == [False, True, True]
    assert digit_hits("0015", "15") == [True, True]
    assert digit_hits("5", "15") == [True, False]
    assert digit_hits(None, "15") == [False, False]
    assert digit_hits("AB", "ab") == [True, True]


def test_rows_and_plot_of_a_cell(tmp_path):
    samples = [
        {
            "model": "m",
            "task": "add",
            "base": 10,
            "length": 3,
            "expression": "999 + 1",
            "gold": "1000",
            "extracted": "990",
            "correct": False,
        },
        {
            "model": "m",
            "task": "add",
            "base": 10,
            "length": 3,
            "expression": "123 + 456",
            "gold": "579",
            "extracted": "579",
            "correct": True,
        },
    ]
    rows = anatomy_rows(samples, lambda s: s["model"], lambda s: s["task"])
    chains = {(r.value, r.n, r.correct) for r in rows if r.kind == "carry_chain"}
    assert chains == {(3, 1, 0), (0, 1, 1)}
    positions = {r.value: (r.n, r.correct) for r in rows if r.kind == "digit_position"}
    assert positions == {0: (2, 2), 1: (2, 1), 2: (2, 1), 3: (1, 0)}  # 990 vs 1000: the units digit only is right
    path = tmp_path / "anatomy.png"
    path.write_bytes(anatomy_plot_png(rows))
    assert matplotlib.image.imread(path).shape[0] > 300, "two panels: carry chains over digit positions"


def test_truncated_products_are_judged_digit_by_digit_as_exact_match_judges_them():
    """mul:trunc=L: "1" is the gold "01" by exact match, so it is right at both positions; the carry chain counts
    only the carries into the L columns asked for (99 * 99 = 9801 carries into columns 1, 2 and 3)."""
    assert digit_hits("1", "01") == [True, True]
    assert digit_hits("01", "1") == [True]
    assert digit_hits("001", "01") == [True, True]
    assert [longest_carry_chain("mul", ["99", "99"], 10, truncate) for truncate in (1, 2, 3, 4)] == [0, 1, 2, 3]
    sample = {
        "model": "m",
        "task": "mul",
        "truncate": 2,
        "base": 10,
        "length": 2,
        "expression": "99 * 99",
        "gold": "01",
        "extracted": "1",
        "correct": True,
    }
    rows = anatomy_rows([sample], lambda s: s["model"], lambda s: "mul:trunc=2")
    assert {(r.kind, r.value, r.correct) for r in rows} == {
        ("carry_chain", 1, 1),
        ("digit_position", 0, 1),
        ("digit_position", 1, 1),
    }


def test_an_answer_right_by_exact_match_is_right_at_every_digit():
    from harness.questions.problems import Task, generate
    from harness.scoring import is_correct

    for task in (Task("add"), Task("mul"), Task("mul", truncate=3)):
        for problem in generate(task, 10, 3, 50, seed=1):
            for stated in (problem.answer, problem.answer.lstrip("0") or "0", "00" + problem.answer):
                assert is_correct(stated, problem.answer, 10)
                assert all(digit_hits(stated, problem.answer)), (stated, problem.answer)


def test_the_summary_says_what_the_chain_means_per_task():
    from harness.reports.anatomy import anatomy_markdown

    samples = [
        {
            "model": "m",
            "task": task,
            "base": 10,
            "length": 1,
            "expression": expression,
            "gold": gold,
            "extracted": gold,
            "correct": True,
        }
        for task, expression, gold in (("add", "5 + 5", "10"), ("mul", "5 * 5", "25"))
    ]
    text = "\n".join(anatomy_markdown(anatomy_rows(samples, lambda s: s["model"], lambda s: s["task"])))
    assert "- mul: mostly the answer's length" in text and "- add: how far a carry travels" in text
    assert "| m | 0/0 |" not in text and "| m | 1/1 |" in text
