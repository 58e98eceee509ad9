"""Error anatomy: carry chains computed column by column, digit positions aligned at the last digit."""

import matplotlib.image
import pytest

from harness.anatomy import anatomy_plot_png, anatomy_rows, digit_hits, longest_carry_chain


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
