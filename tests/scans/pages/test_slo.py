"""SLO windows in time (the SRE workbook's model): each scan stands for the time until the
next one, at most its interval; budgets and burn rates are times; thin windows say how much of
them is covered; errored scans cover no time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scans import slo
from scans.grader.scoring import CheckValue
from tests.helpers.factories import make_endpoint
from tests.scans.pages.conftest import CAPPED_D, GRADE_A, NOW, scan_at, with_values

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


def _hourly(endpoint, values_list, *, start):
    for i, values in enumerate(values_list):
        scan_at(endpoint, start + i * HOUR, values)


def test_each_scan_stands_for_the_time_until_the_next_one_and_the_budget_is_in_time(world):
    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.99,
                             interval_minutes=60)
    # a full week of hourly scans with one bad hour in the middle
    start = NOW - timedelta(days=7)
    _hourly(endpoint, [GRADE_A] * 100 + [CAPPED_D] + [GRADE_A] * 67, start=start)

    window = slo.window(endpoint, 7, now=NOW)

    assert window.covered_s == 7 * 86400 and window.fully_covered
    assert window.bad_s == 3600  # the one grade-D scan stands for its hour
    assert window.budget_s == pytest.approx(0.01 * 7 * 86400)  # 1 h 40.8 min
    assert window.budget_text == "1 h 41 min of 7 d allowed, 1 h used"
    assert window.meets_objective is True
    assert window.share == pytest.approx(1 - 1 / 168)
    assert window.targets[0].missed_text == "1 h"


def test_a_scan_stands_for_at_most_its_interval_and_a_thin_window_says_how_much_is_covered(world):
    endpoint = make_endpoint(world.team, interval_minutes=15, slo_objective=0.9)
    scan_at(endpoint, NOW - 5 * HOUR, GRADE_A)  # covers 15 min, then nothing until the next
    scan_at(endpoint, NOW - 10 * timedelta(minutes=1), GRADE_A)  # covers the last 10 min

    window = slo.window(endpoint, 7, now=NOW)

    assert window.covered_s == 25 * 60
    assert not window.fully_covered
    assert window.coverage_text == "scans cover 25 min of 7 d (0.2%)"
    assert window.meets_objective is True and window.bad_s == 0


def test_burn_rates_over_one_and_six_hours_divide_the_bad_share_by_the_budget_share(world):
    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.9,
                             interval_minutes=60)
    start = NOW - 10 * HOUR
    # ten hourly scans: the last one (covering the last hour) is below the floor
    _hourly(endpoint, [GRADE_A] * 9 + [CAPPED_D], start=start)

    burn = dict((hours, rate) for hours, rate, _ in slo.window(endpoint, 7, now=NOW).burn_rates)

    assert burn[1] == pytest.approx(1 / 0.1)  # all of the last hour bad: 10x the budget rate
    assert burn[6] == pytest.approx((1 / 6) / 0.1)


def test_errored_scans_cover_no_time_and_end_the_previous_scans_time(world):
    endpoint = make_endpoint(world.team, interval_minutes=60, slo_objective=0.9)
    scan_at(endpoint, NOW - 2 * HOUR, GRADE_A)
    scan_at(endpoint, NOW - 2 * HOUR + timedelta(minutes=20), status="errored")
    scan_at(endpoint, NOW - HOUR, GRADE_A)

    window = slo.window(endpoint, 7, now=NOW)

    assert window.covered_s == 20 * 60 + 3600
    assert window.errored == 1 and window.scans == 2


def test_a_scan_started_before_the_window_counts_only_for_its_part_inside(world):
    endpoint = make_endpoint(world.team, interval_minutes=60, slo_grade_floor="B")
    scan_at(endpoint, NOW - timedelta(days=7) - timedelta(minutes=30), CAPPED_D)

    window = slo.window(endpoint, 7, now=NOW)

    assert window.covered_s == 30 * 60 and window.bad_s == 30 * 60


def test_ttft_and_error_rate_targets_read_the_check_values(world):
    endpoint = make_endpoint(world.team, slo_grade_floor="F", slo_ttft_p95_ms=500,
                             slo_error_rate=0.02, interval_minutes=60)
    _hourly(endpoint, [
        GRADE_A,
        with_values(GRADE_A, ttft_p95_at_concurrency_1=900.0),
        with_values(GRADE_A, ttft_p95_at_concurrency_1=CheckValue(None, "no stream")),
        with_values(GRADE_A, error_rate=0.05),
    ], start=NOW - 4 * HOUR)

    window = slo.window(endpoint, 7, now=NOW)

    by_key = {t.key: t for t in window.targets}
    assert by_key["ttft_p95"].missed_s == 2 * 3600  # an unmeasured TTFT misses the target
    assert by_key["error_rate"].missed_s == 3600
    assert by_key["grade"].missed_s == 0
    assert window.bad_s == 3 * 3600
    assert by_key["ttft_p95"].label == "TTFT p95 at concurrency 1 at most 500 ms"
    assert by_key["error_rate"].label == "error rate at most 2.00%"


def test_an_endpoint_never_scanned_has_an_empty_window_not_a_zero(world):
    window = slo.window(make_endpoint(world.team), 7, now=NOW)

    assert not window.enough and window.share is None and window.meets_objective is None
    assert window.empty_message == "no scan covers the last 7 days"
    assert [rate for _, rate, _ in window.burn_rates] == [None, None]


def test_the_seven_and_thirty_day_windows_differ_in_time(world):
    endpoint = make_endpoint(world.team, interval_minutes=60)
    scan_at(endpoint, NOW - timedelta(days=20), GRADE_A)
    scan_at(endpoint, NOW - timedelta(days=1), GRADE_A)

    assert slo.window(endpoint, 7, now=NOW).covered_s == 3600
    assert slo.window(endpoint, 30, now=NOW).covered_s == 2 * 3600


def test_windows_for_many_endpoints_come_from_one_query(world):
    strict = make_endpoint(world.team, name="strict", slo_grade_floor="A")
    lenient = make_endpoint(world.team, name="lenient", slo_grade_floor="D")
    for endpoint in (strict, lenient):
        _hourly(endpoint, [CAPPED_D] * 3, start=NOW - 3 * HOUR)

    with CaptureQueriesContext(connection) as queries:
        windows = slo.windows_for([strict, lenient], 7, now=NOW)

    assert len(queries.captured_queries) == 1
    assert windows[strict.pk].bad_s == 3 * 3600 and windows[lenient.pk].bad_s == 0


def test_an_objective_of_one_hundred_percent_has_no_budget_to_burn(world):
    endpoint = make_endpoint(world.team, slo_objective=1.0)
    scan_at(endpoint, NOW - HOUR, GRADE_A)

    window = slo.window(endpoint, 7, now=NOW)

    assert window.meets_objective is True and window.budget_s == 0
    assert window.budget_left is None and window.burn_rates[0][1] is None


def test_the_endpoint_page_shows_the_budget_in_time_and_the_burn_rates(world, owner_client):
    from django.utils import timezone

    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.9,
                             interval_minutes=60)
    now = timezone.now()
    scan_at(endpoint, now - 2 * HOUR, GRADE_A)
    scan_at(endpoint, now - HOUR, CAPPED_D)

    body = owner_client.get(f"/endpoints/{endpoint.public_id}/").content.decode()

    assert "16 h 48 min of 7 d allowed, 1 h used" in body
    assert "scans cover 2 h of 7 d (1.2%)" in body.lower()
    assert 'data-burn-hours="1"' in body and "10.0×" in body


def test_a_window_can_be_read_for_one_scan_location(world, owner_client):
    from django.utils import timezone

    from scans.models import Scan

    endpoint = make_endpoint(world.team, slo_grade_floor="B", interval_minutes=60)
    now = timezone.now()
    eu = scan_at(endpoint, now - 2 * HOUR, GRADE_A)
    us = scan_at(endpoint, now - HOUR, CAPPED_D)
    Scan.dangerously_unscoped.filter(pk=eu.pk).update(location="eu")
    Scan.dangerously_unscoped.filter(pk=us.pk).update(location="us")

    assert slo.window(endpoint, 7, location="eu").bad_s == 0
    assert slo.window(endpoint, 7, location="us").bad_s == pytest.approx(3600, abs=5)
    body = owner_client.get(f"/endpoints/{endpoint.public_id}/?location=eu").content.decode()
    assert 'data-location="us"' in body and "2 h of 7 d allowed" not in body
    assert "16 h 48 min of 7 d allowed, 0 min used" in body
