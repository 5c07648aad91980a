"""Alerts are worked out after every stored scan, so the common case reads little: down news
only when a recent scan was down, the SLO burn windows only when an alert is sent or a recent
scan missed the grade floor (scans/notify/alerts.py). These tests pin the edges of those
shortcuts: every alert still goes out on the scan where it is news, including a page that a good
scan raises for the bad hours before it, and a ticket that rests on a bad scan that started
before the pair's short span.

Scans are stored through the worker's own store_report at chosen times (time-machine holds the
clock there), so each alert is evaluated as it would be at that scan's end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core import mail

from scans.models import Endpoint, Scan, ScanTrigger
from scans.running import worker as scan_worker
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_D, GRADE_A, report_for

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _store(endpoint, when, report) -> Scan:
    with time_machine.travel(when, tick=False):
        return scan_worker.store_report(
            Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE),
            report)


def _down_report() -> dict:
    return {**report_for(GRADE_A), "preflight": {"stopped": True, "cause": "connection refused"}}


def _subjects(word: str) -> list[str]:
    return [m.subject for m in mail.outbox if word in m.subject]


def test_a_good_scan_after_hours_below_the_floor_pages_for_them(
    world, eager_tasks, django_capture_on_commit_callbacks
):
    # No TTFT or error-rate target: the grade floor is the SLO. Three hours of D, then an A:
    # only at the A is half of the 6 h pair's span covered, all of it bad.
    endpoint = make_endpoint(world.team, name="grade box", slo_grade_floor="B",
                             slo_objective=0.9, interval_minutes=60)
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(3):
            _store(endpoint, T0 + i * HOUR, report_for(CAPPED_D))
        assert _subjects(": slo ") == []
        _store(endpoint, T0 + 3 * HOUR, report_for(GRADE_A))
    assert _subjects(": slo ") == ["[Tokvera] grade box: slo breaching"]
    assert Endpoint.dangerously_unscoped.get(pk=endpoint.pk).slo_burn_alert == "page"


def test_a_bad_scan_that_began_before_the_short_span_still_files_the_ticket(
    world, eager_tasks, django_capture_on_commit_callbacks
):
    # Hourly scans from T0 + 15 min; five single D scans, 7 h apart, spend 14 % of 36 h. The
    # slow pair (3 d and 6 h at 1x) may fire once 36 h are covered: at T0 + 36 h 15 min, whose
    # 6 h span holds the last 45 min of the D scan started 6 h 15 min before it.
    endpoint = make_endpoint(world.team, name="slow burn", slo_grade_floor="B",
                             slo_objective=0.9, interval_minutes=60)
    bad_hours = {2, 9, 16, 23, 30}
    with django_capture_on_commit_callbacks(execute=True):
        _store(endpoint, T0 + HOUR / 4, report_for(GRADE_A))
        for hour in range(1, 37):
            _store(endpoint, T0 + hour * HOUR,
                   report_for(CAPPED_D if hour in bad_hours else GRADE_A))
        assert _subjects(": slo ") == []
        _store(endpoint, T0 + 36 * HOUR + HOUR / 4, report_for(GRADE_A))
    assert _subjects(": slo ") == ["[Tokvera] slow burn: slo at risk"]


def test_down_and_up_again_go_out_once_each_across_an_errored_scan(
    world, eager_tasks, django_capture_on_commit_callbacks
):
    endpoint = make_endpoint(world.team, name="dead box", slo_grade_floor="F")
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(3):
            _store(endpoint, T0 + i * HOUR, report_for(GRADE_A))
        assert _subjects(": down") == []
        _store(endpoint, T0 + 3 * HOUR, _down_report())
        _store(endpoint, T0 + 4 * HOUR, _down_report())
        with time_machine.travel(T0 + 5 * HOUR, tick=False):
            errored = Scan.dangerously_unscoped.create(endpoint=endpoint,
                                                       trigger=ScanTrigger.SCHEDULE)
            scan_worker.fail(errored.pk, "the worker lost the database")
        _store(endpoint, T0 + 6 * HOUR, report_for(GRADE_A))
        _store(endpoint, T0 + 7 * HOUR, report_for(GRADE_A))
    assert _subjects(": down") == ["[Tokvera] dead box: down", "[Tokvera] dead box: down recovered"]
    down = next(m for m in mail.outbox if m.subject.endswith(": down"))
    assert "the endpoint is down: connection refused" in down.body
