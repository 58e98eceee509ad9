"""Paired comparisons: exact McNemar, Newcombe's paired interval, and the matching of problems across series."""

import math
from dataclasses import replace

import pytest

from harness.runs.compare import (
    compare,
    holm_adjusted,
    mcnemar_exact,
    paired_comparisons,
    paired_difference_interval,
    wilson_interval,
)
from tests.harness.scripted import a_row


def test_exact_mcnemar_is_the_binomial_test_of_the_discordant_pairs():
    assert mcnemar_exact(10, 0) == pytest.approx(2 * 0.5**10)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == pytest.approx(1.0)
    assert mcnemar_exact(1, 9) == pytest.approx(2 * 11 / 2**10)  # P(X <= 1) for X ~ Bin(10, 1/2), two-sided


@pytest.mark.parametrize("table", [(11, 0, 0, 29), (5, 10, 0, 25), (0, 3, 7, 30), (40, 0, 0, 0), (0, 0, 0, 40)])
def test_the_paired_interval_holds_the_difference_and_stays_in_range(table):
    both, only_a, only_b, neither = table
    n = sum(table)
    low, high = paired_difference_interval(*table)
    difference = (only_b - only_a) / n
    assert -1 <= low <= difference <= high <= 1
    assert high - low > 0, "no zero-width interval, even without discordant pairs"
    swapped = paired_difference_interval(both, only_b, only_a, neither)
    assert swapped == pytest.approx((-high, -low)), "swapping the two series negates the interval"


def test_without_correlation_it_is_newcombes_square_and_add_interval():
    # both * neither == only_a * only_b: phi = 0, so the paired interval is the unpaired hybrid score interval
    both, only_a, only_b, neither = 4, 4, 8, 8
    n = 24
    p_a, p_b = (both + only_a) / n, (both + only_b) / n
    (la, ua), (lb, ub) = wilson_interval(both + only_a, n), wilson_interval(both + only_b, n)
    expected = (p_b - p_a - math.hypot(p_b - lb, ua - p_a), p_b - p_a + math.hypot(ub - p_b, p_a - la))
    assert paired_difference_interval(both, only_a, only_b, neither) == pytest.approx(expected)


def test_more_pairs_give_a_narrower_interval():
    small = paired_difference_interval(5, 3, 1, 11)
    large = paired_difference_interval(50, 30, 10, 110)
    assert large[1] - large[0] < small[1] - small[0]


def sample(series, length, index, right, expression=None):
    model, precision = series.split()
    return {
        "model": model,
        "precision": precision,
        "task": "add",
        "base": 10,
        "length": length,
        "index": index,
        "expression": expression or f"{index} + {length}",
        "correct": right,
    }


def test_series_are_compared_problem_by_problem_with_the_first():
    samples = [sample("m fp32", 1, i, i < 6) for i in range(10)] + [sample("m fp32", 2, i, i < 2) for i in range(10)]
    samples += [sample("m bf16", 1, i, i < 6) for i in range(10)]  # the same answers
    samples += [sample("m bf16", 2, i, i >= 8, f"other {i}" if i == 9 else None) for i in range(10)]
    comparisons = paired_comparisons(samples, lambda s: f"{s['model']} {s['precision']}", lambda s: s["task"])
    by_length = {c.length: c for c in comparisons}
    assert {c.baseline for c in comparisons} == {"m fp32"} and {c.variant for c in comparisons} == {"m bf16"}
    assert (by_length["1"].only_baseline, by_length["1"].only_variant, by_length["1"].p_value) == (0, 0, 1.0)
    length2 = by_length["2"]
    assert length2.n == 9, "a problem whose expression differs is not a pair"
    assert (length2.only_baseline, length2.only_variant, length2.both_correct) == (2, 1, 0)
    pooled = by_length["all"]
    assert pooled.n == 19 and pooled.only_baseline == 2 and pooled.only_variant == 1
    samples += [sample("m int8", 1, i, i < 5) for i in range(10)]
    later = paired_comparisons(samples, lambda s: f"{s['model']} {s['precision']}", lambda s: s["task"])
    assert {(c.baseline, c.variant) for c in later} == {
        ("m fp32", "m bf16"),
        ("m fp32", "m int8"),
        ("m bf16", "m int8"),
    }
    unadjusted = compare(
        "add", 10, "all", "m fp32", "m bf16", [(i < 6, i < 6) for i in range(10)] + [(i < 2, i >= 8) for i in range(9)]
    )
    assert pooled == replace(unadjusted, p_holm=pooled.p_holm, family=3), "the family: every test against m fp32"


def test_holm_adjusts_each_baselines_family_step_down():
    """Holm 1979: sorted p_(1) <= ... <= p_(m), adjusted p_(i) = max over j <= i of min(1, (m - j + 1) p_(j)).
    Against an independent implementation of the textbook procedure, and the rejection it implies."""
    ps = [0.01, 0.04, 0.03, 0.005, 0.5]
    rows = [compare("add", 10, str(i), "a", "b", [(True, True)]) for i in range(5)]
    rows = [replace(row, p_value=p) for row, p in zip(rows, ps, strict=True)]
    rows.append(replace(compare("add", 10, "1", "b", "c", [(True, True)]), p_value=0.01))  # another baseline
    adjusted = holm_adjusted(rows)
    order = sorted(range(5), key=lambda i: ps[i])
    expected, running = {}, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (5 - rank) * ps[i]))
        expected[i] = running
    assert [row.p_holm for row in adjusted[:5]] == pytest.approx([expected[i] for i in range(5)])
    assert [round(row.p_holm, 3) for row in adjusted[:5]] == [0.04, 0.09, 0.09, 0.025, 0.5]
    assert all(row.family == 5 for row in adjusted[:5]) and (adjusted[5].p_holm, adjusted[5].family) == (0.01, 1)
    raw_significant = sum(p < 0.05 for p in ps)
    assert raw_significant == 4 and sum(row.p_holm < 0.05 for row in adjusted[:5]) == 2, "two survive adjustment"


def test_summary_tables_come_from_counts_not_from_rounded_values(tmp_path):
    """8 of 9 right: the interval's low end is 0.5650003, which results.csv keeps as 0.5650; printed again at two
    decimals that reads 0.56, from the count 0.57. A row read back from results.csv is printed from its counts."""
    from harness.reports.summary import summary_markdown
    from harness.runs.results import read_results, results_csv_text

    low, high = wilson_interval(8, 9)
    row = replace(a_row(1, n=9), correct=8, accuracy=8 / 9, ci_low=low, ci_high=high)
    (tmp_path / "results.csv").write_text(results_csv_text([row]))
    (read_back,), _ = read_results(tmp_path / "results.csv")
    assert f"{read_back.ci_low:.2f}" == "0.56", "what printing the stored value gave"
    summary = summary_markdown([read_back], ["python -m harness.eval"])
    assert "| 0.889 [0.57, 0.98] |" in summary


def test_wilson_interval():
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-3)  # textbook value for 0/10
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(1 - high) and low == pytest.approx(0.4038, abs=1e-3)
    low, high = wilson_interval(30, 30)
    assert high == pytest.approx(1.0) and 0.88 < low < 0.9
