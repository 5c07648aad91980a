"""The dashboard reads the SLO windows of a page of endpoints in one query: each endpoint's
figures are the ones its own window gives, whichever targets the other endpoints of the page
set (a check's values are read only where an endpoint sets a target on it)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scans.history import slo_windows
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, NOW, scan_at, with_values

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
SLOW_AND_FAILING = with_values(GRADE_A, ttft_p95_at_concurrency_1=900.0, error_rate=0.05)


def _hourly(endpoint, values_list):
    for i, values in enumerate(values_list):
        scan_at(endpoint, NOW - (len(values_list) - i) * HOUR, values)


def test_an_endpoint_with_targets_and_one_without_read_as_their_own_windows(world):
    strict = make_endpoint(world.team, name="strict", slo_grade_floor="F",
                           slo_ttft_p95_ms=500, slo_error_rate=0.02, interval_minutes=60)
    lenient = make_endpoint(world.team, name="lenient", slo_grade_floor="F",
                            interval_minutes=60)
    for endpoint in (strict, lenient):
        _hourly(endpoint, [GRADE_A, SLOW_AND_FAILING, SLOW_AND_FAILING, GRADE_A])

    together = slo_windows.windows_for([strict, lenient], 7, now=NOW)

    assert together[strict.pk] == slo_windows.window(strict, 7, now=NOW)
    assert together[lenient.pk] == slo_windows.window(lenient, 7, now=NOW)
    strict_targets = {t.key: t.missed_s for t in together[strict.pk].targets}
    assert strict_targets == {"grade": 0, "ttft_p95": 2 * 3600, "error_rate": 2 * 3600}
    assert together[strict.pk].bad_s == 2 * 3600
    assert [t.key for t in together[lenient.pk].targets] == ["grade"]
    assert together[lenient.pk].bad_s == 0 and together[lenient.pk].covered_s == 4 * 3600


def test_a_page_where_no_endpoint_sets_a_value_target_judges_the_grade_alone(world):
    endpoints = [make_endpoint(world.team, name=f"e{i}", slo_grade_floor="B",
                               interval_minutes=60) for i in range(2)]
    for endpoint in endpoints:
        _hourly(endpoint, [SLOW_AND_FAILING] * 3)

    windows = slo_windows.windows_for(endpoints, 7, now=NOW)

    for endpoint in endpoints:
        assert windows[endpoint.pk].covered_s == 3 * 3600
        assert windows[endpoint.pk].bad_s == 0  # slow and failing, but graded B
        assert windows[endpoint.pk].status == "meeting"
