"""Round axis ticks (scans/grader/ticks.py): the values a person reads on every chart's axis."""

from __future__ import annotations

import math

import pytest

from scans.grader.ticks import decimals, nice_step, nice_ticks


def test_a_ttft_axis_reads_0_50_100_not_thirds_of_the_highest_value():
    assert nice_ticks(0, 239.6) == [0, 50, 100, 150, 200, 250]


@pytest.mark.parametrize(
    ("low", "high", "most", "expected"),
    [
        (0, 1, 5, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (0, 100, 4, [0, 25, 50, 75, 100]),
        (196.5, 216.5, 5, [195, 200, 205, 210, 215, 220]),
        (0, 1234, 5, [0, 250, 500, 750, 1000, 1250]),
        (0.95, 1.0, 5, [0.95, 0.96, 0.97, 0.98, 0.99, 1.0]),
        (0, 58.3, 4, [0, 20, 40, 60]),
    ],
)
def test_ticks_are_round_steps_that_cover_the_range(low, high, most, expected):
    assert nice_ticks(low, high, most) == pytest.approx(expected)


@pytest.mark.parametrize("high", [0.003, 0.07, 1.9, 13, 239.6, 987, 12_345, 3.3e6])
def test_every_step_is_1_2_2_5_or_5_times_a_power_of_ten_and_fits_the_count(high):
    ticks = nice_ticks(0, high, 5)
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert min(abs(mantissa - m) for m in (1, 2, 2.5, 5, 10)) < 1e-6
    assert ticks[0] <= 0 and ticks[-1] >= high and 2 <= len(ticks) <= 6
    assert all(b - a == pytest.approx(step) for a, b in zip(ticks, ticks[1:], strict=False))


def test_an_empty_or_one_value_range_still_has_two_ticks_and_no_negative_zero():
    assert nice_ticks(0, 0) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert len(nice_ticks(5, 5)) >= 2 and nice_ticks(5, 5)[0] < 5 < nice_ticks(5, 5)[-1]
    assert all(math.copysign(1, t) == 1 for t in nice_ticks(-0.3, 0.3) if t == 0)


def test_labels_get_as_many_decimals_as_the_step_needs():
    assert [decimals(s) for s in (50, 2.5, 0.25, 0.02)] == [0, 1, 2, 2]
    assert nice_step(0.3, 3) == pytest.approx(0.1)


def test_non_finite_bounds_are_refused():
    with pytest.raises(ValueError, match="finite"):
        nice_ticks(0, math.inf)
