"""The every-minute finder makes exactly one scan per endpoint per slot."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from scans.models import Scan, ScanStatus
from scans.running import dispatch
from scans.running import worker as scan_worker
from tests.helpers.factories import make_endpoint

pytestmark = pytest.mark.django_db


def test_a_due_endpoint_gets_one_scan_and_its_next_slot(world):
    now = timezone.now().replace(second=0, microsecond=0)
    endpoint = make_endpoint(world.team, next_scan_at=now - timedelta(minutes=1),
                             interval_minutes=15)
    with time_machine.travel(now, tick=False):
        created = dispatch.enqueue_due()
        again = dispatch.enqueue_due()
    assert len(created) == 1 and again == []
    scan = Scan.dangerously_unscoped.get(pk=created[0])
    assert scan.slot == now - timedelta(minutes=1)
    assert scan.status == ScanStatus.QUEUED and scan.trigger == "schedule"
    endpoint.refresh_from_db()
    assert endpoint.next_scan_at == now + timedelta(minutes=15)


def test_disabled_and_pushed_endpoints_are_never_due(world):
    past = timezone.now() - timedelta(hours=1)
    make_endpoint(world.team, next_scan_at=past, enabled=False)
    make_endpoint(world.team, next_scan_at=past, mode="pushed")
    assert dispatch.enqueue_due() == []


def test_a_slot_already_scanned_is_not_scanned_again(world):
    slot = timezone.now() - timedelta(minutes=2)
    endpoint = make_endpoint(world.team, next_scan_at=slot)
    Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="schedule", slot=slot)
    assert dispatch.enqueue_due() == []  # the unique (endpoint, slot) constraint holds
    endpoint.refresh_from_db()
    assert endpoint.next_scan_at > timezone.now()  # and the schedule moved on, not stalled


def test_a_scan_waiting_for_a_busy_origin_is_not_reaped_but_a_lost_one_is(world):
    endpoint = make_endpoint(world.team)
    waiting = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual",
                                               deadline_at=timezone.now() + dispatch.QUEUED_GRACE)
    lost = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="schedule",
                                            slot=timezone.now())
    later = timezone.now() + dispatch.QUEUED_GRACE + timedelta(minutes=1)
    with time_machine.travel(later - timedelta(minutes=2), tick=False):
        scan_worker.keep_waiting(waiting.pk)  # its task retried: still alive
    assert scan_worker.reap(now=later) == 1
    waiting.refresh_from_db()
    lost.refresh_from_db()
    assert waiting.status == ScanStatus.QUEUED
    assert lost.status == ScanStatus.ERRORED and "no worker picked" in lost.error_reason


@pytest.mark.django_db(transaction=True)
def test_two_beats_racing_make_one_scan_per_slot(world):
    endpoints = [make_endpoint(world.team, name=f"e{i}",
                               next_scan_at=timezone.now() - timedelta(minutes=1))
                 for i in range(20)]
    results, barrier = [], threading.Barrier(4)

    def beat():
        barrier.wait()
        try:
            results.extend(dispatch.enqueue_due())
        finally:
            connection.close()

    threads = [threading.Thread(target=beat) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == len(endpoints)
    assert Scan.dangerously_unscoped.filter(endpoint__in=endpoints).count() == len(endpoints)


def test_the_due_finder_uses_the_partial_index_on_postgres(world):
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        sql, params = dispatch.due_endpoints(timezone.now()).query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("SET enable_seqscan = on")
    assert "endpoint_due" in plan


def test_a_slot_is_stretched_while_the_endpoints_last_scheduled_scan_has_not_ended(world):
    now = timezone.now().replace(second=0, microsecond=0)
    endpoint = make_endpoint(world.team, next_scan_at=now - timedelta(minutes=1),
                             interval_minutes=5)
    with time_machine.travel(now, tick=False):
        [first] = dispatch.enqueue_due()
    Scan.dangerously_unscoped.filter(pk=first).update(status=ScanStatus.RUNNING,
                                                      started_at=now)
    # Five minutes on, the scan still runs: no second scan queues behind it...
    with time_machine.travel(now + timedelta(minutes=5), tick=False):
        assert dispatch.enqueue_due() == []
    endpoint.refresh_from_db()
    assert endpoint.next_scan_at == now + timedelta(minutes=10)  # the schedule moved on
    assert Scan.dangerously_unscoped.filter(endpoint=endpoint).count() == 1
    # ...and once it has ended, the next slot is scanned as usual.
    Scan.dangerously_unscoped.filter(pk=first).update(status=ScanStatus.SUCCEEDED,
                                                      finished_at=now + timedelta(minutes=7))
    with time_machine.travel(now + timedelta(minutes=10), tick=False):
        assert len(dispatch.enqueue_due()) == 1
