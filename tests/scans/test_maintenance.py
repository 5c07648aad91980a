"""Maintenance windows: when they are (weekly in their own timezone, across a
change of daylight saving time), what they hold (alerts: a down endpoint in a window sends
nothing, and the first scan after it does if still down), what they leave out (SLO time: shown
as maintenance, neither good, bad nor no data) and what they pause (scheduled scans, if asked)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from django.core import mail
from django.utils import timezone

from scans import maintenance
from scans.history import slo_windows
from scans.history.slo_wording import WindowWords
from scans.models import MaintenanceKind, MaintenanceWindow, Scan, ScanTrigger
from scans.running import dispatch
from scans.running import worker as scan_worker
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_D, GRADE_A, NOW, report_for, scan_at
from tests.scans.pages.test_endpoint_state import _free_port, real_scan

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


def once(team, start, end, endpoint=None, **fields) -> MaintenanceWindow:
    return MaintenanceWindow.dangerously_unscoped.create(
        team=team,
        endpoint=endpoint,
        name=fields.pop("name", "upgrade"),
        kind=MaintenanceKind.ONCE,
        starts_at=start,
        ends_at=end,
        **fields,
    )


def weekly(team, weekdays, at, minutes, tz, created, endpoint=None) -> MaintenanceWindow:
    return MaintenanceWindow.dangerously_unscoped.create(
        team=team,
        endpoint=endpoint,
        name="weekly reboot",
        kind=MaintenanceKind.WEEKLY,
        weekdays=weekdays,
        start_time=at,
        duration_minutes=minutes,
        timezone=tz,
        created_at=created,
    )


def up_before(endpoint, at: datetime) -> Scan:
    """A good scan of `endpoint`, stored as the worker stores one, moved to `at`."""
    scan = scan_worker.store_report(
        Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE), report_for(GRADE_A)
    )
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(
        queued_at=at, started_at=at, finished_at=at + timedelta(minutes=1)
    )
    return scan


def test_a_weekly_window_keeps_its_local_time_across_a_change_of_daylight_saving_time(world):
    # Sundays 03:00 Berlin for 90 min; clocks go forward on Sunday 29 March 2026 at 02:00.
    window = weekly(
        world.team, [6], time(3, 0), 90, "Europe/Berlin", created=datetime(2026, 3, 1, tzinfo=UTC)
    )

    spans = [
        (o.start, o.end)
        for o in maintenance.occurrences(
            window, datetime(2026, 3, 20, tzinfo=UTC), datetime(2026, 4, 3, tzinfo=UTC)
        )
    ]

    assert spans == [
        (datetime(2026, 3, 22, 2, 0, tzinfo=UTC), datetime(2026, 3, 22, 3, 30, tzinfo=UTC)),  # CET
        (datetime(2026, 3, 29, 1, 0, tzinfo=UTC), datetime(2026, 3, 29, 2, 30, tzinfo=UTC)),  # CEST
    ]


def test_a_weekly_start_in_the_skipped_hour_starts_an_hour_later_on_the_clock(world):
    window = weekly(
        world.team, [6], time(2, 30), 60, "Europe/Berlin", created=datetime(2026, 3, 1, tzinfo=UTC)
    )

    (spring,) = maintenance.occurrences(
        window, datetime(2026, 3, 29, tzinfo=UTC), datetime(2026, 3, 29, 12, tzinfo=UTC)
    )

    assert spring.start == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)  # 03:30 CEST
    assert spring.end - spring.start == HOUR


def test_a_weekly_window_in_autumn_repeats_no_hour_and_lasts_its_duration(world):
    # 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 happens twice, the first is taken.
    window = weekly(
        world.team, [6], time(2, 30), 60, "Europe/Berlin", created=datetime(2026, 10, 1, tzinfo=UTC)
    )

    (autumn,) = maintenance.occurrences(
        window, datetime(2026, 10, 25, tzinfo=UTC), datetime(2026, 10, 25, 12, tzinfo=UTC)
    )

    assert autumn.start == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert autumn.end == datetime(2026, 10, 25, 1, 30, tzinfo=UTC)


def test_a_weekly_window_covers_nothing_before_it_was_created(world):
    endpoint = make_endpoint(world.team)
    weekly(world.team, [0, 1, 2, 3, 4, 5, 6], time(0, 0), 60, "UTC", created=NOW - timedelta(days=2))

    spans = maintenance.maintenance_intervals(endpoint, NOW - timedelta(days=7), NOW)

    assert spans == [
        (datetime(2026, 11, 28, 0, 0, tzinfo=UTC), datetime(2026, 11, 28, 1, 0, tzinfo=UTC)),
        (datetime(2026, 11, 29, 0, 0, tzinfo=UTC), datetime(2026, 11, 29, 1, 0, tzinfo=UTC)),
    ]


def test_a_team_wide_window_covers_every_endpoint_of_the_team_and_no_other_team(world):
    mine = make_endpoint(world.team, name="mine")
    sibling = make_endpoint(world.team, name="sibling")
    theirs = make_endpoint(world.other_team, name="theirs")
    once(world.team, NOW - HOUR, NOW + HOUR)
    once(world.team, NOW - 3 * HOUR, NOW - 2 * HOUR, endpoint=sibling, name="sibling only")

    assert [w.name for w in maintenance.windows_covering(mine, NOW)] == ["upgrade"]
    assert maintenance.windows_covering(theirs, NOW) == []
    assert maintenance.maintenance_intervals(sibling, NOW - 4 * HOUR, NOW) == [
        (NOW - 3 * HOUR, NOW - 2 * HOUR),
        (NOW - HOUR, NOW),
    ]
    assert maintenance.maintenance_intervals(mine, NOW - 4 * HOUR, NOW) == [(NOW - HOUR, NOW)]


# --- SLO windows ---------------------------------------------------------------------------


def test_slo_time_in_a_window_is_maintenance_neither_good_nor_bad_nor_no_data(world):
    endpoint = make_endpoint(world.team, interval_minutes=60, slo_grade_floor="B", slo_objective=0.99)
    # hourly for 6 h: good, good, bad, bad, good, good; the two bad hours are in a window
    for i, values in enumerate([GRADE_A, GRADE_A, CAPPED_D, CAPPED_D, GRADE_A, GRADE_A]):
        scan_at(endpoint, NOW - (6 - i) * HOUR, values)
    without = slo_windows.window(endpoint, 7, now=NOW)
    once(world.team, NOW - 4 * HOUR, NOW - 2 * HOUR, endpoint=endpoint)

    held = slo_windows.window(endpoint, 7, now=NOW)

    assert without.bad_s == 2 * 3600 and without.covered_s == 6 * 3600
    assert held.maintenance_s == 2 * 3600
    assert held.covered_s == 4 * 3600 and held.bad_s == 0 and held.share == 1.0
    assert WindowWords(held).maintenance_text == "maintenance for 2 h of the 7 days"
    # no data is the time neither scanned nor in maintenance; the budget is of the time outside
    assert held.uncovered_s == 7 * 86400 - 6 * 3600
    assert held.budget_s == pytest.approx(0.01 * (7 * 86400 - 2 * 3600))
    assert held.burn_rate[6 * 3600] == 0.0 and without.burn_rate[6 * 3600] > 0
    assert WindowWords(held).coverage_text == "scans cover 4 h of the 6 d 22 h outside maintenance (2.4%)"


def test_a_window_inside_one_scans_interval_cuts_only_its_own_time(world):
    endpoint = make_endpoint(world.team, interval_minutes=60, slo_grade_floor="B")
    scan_at(endpoint, NOW - HOUR, CAPPED_D)  # stands for the last hour, bad
    once(world.team, NOW - 40 * timedelta(minutes=1), NOW - 10 * timedelta(minutes=1))

    held = slo_windows.window(endpoint, 7, now=NOW)

    assert held.covered_s == 30 * 60 and held.bad_s == 30 * 60 and held.scans == 1


# --- the dispatcher ----------------------------------------------------------------------


def test_a_window_that_pauses_scans_skips_the_slot_and_one_that_does_not_scans(world):
    now = timezone.now()
    paused = make_endpoint(world.team, name="paused", next_scan_at=now - timedelta(seconds=1))
    running = make_endpoint(world.team, name="running", next_scan_at=now - timedelta(seconds=1))
    once(world.team, now - HOUR, now + HOUR, endpoint=paused, pause_scans=True)
    once(world.team, now - HOUR, now + HOUR, endpoint=running)

    created = dispatch.enqueue_due(now)

    assert list(
        Scan.dangerously_unscoped.filter(pk__in=created).values_list("endpoint__name", flat=True).distinct()
    ) == ["running"]
    paused.refresh_from_db()
    assert paused.next_scan_at > now  # the schedule still moves on


# --- alerts --------------------------------------------------------------------------------


def test_a_down_endpoint_in_a_window_sends_nothing_and_alerts_when_still_down_after_it(
    world, eager_tasks, django_capture_on_commit_callbacks
):
    dead = make_endpoint(world.team, name="flaky box", base_url=f"http://127.0.0.1:{_free_port()}/v1")
    now = timezone.now()
    window = once(world.team, now - HOUR, now + HOUR, endpoint=dead)
    with django_capture_on_commit_callbacks(execute=True):
        up_before(dead, now - 2 * HOUR)
        real_scan(dead)  # nothing listens there: down, inside the window
        real_scan(dead)
    assert mail.outbox == []  # held

    MaintenanceWindow.dangerously_unscoped.filter(pk=window.pk).update(
        ends_at=timezone.now()
    )  # the window is over
    with django_capture_on_commit_callbacks(execute=True):
        after = real_scan(dead)

    (down,) = mail.outbox  # still down after the window: the alert goes out now
    assert down.subject == "[Tokvera] flaky box: down"
    assert f"/scans/{after.public_id}/" in down.body


def test_a_down_endpoint_outside_any_window_alerts_at_once(
    world, eager_tasks, django_capture_on_commit_callbacks
):
    dead = make_endpoint(world.team, name="flaky box", base_url=f"http://127.0.0.1:{_free_port()}/v1")
    now = timezone.now()
    once(world.team, now - 3 * HOUR, now - 2 * HOUR, endpoint=dead)  # over before
    once(world.team, now - HOUR, now + HOUR, endpoint=make_endpoint(world.team, name="other"))
    with django_capture_on_commit_callbacks(execute=True):
        scan_worker.store_report(
            Scan.dangerously_unscoped.create(endpoint=dead, trigger=ScanTrigger.SCHEDULE), report_for(GRADE_A)
        )
        real_scan(dead)

    (down,) = mail.outbox
    assert down.subject == "[Tokvera] flaky box: down"


def test_a_recovery_during_a_window_sends_nothing_when_it_was_up_before_it(
    world, eager_tasks, django_capture_on_commit_callbacks
):
    dead = make_endpoint(world.team, name="flaky box", base_url=f"http://127.0.0.1:{_free_port()}/v1")
    now = timezone.now()
    window = once(world.team, now - HOUR, now + HOUR, endpoint=dead)
    with django_capture_on_commit_callbacks(execute=True):
        up_before(dead, now - 2 * HOUR)
        real_scan(dead)  # down inside the window
    MaintenanceWindow.dangerously_unscoped.filter(pk=window.pk).update(ends_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=True):
        scan_worker.store_report(
            Scan.dangerously_unscoped.create(endpoint=dead, trigger=ScanTrigger.SCHEDULE), report_for(GRADE_A)
        )  # up again after it

    assert mail.outbox == []  # up before, up after: nothing to say
