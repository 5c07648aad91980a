import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scans.grader.figures import ewma, percentile


def test_percentile_of_two_samples_is_nearest_rank_not_interpolated():
    assert percentile([100, 300], 50) == 100
    assert percentile([100, 300], 95) == 300
    assert percentile([300, 100], 99) == 300


def test_percentile_of_no_samples_is_none():
    assert percentile([], 95) is None


def test_percentile_of_one_sample_is_that_sample_at_every_p():
    for p in (0, 1, 50, 95, 99, 100):
        assert percentile([42.5], p) == 42.5


def test_percentile_rank_is_ceiling_of_p_times_n():
    samples = list(range(1, 101))
    assert percentile(samples, 95) == 95
    assert percentile(samples, 99) == 99
    assert percentile(samples, 50) == 50
    assert percentile(samples, 100) == 100
    assert percentile(samples, 0) == 1
    assert percentile(list(range(1, 11)), 95) == 10
    assert percentile(list(range(1, 21)), 95) == 19


def test_percentile_rank_is_not_moved_by_float_rounding():
    # 7 / 100 * 100 is 7.000000000000001 in floats; the rank must still be 7.
    assert percentile(list(range(1, 101)), 7) == 7
    assert percentile(list(range(1, 101)), 7.0) == 7


def test_percentile_rejects_p_outside_0_to_100():
    with pytest.raises(ValueError):
        percentile([1, 2], 101)
    with pytest.raises(ValueError):
        percentile([1, 2], -1)


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1),
       st.integers(min_value=0, max_value=100))
def test_percentile_is_always_one_of_the_samples_at_the_nearest_rank(samples, p):
    value = percentile(samples, p)
    ordered = sorted(samples)
    assert value in samples
    rank = max(1, math.ceil(p * len(samples) / 100))
    assert value == ordered[rank - 1]


def test_ewma_first_sample_sets_the_value():
    assert ewma(None, 120.0) == 120.0


def test_ewma_weights_the_new_sample_by_alpha():
    assert ewma(100.0, 200.0) == pytest.approx(0.3 * 200 + 0.7 * 100)
    assert ewma(100.0, 200.0, alpha=0.5) == pytest.approx(150.0)


def test_ewma_rejects_an_alpha_outside_0_to_1():
    with pytest.raises(ValueError):
        ewma(1.0, 2.0, alpha=0)
    with pytest.raises(ValueError):
        ewma(1.0, 2.0, alpha=1.5)


def test_report_figures_round_to_three_decimals_and_keep_none():
    from scans.grader.figures import rounded

    assert rounded(812.34567) == 812.346
    assert rounded(0.123456, 4) == 0.1235
    assert rounded(None) is None
    assert isinstance(rounded(5), float)  # report.json writes 5.0, as it always has


def test_a_summary_is_nearest_rank_p50_p95_p99_and_its_count():
    from scans.grader.figures import percentiles

    assert percentiles([]) is None
    assert percentiles([100.0, 300.0]) == {"p50": 100.0, "p95": 300.0, "p99": 300.0, "n": 2}
