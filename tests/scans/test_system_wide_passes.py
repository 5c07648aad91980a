"""A periodic task that works through every team's rows goes on past one row that fails: the
failure is logged with the row, and every other team's rows are done as usual.

The failing row is real: a maintenance window stored past the year 10,000 (as a window ending
at the calendar's end in a zone behind UTC once was), which PostgreSQL keeps and psycopg cannot
read back, so everything that reads that team's windows raises."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from scans import tasks as scan_tasks
from scans.models import MaintenanceWindow, Scan, ScanStatus, ScanTrigger
from scans.running import dispatch
from tests.helpers.factories import make_endpoint

pytestmark = pytest.mark.django_db(transaction=True)


def unreadable_window(team) -> MaintenanceWindow:
    window = MaintenanceWindow.dangerously_unscoped.create(
        team=team, name="to the end of time", starts_at=timezone.now() - timedelta(days=1),
        ends_at=timezone.now() + timedelta(days=1),
    )
    with connection.cursor() as cursor:
        cursor.execute("UPDATE scans_maintenancewindow SET ends_at = '10000-01-01 09:00+00' WHERE id = %s",
                       [window.pk])
    return window


def test_due_scans_of_other_teams_are_queued_past_a_team_whose_windows_cannot_be_read(world, caplog):
    due = timezone.now() - timedelta(minutes=1)
    broken = make_endpoint(world.team, name="broken team's", next_scan_at=due)
    unreadable_window(world.team)
    fine = make_endpoint(world.other_team, name="other team's", next_scan_at=due)

    with caplog.at_level(logging.ERROR):
        created = dispatch.enqueue_due()

    assert Scan.dangerously_unscoped.filter(endpoint=fine, pk__in=created).count() == 1
    assert not Scan.dangerously_unscoped.filter(endpoint=broken).exists()
    assert f"endpoint {broken.pk}" in caplog.text


def test_the_reaper_errors_other_teams_dead_scans_past_one_whose_alerts_cannot_be_worked_out(world, caplog):
    stale = timezone.now() - timedelta(hours=1)
    scans = []
    for team in (world.team, world.other_team):
        scan = Scan.dangerously_unscoped.create(endpoint=make_endpoint(team), trigger=ScanTrigger.SCHEDULE)
        Scan.dangerously_unscoped.filter(pk=scan.pk).update(
            status=ScanStatus.RUNNING, started_at=stale, heartbeat_at=stale)
        scans.append(scan)
    unreadable_window(world.team)

    with caplog.at_level(logging.ERROR):
        scan_tasks.reap_scans()

    broken, fine = (Scan.dangerously_unscoped.get(pk=s.pk) for s in scans)
    assert fine.status == ScanStatus.ERRORED and "stopped heartbeating" in fine.error_reason
    assert f"scan {broken.pk}" in caplog.text


def test_a_window_stored_past_the_calendars_end_is_repaired_so_the_team_can_delete_it(world, owner_client):
    from importlib import import_module

    window = unreadable_window(world.team)
    repair = import_module("scans.migrations.0024_h34c_repair_unreadable_maintenance_windows")

    with connection.cursor() as cursor:
        cursor.execute(repair.REPAIR_SQL)

    listing = owner_client.get(reverse("team-maintenance", args=[world.team.slug]))
    assert listing.status_code == 200 and "to the end of time" in listing.content.decode()
    answer = owner_client.post(reverse("maintenance-delete", args=[window.public_id]))
    assert answer.status_code == 302
    assert not MaintenanceWindow.dangerously_unscoped.filter(pk=window.pk).exists()


@pytest.fixture
def owner_client(world):
    from django.test import Client

    client = Client()
    client.force_login(world.owner)
    return client
