"""SLO burn-rate alerts: the multi-window pairs of scans/history/slo_windows.py, evaluated where
scans are stored (scans/alerts.after_scan), page once when a fast pair starts firing, file a
ticket once for a slow one, and send one recovery when no pair fires any more; by email and
through the signed webhook, like every other alert.

Scans are stored through the worker's own store_report at chosen times (time-machine holds
the clock there), so each alert is evaluated as it would be at that scan's end."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core import mail

from scans.models import Endpoint, Scan, ScanTrigger
from scans.notify import alerts
from scans.running import worker as scan_worker
from tests.helpers.factories import make_endpoint
from tests.helpers.servers import webhook_receiver
from tests.scans.conftest import CAPPED_D, GRADE_A, report_for, with_values

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
SLOW_FIRST_TOKEN = with_values(GRADE_A, ttft_p95_at_concurrency_1=900.0)


def _scan(endpoint, when, values) -> Scan:
    """A scan stored at `when` by the worker's path, its alerts evaluated at that moment."""
    with time_machine.travel(when, tick=False):
        return scan_worker.store_report(
            Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE),
            report_for(values, model=endpoint.model),
        )


def _slo_subjects() -> list[str]:
    return [m.subject for m in mail.outbox if ": slo " in m.subject]


def test_a_target_missing_its_ttft_target_pages_once_and_recovers_once(
    world, settings, eager_tasks, django_capture_on_commit_callbacks
):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with webhook_receiver() as (url, received):
        endpoint = make_endpoint(
            world.team,
            name="slow box",
            slo_ttft_p95_ms=500,
            slo_grade_floor="F",
            slo_objective=0.9,
            interval_minutes=60,
            webhook_url=url,
        )
        with django_capture_on_commit_callbacks(execute=True):
            for i in range(4):  # 3 h covered at the 4th (half the 6 h pair's span), all over target
                _scan(endpoint, T0 + i * HOUR, SLOW_FIRST_TOKEN)
        assert _slo_subjects() == ["[Tokvera] slow box: slo breaching"]
        (page,) = [m for m in mail.outbox if ": slo " in m.subject]
        assert (
            "the SLO's error budget burns at 10.0× over the last 6 h and 10.0× over the "
            "last 30 min (page at 6× or more); 0.0% of the covered time of the last 7 days "
            "was good (objective 90.0%)"
        ) in page.body
        assert f"/endpoints/{endpoint.public_id}/#slo" in page.body
        assert Endpoint.dangerously_unscoped.get(pk=endpoint.pk).slo_burn_alert == "page"

        with django_capture_on_commit_callbacks(execute=True):
            for i in range(4, 11):  # fixed: the fast pair stops, the slow ones linger 6 h
                _scan(endpoint, T0 + i * HOUR, GRADE_A)
                if i == 9:
                    assert _slo_subjects() == ["[Tokvera] slow box: slo breaching"]
        assert _slo_subjects() == ["[Tokvera] slow box: slo breaching", "[Tokvera] slow box: slo recovered"]
    assert Endpoint.dangerously_unscoped.get(pk=endpoint.pk).slo_burn_alert == ""
    sent = [json.loads(body) for _, body in received]
    assert [m["event"] for m in sent] == ["slo_breaching", "slo_recovered"]
    assert sent[0]["slo"]["status"] == "breaching"
    assert sent[0]["slo"]["firing"] == [{"level": "page", "windows": "6 h and 30 min", "threshold": 6.0}]
    rates = {b["span"]: b["rate"] for b in sent[0]["slo"]["burn_rates"]}
    assert rates["1 h"] == pytest.approx(10) and rates["30 min"] == pytest.approx(10)
    assert sent[1]["slo"]["firing"] == []


def test_a_slow_burn_files_one_ticket_and_no_page(world, eager_tasks, django_capture_on_commit_callbacks):
    # one bad hour in four: 2.5x, never the 6x of a page, but over 1x for 3 d and 6 h, once
    # half of the 3 d (36 h) is covered
    endpoint = make_endpoint(
        world.team, name="flaky box", slo_grade_floor="B", slo_objective=0.9, interval_minutes=60
    )
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(36):
            _scan(endpoint, T0 + i * HOUR, CAPPED_D if i % 4 == 3 else GRADE_A)
    assert _slo_subjects() == []
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(36, 37):
            _scan(endpoint, T0 + i * HOUR, CAPPED_D if i % 4 == 3 else GRADE_A)
    assert _slo_subjects() == ["[Tokvera] flaky box: slo at risk"]
    (ticket,) = [m for m in mail.outbox if ": slo " in m.subject]
    assert "over the last 3 d" in ticket.body and "(ticket at 1× or more)" in ticket.body

    with django_capture_on_commit_callbacks(execute=True):
        for i in range(37, 43):
            _scan(endpoint, T0 + i * HOUR, GRADE_A)
    assert _slo_subjects() == ["[Tokvera] flaky box: slo at risk", "[Tokvera] flaky box: slo recovered"]


def test_a_ticket_that_turns_into_a_fast_burn_pages(world, eager_tasks, django_capture_on_commit_callbacks):
    endpoint = make_endpoint(
        world.team, name="worse box", slo_grade_floor="B", slo_objective=0.9, interval_minutes=60
    )
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(37):
            _scan(endpoint, T0 + i * HOUR, CAPPED_D if i % 4 == 3 else GRADE_A)
        for i in range(37, 42):  # now every scan misses
            _scan(endpoint, T0 + i * HOUR, CAPPED_D)
    assert _slo_subjects() == ["[Tokvera] worse box: slo at risk", "[Tokvera] worse box: slo breaching"]


def test_the_same_scan_evaluated_twice_alerts_once(world, eager_tasks, django_capture_on_commit_callbacks):
    endpoint = make_endpoint(
        world.team, name="twice", slo_grade_floor="B", slo_objective=0.9, interval_minutes=60
    )
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(3):
            _scan(endpoint, T0 + i * HOUR, CAPPED_D)
        scan = _scan(endpoint, T0 + 3 * HOUR, CAPPED_D)
        alerts.after_scan(scan)  # a redelivered task stores nothing new and sends nothing
    assert _slo_subjects() == ["[Tokvera] twice: slo breaching"]


def test_a_new_endpoints_first_bad_scans_page_nobody_until_half_an_hour_is_covered(
    world, eager_tasks, django_capture_on_commit_callbacks
):
    # a few scans are not a trend: the 1 h span must be half covered first
    endpoint = make_endpoint(
        world.team, name="new box", slo_grade_floor="B", slo_objective=0.99, interval_minutes=5
    )
    with django_capture_on_commit_callbacks(execute=True):
        for minutes in range(0, 30, 5):
            _scan(endpoint, T0 + timedelta(minutes=minutes), CAPPED_D)
    assert _slo_subjects() == []
    with django_capture_on_commit_callbacks(execute=True):
        _scan(endpoint, T0 + timedelta(minutes=30), CAPPED_D)
    assert _slo_subjects() == ["[Tokvera] new box: slo breaching"]
