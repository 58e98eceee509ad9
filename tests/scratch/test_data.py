"""The from-scratch data against Python integers, in base 2 and 10; reversal; masks; disjointness."""

import pytest
import torch

from scratch.data import POOL_ROWS, Arithmetic, Problems, decode, encode, sample_digits


def as_int(digits_lsb_first, base):
    return sum(int(d) * base**i for i, d in enumerate(digits_lsb_first))


@pytest.mark.parametrize(
    "task",
    [
        Arithmetic("add", 2, 11, 3),
        Arithmetic("add", 10, 4, 3),
        Arithmetic("add", 2, 64, 2),
        Arithmetic("add", 10, 32, 2),
        Arithmetic("mul", 2, 14),
        Arithmetic("mul", 10, 5),
        Arithmetic("add", 10, 4, 3, fixed_width=True),
        Arithmetic("mul", 2, 6, fixed_width=True),
        Arithmetic("mul", 36, 20),  # carries too large for the table scan: the column-by-column loop
        Arithmetic("add", 7, 9, 5),
    ],
)
def test_sequences_match_python_integers(task):
    digits = sample_digits(task, 300, torch.Generator().manual_seed(1))
    tokens, mask = encode(task, digits)
    assert tokens.shape == (300, task.seq_len)
    for row in range(300):
        text = decode(task, tokens[row])  # numbers shown most significant first
        left, answer = text.split(" = ")
        operands = [int(x, task.base) for x in left.replace("*", "+").split(" + ")]
        expected = sum(operands) if task.op == "add" else operands[0] * operands[1]
        assert int(answer, task.base) == expected
        for j, value in enumerate(operands):
            assert value == as_int(digits[row, j].tolist(), task.base)
        targets = tokens[row][mask[row]].tolist()
        assert targets[-1] == task.eos and task.equals not in targets
        if task.fixed_width:
            assert len(targets) == task.answer_width + 1
        else:
            assert targets[-2] != 0 or len(targets) == 2, "leading zeros of the answer are stripped"


def test_digits_are_reversed_least_significant_first():
    task = Arithmetic("add", 10, 3, 2)
    digits = torch.tensor([[[3, 2, 1], [5, 0, 0]]])  # 123 and 5, least significant first
    tokens, mask = encode(task, digits)
    assert tokens[0].tolist()[:10] == [3, 2, 1, task.plus, 5, task.equals, 8, 2, 1, task.eos]  # 123 + 5 = 128
    assert decode(task, tokens[0]) == "123 + 5 = 128"
    assert mask[0].tolist()[:10] == [False] * 6 + [True] * 4


def test_training_batches_never_contain_test_problems():
    task = Arithmetic("add", 10, 3, 2)  # 10^6 problems: room for a disjoint test set
    problems = Problems(task, seed=0, test_size=5000)
    assert problems.disjoint
    test = {decode(task, row) for row in problems.test_set()[0]}
    for _ in range(20):
        batch = {decode(task, row) for row in problems.train_batch(512)[0]}
        assert not batch & test


def test_small_spaces_are_not_forced_apart():
    problems = Problems(Arithmetic("add", 2, 2, 2), seed=0, test_size=500)  # only 16 problems exist
    assert not problems.disjoint


def test_test_sets_hold_different_problems():
    task = Arithmetic("add", 2, 2, 2)  # 16 problems: the test set is all of them, once each
    whole = Problems(task, seed=0, test_size=500)
    rows = [decode(task, row) for row in whole.test_set()[0]]
    assert whole.whole_space and len(rows) == len(set(rows)) == 16
    task = Arithmetic("add", 2, 3, 3)  # 512 problems, 300 drawn: repeats are redrawn
    most = Problems(task, seed=0, test_size=300)
    rows = [decode(task, row) for row in most.test_set()[0]]
    assert len(rows) == len(set(rows)) == 300 and not most.whole_space and not most.disjoint
    assert Problems(task, seed=0, test_size=300).test_digits.equal(most.test_digits), "seeded"


def test_batches_are_seeded():
    task = Arithmetic("mul", 10, 3)
    first, again = Problems(task, 5, 10), Problems(task, 5, 10)
    assert torch.equal(first.train_batch(64)[0], again.train_batch(64)[0])
    assert not torch.equal(first.train_batch(64)[0], Problems(task, 6, 10).train_batch(64)[0])


def test_the_stream_resumes_at_any_batch_of_a_pool():
    """Batches are made a pool at a time; a checkpoint's (pool start, batches given) resumes the stream at any step,
    in the middle of a pool or across its end, with the batches an uninterrupted run gets."""
    task = Arithmetic("add", 2, 4)
    batch = POOL_ROWS // 4  # pools of 4 batches
    whole = Problems(task, 3, 20)
    expected = [whole.train_batch(batch)[0] for _ in range(10)]
    for stop in (0, 1, 3, 4, 6):
        first = Problems(task, 3, 20)
        for _ in range(stop):
            first.train_batch(batch)
        state = first.data_state()
        resumed = Problems(task, 3, 20)
        resumed.restore(*state)
        assert all(torch.equal(resumed.train_batch(batch)[0], want) for want in expected[stop:]), stop
