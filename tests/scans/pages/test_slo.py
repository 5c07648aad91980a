"""SLO windows in time (the SRE workbook's model): each scan stands for the time until the
next one, at most its interval; budgets and burn rates are times; thin windows say how much of
them is covered; errored scans cover no time. The status (breaching / at risk / meeting / no
data) comes from the covered time and the burn-rate pairs, never from time no scan covers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scans.grader.scoring import CheckValue
from scans.history import slo_windows
from scans.history.slo_wording import WindowWords, missed_text, target_label
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_D, GRADE_A, NOW, bulk_scans, scan_at, with_values

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

    window = slo_windows.window(endpoint, 7, now=NOW)

    assert window.covered_s == 7 * 86400 and window.fully_covered
    assert window.bad_s == 3600  # the one grade-D scan stands for its hour
    assert window.budget_s == pytest.approx(0.01 * 7 * 86400)  # 1 h 40.8 min
    assert WindowWords(window).budget_text == "1 h 41 min of 7 d allowed, 1 h used"
    assert window.meets_objective is True
    assert window.share == pytest.approx(1 - 1 / 168)
    assert missed_text(window.targets[0]) == "1 h"


def test_a_scan_stands_for_at_most_its_interval_and_a_thin_window_says_how_much_is_covered(world):
    endpoint = make_endpoint(world.team, interval_minutes=15, slo_objective=0.9)
    scan_at(endpoint, NOW - 5 * HOUR, GRADE_A)  # covers 15 min, then nothing until the next
    scan_at(endpoint, NOW - 10 * timedelta(minutes=1), GRADE_A)  # covers the last 10 min

    window = slo_windows.window(endpoint, 7, now=NOW)

    assert window.covered_s == 25 * 60
    assert not window.fully_covered
    assert WindowWords(window).coverage_text == "scans cover 25 min of 7 d (0.2%)"
    assert window.meets_objective is True and window.bad_s == 0


def test_burn_rates_over_one_and_six_hours_divide_the_bad_share_by_the_budget_share(world):
    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.9,
                             interval_minutes=60)
    start = NOW - 10 * HOUR
    # ten hourly scans: the last one (covering the last hour) is below the floor
    _hourly(endpoint, [GRADE_A] * 9 + [CAPPED_D], start=start)

    burn = slo_windows.window(endpoint, 7, now=NOW).burn_rate

    assert burn[3600] == pytest.approx(1 / 0.1)  # all of the last hour bad: 10x the budget rate
    assert burn[6 * 3600] == pytest.approx((1 / 6) / 0.1)
    assert burn[300] == pytest.approx(10) and burn[1800] == pytest.approx(10)
    assert burn[86400] == pytest.approx((1 / 10) / 0.1)  # only 10 h of the 24 covered


def test_errored_scans_cover_no_time_and_end_the_previous_scans_time(world):
    endpoint = make_endpoint(world.team, interval_minutes=60, slo_objective=0.9)
    scan_at(endpoint, NOW - 2 * HOUR, GRADE_A)
    scan_at(endpoint, NOW - 2 * HOUR + timedelta(minutes=20), status="errored")
    scan_at(endpoint, NOW - HOUR, GRADE_A)

    window = slo_windows.window(endpoint, 7, now=NOW)

    assert window.covered_s == 20 * 60 + 3600
    assert window.errored == 1 and window.scans == 2


def test_a_scan_started_before_the_window_counts_only_for_its_part_inside(world):
    endpoint = make_endpoint(world.team, interval_minutes=60, slo_grade_floor="B")
    scan_at(endpoint, NOW - timedelta(days=7) - timedelta(minutes=30), CAPPED_D)

    window = slo_windows.window(endpoint, 7, now=NOW)

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

    window = slo_windows.window(endpoint, 7, now=NOW)

    by_key = {t.key: t for t in window.targets}
    assert by_key["ttft_p95"].missed_s == 2 * 3600  # an unmeasured TTFT misses the target
    assert by_key["error_rate"].missed_s == 3600
    assert by_key["grade"].missed_s == 0
    assert window.bad_s == 3 * 3600
    assert target_label(by_key["ttft_p95"]) == "TTFT p95 at concurrency 1 at most 500 ms"
    assert target_label(by_key["error_rate"]) == "error rate at most 2.00%"


def test_an_endpoint_never_scanned_has_an_empty_window_not_a_zero(world):
    window = slo_windows.window(make_endpoint(world.team), 7, now=NOW)

    assert not window.enough and window.share is None and window.meets_objective is None
    assert WindowWords(window).empty_message == "no scan covers the last 7 days"
    assert [rate for _, rate, _ in window.burn_rates] == [None] * 7
    assert window.status == "no_data" and WindowWords(window).status_label == "no data"


def test_the_seven_and_thirty_day_windows_differ_in_time(world):
    endpoint = make_endpoint(world.team, interval_minutes=60)
    scan_at(endpoint, NOW - timedelta(days=20), GRADE_A)
    scan_at(endpoint, NOW - timedelta(days=1), GRADE_A)

    assert slo_windows.window(endpoint, 7, now=NOW).covered_s == 3600
    assert slo_windows.window(endpoint, 30, now=NOW).covered_s == 2 * 3600


def test_windows_for_many_endpoints_come_from_two_queries(world):
    strict = make_endpoint(world.team, name="strict", slo_grade_floor="A")
    lenient = make_endpoint(world.team, name="lenient", slo_grade_floor="D")
    for endpoint in (strict, lenient):
        _hourly(endpoint, [CAPPED_D] * 3, start=NOW - 3 * HOUR)

    with CaptureQueriesContext(connection) as queries:
        windows = slo_windows.windows_for([strict, lenient], 7, now=NOW)

    # one for the maintenance windows of all of them, one for the scans' sums
    assert len(queries.captured_queries) == 2
    assert windows[strict.pk].bad_s == 3 * 3600 and windows[lenient.pk].bad_s == 0


def test_an_objective_of_one_hundred_percent_has_no_budget_to_burn(world):
    endpoint = make_endpoint(world.team, slo_objective=1.0)
    scan_at(endpoint, NOW - HOUR, GRADE_A)

    window = slo_windows.window(endpoint, 7, now=NOW)

    assert window.meets_objective is True and window.budget_s == 0
    assert window.budget_left is None and window.burn_rates[0][1] is None


def test_the_endpoint_page_shows_the_budget_in_time_and_the_burn_rates(world, owner_client):
    from django.utils import timezone

    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.9,
                             interval_minutes=60)
    now = timezone.now()
    scan_at(endpoint, now - 3 * HOUR, GRADE_A)
    scan_at(endpoint, now - 2 * HOUR, GRADE_A)
    scan_at(endpoint, now - HOUR, CAPPED_D)

    body = owner_client.get(f"/endpoints/{endpoint.public_id}/").content.decode()

    assert "90% over 7 days allows 16 h 48 min of bad time" in body
    assert "1 h used, 15 h 48 min left" in body
    assert "scans cover 3 h of 7 d (1.8%)" in body.lower()
    assert "no data for 6 d 21 h of the 7 days, counted neither good nor bad" in body
    assert 'data-pair="3600-300"' in body and "10.0× · 10.0×" in body
    # a third of the covered time was bad: under the 90 % objective, whatever the budget says
    # (3 h covered: as much as the 6 h pair, the fastest that can fire at 90 %, needs)
    assert 'data-slo="breaching"' in body and 'data-slo="meets"' not in body


def test_a_window_can_be_read_for_one_scan_location(world, owner_client):
    from django.utils import timezone

    from scans.models import Scan

    endpoint = make_endpoint(world.team, slo_grade_floor="B", interval_minutes=60)
    now = timezone.now()
    eu = scan_at(endpoint, now - 2 * HOUR, GRADE_A)
    us = scan_at(endpoint, now - HOUR, CAPPED_D)
    Scan.dangerously_unscoped.filter(pk=eu.pk).update(location="eu")
    Scan.dangerously_unscoped.filter(pk=us.pk).update(location="us")

    assert slo_windows.window(endpoint, 7, location="eu").bad_s == 0
    assert slo_windows.window(endpoint, 7, location="us").bad_s == pytest.approx(3600, abs=5)
    body = owner_client.get(f"/endpoints/{endpoint.public_id}/?location=eu").content.decode()
    assert 'data-location="us"' in body
    assert "0 min used, 16 h 48 min left" in body


FIVE_MIN = timedelta(minutes=5)
SLOW_FIRST_TOKEN = with_values(GRADE_A, ttft_p95_at_concurrency_1=900.0)


def _down(endpoint, when):
    """A scan that found nothing listening, stored down (no letter, no points)."""
    from scans.grader.report_text import is_down
    from scans.models import Scan
    from tests.scans.conftest import report_for

    report = {**report_for(GRADE_A), "preflight": {"stopped": True,
                                                   "cause": "connection refused"}}
    assert is_down(report)
    scan = scan_at(endpoint, when)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(down=True, grade="", points=None)
    return scan


def test_a_target_missing_its_ttft_target_on_every_scan_is_breaching_at_ten_times(world):
    # new, scanned every 5 min for 3 h (half the 6 h pair's span), every scan over its TTFT
    # target (40 min of it is too little data yet: tests/scans/pages/test_slo_enough_data.py)
    endpoint = make_endpoint(world.team, slo_ttft_p95_ms=500, slo_objective=0.9,
                             slo_grade_floor="F", interval_minutes=5)
    for i in range(36):
        scan_at(endpoint, NOW - 3 * HOUR + i * FIVE_MIN, SLOW_FIRST_TOKEN)

    window = slo_windows.window(endpoint, 30, now=NOW)

    assert window.share == 0 and window.meets_objective is False
    assert window.burn_rate[3600] == pytest.approx(10) and window.burn_rate[6 * 3600] == 10
    assert window.status == "breaching" and WindowWords(window).status_label == "breaching"
    firing = {w["label"]: w["firing"] for w in WindowWords(window).alert_windows}
    # 10x cannot reach 14.4x (a 90 % objective allows at most 10x); 6 h and 30 min at 6x can;
    # the slow pairs wait for half their long spans (12 h and 36 h) covered
    assert firing == {"1 h and 5 min": False, "6 h and 30 min": True,
                      "24 h and 2 h": False, "3 d and 6 h": False}
    assert window.alert_level == "page"
    assert WindowWords(window).status_reason == ("the last 6 h burned the error budget at 10.0× and the "
                                    "last 30 min at 10.0× (page at 6× or more)")
    assert WindowWords(window).uncovered_text == "no data for 29 d 21 h of the 30 days"
    assert WindowWords(window).allowance_text == "90% over 30 days allows 3 d of bad time"


def test_a_dead_port_down_for_37_minutes_is_breaching_not_meeting(world):
    endpoint = make_endpoint(world.team, slo_objective=0.99, interval_minutes=5)
    for minutes in range(37, 0, -5):
        _down(endpoint, NOW - timedelta(minutes=minutes))

    window = slo_windows.window(endpoint, 30, now=NOW)

    assert window.covered_s == 37 * 60 and window.bad_s == 37 * 60  # down time is bad time
    assert window.status == "breaching" and window.alert_level == "page"
    assert WindowWords(window).allowance_text == "99% over 30 days allows 7 h 12 min of bad time"
    assert WindowWords(window).budget_used_text == "37 min used, 6 h 35 min left"
    assert not window.budget_spent


def test_uncovered_time_is_never_counted_as_good(world):
    # three hours covered in 30 days, one of them bad: the budget of 3 days is barely touched,
    # but a third of what was measured missed a 90 % objective
    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.9,
                             interval_minutes=60)
    scan_at(endpoint, NOW - timedelta(days=10), GRADE_A)
    scan_at(endpoint, NOW - timedelta(days=10) + HOUR, GRADE_A)
    scan_at(endpoint, NOW - timedelta(days=10) + 2 * HOUR, CAPPED_D)

    window = slo_windows.window(endpoint, 30, now=NOW)

    assert window.share == pytest.approx(2 / 3) and window.meets_objective is False
    assert window.budget_left > 0.98  # the old reading: "98 % left", green
    assert window.status == "breaching"
    assert WindowWords(window).status_reason == (
        "66.7% of the covered time was good, under the 90.0% objective")
    assert window.alert_level == ""  # nothing burns now: the burn spans hold no scan
    assert WindowWords(window).uncovered_text == "no data for 29 d 21 h of the 30 days"


def test_a_new_healthy_endpoint_has_no_data_until_an_hour_is_covered_then_meets(world):
    endpoint = make_endpoint(world.team, interval_minutes=5)
    for i in range(3):
        scan_at(endpoint, NOW - 15 * timedelta(minutes=1) + i * FIVE_MIN, GRADE_A)

    early = slo_windows.window(endpoint, 7, now=NOW)
    assert early.share == 1 and early.status == "no_data"
    assert WindowWords(early).status_reason == (
        "too little data yet: 15 min of 1 h covered, nothing wrong in it")

    for i in range(12):
        scan_at(endpoint, NOW + i * FIVE_MIN, GRADE_A)
    later = slo_windows.window(endpoint, 7, now=NOW + HOUR)
    assert later.covered_s == 75 * 60 and later.status == "meeting"
    assert WindowWords(later).status_reason == ("100.0% of the covered time was good (objective 90.0%); "
                                   "no burn-rate alert fires")


def test_a_slow_burn_is_at_risk_and_a_fast_one_breaching(world):
    # a fully covered week, one bad hour in three over the last day: 3.3x over 24 h and 2 h
    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.9,
                             interval_minutes=60)
    start = NOW - timedelta(days=7)
    bulk_scans(endpoint, start, 144, HOUR, grades=("A",))
    bulk_scans(endpoint, start + 144 * HOUR, 24, HOUR, grades=("A", "A", "D"))

    window = slo_windows.window(endpoint, 7, now=NOW)

    assert window.share == pytest.approx(1 - 8 / 168)  # above the objective
    assert window.burn_rate[86400] == pytest.approx(10 / 3)
    assert window.burn_rate[6 * 3600] == pytest.approx(10 / 3)  # under 6x: no page
    assert window.alert_level == "ticket" and window.status == "at_risk"
    assert WindowWords(window).status_label == "at risk"
    assert WindowWords(window).status_reason.startswith("the last 24 h burned the error budget at 3.3×")


def test_a_pair_needs_half_its_long_span_covered_before_it_fires(world):
    # one bad scan two minutes old is 100 % bad so far, and says so, but it is not a trend
    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.99,
                             interval_minutes=5)
    scan_at(endpoint, NOW - timedelta(minutes=2), CAPPED_D)

    window = slo_windows.window(endpoint, 7, now=NOW)

    assert window.burn_rate[3600] == pytest.approx(100)
    assert window.alert_level == "" and window.status == "no_data"
    assert WindowWords(window).status_label == "too little data yet"


def test_a_spent_budget_says_how_far_over_it_is(world):
    endpoint = make_endpoint(world.team, slo_grade_floor="A", slo_objective=0.999,
                             interval_minutes=60)
    _hourly(endpoint, [GRADE_A] + [CAPPED_D] * 5, start=NOW - 6 * HOUR)

    window = slo_windows.window(endpoint, 7, now=NOW)

    assert window.budget_spent and WindowWords(window).budget_used_text == "5 h used: spent, 4 h 50 min over"
    assert window.status == "breaching"
