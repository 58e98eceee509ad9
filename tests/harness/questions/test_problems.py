"""The generator against Python integer arithmetic, across bases; determinism; the CLI and its file."""

import json
from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness.core.errors import UserError
from harness.questions.problems import DIGITS, Task, generate, load_dataset, parse_task, to_base
from tests.harness.helpers import run_module

tasks = st.one_of(
    st.just(Task("add")),
    st.builds(lambda k: Task("iter_add", k), st.integers(2, 6)),
    st.just(Task("mul")),
    st.builds(lambda digits: Task("mul", 2, digits), st.integers(1, 8)),
)


def test_a_truncation_longer_than_the_product_is_refused():
    with pytest.raises(UserError, match="l must be at most 2"):
        generate(Task("mul", 2, 3), 10, 1, count=5, seed=0)
    assert len(generate(Task("mul", 2, 2), 10, 1, count=5, seed=0)[0].answer) == 2


@settings(max_examples=300, deadline=None)
@given(task=tasks, base=st.integers(2, 36), length=st.integers(1, 14), seed=st.integers(0, 2**32 - 1))
def test_answers_match_python_integers(task, base, length, seed):
    assume(task.truncate is None or task.truncate <= 2 * length)  # MUL_p(n, l) takes l <= 2n; more is refused
    for problem in generate(task, base, length, count=5, seed=seed):
        values = [int(text, base) for text in problem.operands]
        assert len(values) == task.operands
        for text in problem.operands:
            assert 1 <= len(text) <= length
            assert set(text) <= set(DIGITS[:base])
            assert text == "0" or not text.startswith("0"), "leading zeros are stripped"
        if task.name == "mul":
            exact = values[0] * values[1]
            if task.truncate:
                assert problem.answer == to_base(exact % base**task.truncate, base).rjust(task.truncate, "0")
            else:
                assert int(problem.answer, base) == exact
        else:
            assert int(problem.answer, base) == sum(values)
        assert problem.answer == "0" or task.truncate or not problem.answer.startswith("0")
        assert len(problem.answer) <= task.max_answer_digits(base, length)
        assert problem.expression == f" {task.operator} ".join(problem.operands)


@given(value=st.integers(0, 10**40), base=st.integers(2, 36))
def test_to_base_round_trips(value, base):
    assert int(to_base(value, base), base) == value


def test_same_seed_same_problems_other_seed_other_problems():
    task = Task("iter_add", 3)
    first = generate(task, 10, 5, 200, seed=7)
    assert first == generate(task, 10, 5, 200, seed=7)
    assert [p.operands for p in first] != [p.operands for p in generate(task, 10, 5, 200, seed=8)]


def test_problem_i_does_not_depend_on_count_or_other_cells():
    task = Task("mul")
    many = generate(task, 10, 4, 500, seed=3)
    generate(Task("add"), 10, 4, 50, seed=3)  # another cell drawn in between changes nothing
    few = generate(task, 10, 4, 20, seed=3)
    assert few == many[:20]
    assert generate(task, 10, 4, 500, seed=3, start=480) == many[480:]


def test_cells_draw_different_streams():
    assert generate(Task("add"), 10, 6, 50)[0].operands != generate(Task("add"), 10, 7, 50)[0].operands


def test_digits_are_uniform():
    """Alg. get_data draws every digit uniformly from [0, base) before stripping zeros."""
    problems = generate(Task("iter_add", 3), 10, 9, 2000, seed=1)
    counts = Counter(d for p in problems for text in p.operands for d in text.rjust(9, "0"))
    expected = 2000 * 3 * 9 / 10
    assert set(counts) == set("0123456789")
    assert all(abs(c - expected) < 0.06 * expected for c in counts.values()), counts


@pytest.mark.parametrize(
    "label,expected",
    [
        ("add", Task("add")),
        ("iter_add:5", Task("iter_add", 5)),
        ("mul", Task("mul")),
        ("mul:trunc=3", Task("mul", 2, 3)),
    ],
)
def test_parse_task(label, expected):
    assert parse_task(label) == expected
    assert expected.label == label


@pytest.mark.parametrize("label", ["sub", "iter_add", "iter_add:1", "add:3", "mul:4", "iter_add:trunc=2", ""])
def test_parse_task_rejects(label):
    with pytest.raises(UserError):
        parse_task(label)


def test_cli_writes_problems_that_load_as_a_dataset(tmp_path):
    out = tmp_path / "problems.jsonl"
    result = run_module(
        "harness.problems",
        "--task",
        "iter_add:3",
        "--length",
        "5",
        "--base",
        "10",
        "--count",
        "1000",
        "--seed",
        "0",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 1000
    for record in records[:50]:
        assert {"task", "base", "length", "operands", "answer", "expression"} <= set(record)
        assert record["task"] == "iter_add" and len(record["operands"]) == 3
        assert int(record["answer"]) == sum(int(x) for x in record["operands"])
    dataset = load_dataset(out)
    assert dataset.num_rows == 1000
    assert dataset[17]["operands"] == records[17]["operands"]
    again = tmp_path / "again.jsonl"
    run_module(
        "harness.problems",
        "--task",
        "iter_add:3",
        "--length",
        "5",
        "--count",
        "1000",
        "--out",
        str(again),
    )
    assert again.read_bytes() == out.read_bytes(), "same seed, same file"


def test_cli_takes_the_task_syntax_of_harness_eval(tmp_path):
    """One task syntax everywhere: mul:trunc=L writes the L least significant digits, zeros kept."""
    out = tmp_path / "trunc.jsonl"
    result = run_module(
        "harness.problems", "--task", "mul:trunc=3", "--length", "4", "--count", "50", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    for record in records:
        a, b = (int(x) for x in record["operands"])
        assert record["truncate"] == 3 and record["answer"] == str(a * b % 1000).rjust(3, "0")
