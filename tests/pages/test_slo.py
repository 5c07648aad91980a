"""SLO windows: shares of scans meeting each target, error budget, versions, empty states."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scans import slo
from scans.grader.scoring import CheckValue
from tests.factories import make_endpoint
from tests.pages.conftest import (
    CAPPED_C,
    CAPPED_D,
    GRADE_A,
    GRADE_B,
    NO_LETTER,
    NOW,
    scan_at,
    with_values,
)

pytestmark = pytest.mark.django_db


def _scans(endpoint, values_list, *, days_ago_start=6, version=None):
    for i, values in enumerate(values_list):
        scan_at(endpoint, NOW - timedelta(days=days_ago_start) + timedelta(hours=i), values,
                version=version)


def test_a_window_counts_the_share_of_scans_meeting_the_grade_floor(world):
    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.9)
    _scans(endpoint, [GRADE_A] * 7 + [GRADE_B, CAPPED_C, CAPPED_D])

    window = slo.window(endpoint, 7, now=NOW)

    assert (window.scans, window.met_all, window.enough) == (10, 8, True)
    assert window.share == pytest.approx(0.8)
    (grade,) = window.targets
    assert (grade.key, grade.met, grade.label) == ("grade", 8, "grade B or better")
    assert window.meets_objective is False
    assert window.budget_scans == pytest.approx(1.0)
    assert window.budget_left_scans == pytest.approx(-1.0)
    assert window.budget_left == pytest.approx(-1.0)  # overspent by a whole budget


def test_a_scan_with_no_letter_is_below_every_floor(world):
    endpoint = make_endpoint(world.team, slo_grade_floor="F", slo_objective=0.5)
    _scans(endpoint, [GRADE_A] * 4 + [NO_LETTER])

    window = slo.window(endpoint, 7, now=NOW)

    assert window.targets[0].met == 4 and window.scans == 5


def test_errored_scans_are_left_out_and_counted_apart(world):
    endpoint = make_endpoint(world.team, slo_objective=0.9)
    _scans(endpoint, [GRADE_A] * 5)
    for hours in (1, 2, 3):
        scan_at(endpoint, NOW - timedelta(hours=hours), status="errored")
    scan_at(endpoint, NOW - timedelta(minutes=5), status="running")

    window = slo.window(endpoint, 7, now=NOW)

    assert (window.scans, window.errored, window.met_all) == (5, 3, 5)
    assert window.share == 1.0 and window.meets_objective is True
    assert window.budget_left == 1.0


def test_exactly_meeting_the_objective_leaves_no_budget_but_meets_it(world):
    endpoint = make_endpoint(world.team, slo_grade_floor="A", slo_objective=0.9)
    _scans(endpoint, [GRADE_A] * 9 + [GRADE_B])

    window = slo.window(endpoint, 7, now=NOW)

    assert window.meets_objective is True
    assert window.budget_left == 0.0  # exactly, not -2e-16: the objective is read as 9/10
    assert window.budget_left_scans == 0.0


def test_ttft_and_error_rate_targets_read_the_check_values(world):
    endpoint = make_endpoint(world.team, slo_grade_floor="D", slo_ttft_p95_ms=500,
                             slo_error_rate=0.02, slo_objective=0.5)
    _scans(endpoint, [
        GRADE_A,  # ttft 210, error rate 0: meets both
        with_values(GRADE_A, ttft_p95_at_concurrency_1=700.0),  # misses ttft only
        with_values(GRADE_A, error_rate=0.03),  # misses the error rate only
        with_values(GRADE_A, ttft_p95_at_concurrency_1=CheckValue(None, "no success at c1")),
        with_values(GRADE_A, ttft_p95_at_concurrency_1=500.0, error_rate=0.02),  # at the bounds
    ])

    window = slo.window(endpoint, 7, now=NOW)

    by_key = {t.key: t for t in window.targets}
    assert by_key["ttft_p95"].met == 3  # an unmeasured TTFT does not meet the target
    assert by_key["error_rate"].met == 4
    assert by_key["grade"].met == 5
    assert window.met_all == 2
    assert by_key["ttft_p95"].label == "TTFT p95 at concurrency 1 at most 500 ms"
    assert by_key["error_rate"].label == "error rate at most 2.00%"


def test_a_window_with_too_few_scans_says_so_instead_of_a_zero(world):
    endpoint = make_endpoint(world.team)
    _scans(endpoint, [CAPPED_D] * (slo.MIN_SCANS - 1))

    window = slo.window(endpoint, 7, now=NOW)

    assert not window.enough
    assert window.share is None and window.meets_objective is None
    assert window.budget_left is None
    assert window.empty_message == (
        f"not enough scans in 7 days: {slo.MIN_SCANS - 1} scans, at least {slo.MIN_SCANS} needed")


def test_an_endpoint_never_scanned_has_an_empty_window(world):
    endpoint = make_endpoint(world.team)

    window = slo.window(endpoint, 30, now=NOW)

    assert window.scans == 0
    assert window.empty_message == (
        f"not enough scans in 30 days: no scan, at least {slo.MIN_SCANS} needed")


def test_the_seven_day_window_leaves_out_older_scans_that_the_thirty_day_one_counts(world):
    endpoint = make_endpoint(world.team)
    _scans(endpoint, [GRADE_A] * 5, days_ago_start=20)
    _scans(endpoint, [GRADE_A] * 5, days_ago_start=3)

    assert slo.window(endpoint, 7, now=NOW).scans == 5
    assert slo.window(endpoint, 30, now=NOW).scans == 10


def test_a_window_carries_the_scoring_versions_it_counted(world):
    endpoint = make_endpoint(world.team)
    _scans(endpoint, [GRADE_A] * 3, days_ago_start=6)
    _scans(endpoint, [GRADE_A] * 3, days_ago_start=4, version="1.0.0")

    window = slo.window(endpoint, 7, now=NOW)

    assert window.versions == ("0.9.0", "1.0.0")
    assert window.mixed_versions


def test_windows_for_many_endpoints_come_from_one_grouped_query(world):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    strict = make_endpoint(world.team, name="strict", slo_grade_floor="A")
    lenient = make_endpoint(world.team, name="lenient", slo_grade_floor="C")
    _scans(strict, [GRADE_B] * 5)
    _scans(lenient, [GRADE_B] * 5)

    with CaptureQueriesContext(connection) as queries:
        windows = slo.windows_for([strict, lenient], 7, now=NOW)

    assert len(queries.captured_queries) == 2  # the counts, and the versions
    assert windows[strict.pk].met_all == 0
    assert windows[lenient.pk].met_all == 5


def test_an_objective_of_one_hundred_percent_has_no_budget_to_report(world):
    endpoint = make_endpoint(world.team, slo_objective=1.0)
    _scans(endpoint, [GRADE_A] * 5)

    window = slo.window(endpoint, 7, now=NOW)

    assert window.meets_objective is True
    assert window.budget_scans == 0.0 and window.budget_left is None
