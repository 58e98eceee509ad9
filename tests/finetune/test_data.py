"""The fine-tuning set: the paper's counts and lengths, correct answers, disjoint from evaluation."""

from collections import Counter

import pytest

from finetune.data import PAPER_COUNTS, build, sample_counts
from harness.questions.problems import Task, generate


def test_paper_counts():
    """§6: 60k samples per task, 5k per length 1-6 and 10k per length 7-9."""
    assert sum(PAPER_COUNTS.values()) == 60_000
    assert [PAPER_COUNTS[n] for n in range(1, 10)] == [5000] * 6 + [10_000] * 3


@pytest.fixture(scope="module")
def full_add():
    return build(Task("add"), seed=0, scale=1.0)


def test_full_set_has_the_papers_shape(full_add):
    dataset, overlapping = full_add
    assert dataset.num_rows == 60_000
    assert Counter(dataset["length"]) == PAPER_COUNTS
    assert overlapping == [1], "only 1-digit addition (100 problems) is exhausted by 1,000 evaluation draws"


def test_examples_are_correct_chat_pairs(full_add):
    dataset, _ = full_add
    for example in dataset.select(range(300)):
        user, assistant = example["prompt"][0], example["completion"][0]
        assert (user["role"], assistant["role"]) == ("user", "assistant")
        assert user["content"].endswith("Arithmetic Expression:\n" + example["expression"])
        operands = example["expression"].split(" + ")
        assert int(example["answer"]) == sum(int(x) for x in operands)
        assert assistant["content"] == f"{example['expression']} = {example['answer']}"


@pytest.mark.parametrize("task", [Task("add"), Task("iter_add", 3), Task("mul")])
def test_disjoint_from_evaluation_problems_with_the_same_seed(task):
    dataset, overlapping = build(task, seed=0, scale=0.05)
    for length in range(1, 10):
        if length in overlapping:
            continue
        evaluation = {p.expression for p in generate(task, 10, length, 1000, seed=0)}
        train = {e for e, n in zip(dataset["expression"], dataset["length"], strict=True) if n == length}
        assert train and not (train & evaluation), f"{task.label} length {length}"
    assert set(overlapping) <= {1}


def test_counts_scale_and_seed_reproduce():
    counts = sample_counts(0.01)
    assert counts == {n: 50 if n <= 6 else 100 for n in range(1, 10)}
    first, _ = build(Task("mul"), seed=3, scale=0.01)
    again, _ = build(Task("mul"), seed=3, scale=0.01)
    other, _ = build(Task("mul"), seed=4, scale=0.01)
    assert first["expression"] == again["expression"] != other["expression"]
