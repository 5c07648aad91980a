"""Scans and their check results live in one PostgreSQL partition per UTC month
(scans/models/scan_partitions.py): the migration that partitioned the tables kept every row,
its id and every index, a scheduled scan in its slot's month and each check beside its scan;
the real paths store scans of a month that has no partition yet; one slot still makes one scan
and a retried upload one scan, across a month's start too; retention drops the months wholly
past SCAN_RETENTION_DAYS with their checks, and nothing else."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from accounts import teams
from common.time_partitions import month_start
from scans.history import retention
from scans.models import (
    AlertEvent,
    CheckResult,
    Endpoint,
    PushedReportBody,
    Scan,
    ScanRollup,
    scan_partitions,
)
from scans.running import dispatch, pushes
from tests.conftest import make_user
from tests.helpers.factories import make_endpoint, make_report
from tests.helpers.migrations import run_migration_script

BEFORE = ("scans", "0033_probe_partitions")
AFTER = ("scans", "0034_scan_partitions")

# Run in another process on a scratch copy of a migrated database (as the other migration
# tests do): back to BEFORE, populated tables, forward, back, forward again.
SCRIPT = r"""
def query(sql):
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [[str(v) for v in row] for row in cursor.fetchall()]


def state():
    return {
        "scans": query("SELECT id, public_id, endpoint_id, trigger, slot, queued_at, status, "
                       "grade, report::text, report_digest, tableoid::regclass::text "
                       "FROM scans_scan ORDER BY id"),
        "checks": query("SELECT c.id, c.scan_id, c.check_id, c.value, c.measured_at, "
                        "c.tableoid::regclass::text FROM scans_checkresult AS c ORDER BY id"),
        "alerts": query("SELECT id, scan_id FROM scans_alertevent ORDER BY id"),
        "bodies": query("SELECT scan_id, length(body) FROM scans_pushedreportbody"),
        "indexes": query("SELECT indexname FROM pg_indexes WHERE tablename IN "
                         "('scans_scan', 'scans_checkresult') ORDER BY indexname"),
        "kinds": query("SELECT relname, relkind FROM pg_class WHERE relname IN "
                       "('scans_scan', 'scans_checkresult') ORDER BY relname"),
        "pointing_in": query("SELECT conname FROM pg_constraint WHERE contype = 'f' AND "
                             "confrelid = 'scans_scan'::regclass ORDER BY conname"),
    }


def insert_one(apps, endpoint_id):
    return apps.get_model("scans", "Scan")._default_manager.create(
        endpoint_id=endpoint_id, trigger="manual").pk


apps = migrate(BEFORE)
# The team with today's model: the other apps stand at their newest migration.
from accounts.models import Team
Endpoint, Scan = apps.get_model("scans", "Endpoint"), apps.get_model("scans", "Scan")
CheckResult = apps.get_model("scans", "CheckResult")
team = Team.dangerously_unscoped.create(name="Acme", slug="acme")
endpoint = Endpoint._default_manager.create(team_id=team.pk, name="e", model="m", levels=[1],
                                            base_url="http://127.0.0.1:9/v1")
start = datetime(2026, 1, 20, 7, 0, tzinfo=UTC)
scans = []
for i in range(60):  # scheduled, a slot every 13 hours: January into February
    slot = start + i * timedelta(hours=13)
    scans.append(Scan(endpoint=endpoint, trigger="schedule", slot=slot, status="succeeded",
                      grade="AB"[i % 2], report={"n": i}))
# A slot of January's last minute queued in February: the slot's month holds it.
scans.append(Scan(endpoint=endpoint, trigger="schedule", slot=datetime(2026, 1, 31, 23, 59,
                  tzinfo=UTC), status="succeeded", grade="C"))
scans.append(Scan(endpoint=endpoint, trigger="push", report_digest="d" * 64, location="pushed",
                  pushed=True, status="queued"))
scans += [Scan(endpoint=endpoint, trigger="manual", status="errored") for _ in range(5)]
Scan._default_manager.bulk_create(scans)
times = [s.slot + timedelta(seconds=30) if s.slot else datetime(2025, 12, 3, tzinfo=UTC)
         for s in scans]
times[60] = datetime(2026, 2, 1, 0, 0, 30, tzinfo=UTC)
for s, t in zip(scans, times):
    Scan._default_manager.filter(pk=s.pk).update(queued_at=t)
CheckResult._default_manager.bulk_create(
    CheckResult(scan=s, endpoint=endpoint, check_id=f"check_{k}", value=k * 1.5,
                status="pass", counted=True, measured_at=t + timedelta(minutes=1),
                scoring_version="0.9.0")
    for s, t in zip(scans[:61], times) for k in range(3))
apps.get_model("scans", "AlertEvent")._default_manager.create(
    team_id=team.pk, endpoint=endpoint, scan=scans[10], kind="down", message={"m": 1})
apps.get_model("scans", "PushedReportBody")._default_manager.create(scan=scans[61], body=b"x" * 9)
Scan._default_manager.filter(pk=scans[-1].pk).delete()  # the sequence stands past the last
before = state()
last_plain_id = insert_one(apps, endpoint.pk)

apps = migrate(AFTER)
after = state()
first_partitioned_id = insert_one(apps, endpoint.pk)

apps = migrate(BEFORE)
back = state()
first_plain_again_id = insert_one(apps, endpoint.pk)
migrate(AFTER)
print(json.dumps({"before": before, "after": after, "back": back,
                  "ids": [last_plain_id, first_partitioned_id, first_plain_again_id]}))
"""


def test_the_migration_keeps_every_scan_check_and_index_each_in_its_months_partition():
    result = run_migration_script("scan_partitions", SCRIPT, BEFORE, AFTER)
    before, after, back = result["before"], result["after"], result["back"]

    # Every scan with its id and values, plus the one inserted just before migrating.
    assert len(before["scans"]) == 66 and len(before["checks"]) == 183
    assert [row[:10] for row in after["scans"]] == [row[:10] for row in before["scans"]] + [
        after["scans"][-1][:10]]
    by_id = {row[0]: row for row in after["scans"]}
    for row in after["scans"]:
        slot, queued = row[4], row[5]
        month = (slot if slot != "None" else queued)[:7].replace("-", "")
        assert row[10] == f"scans_scan_p{month}", row  # the slot's month, else the queue's
    assert {row[10] for row in after["scans"]} >= {
        "scans_scan_p202512", "scans_scan_p202601", "scans_scan_p202602"}
    jan_last = next(row for row in after["scans"] if row[4].startswith("2026-01-31 23:59"))
    assert jan_last[5].startswith("2026-02-01") and jan_last[10] == "scans_scan_p202601"
    # Each check with its id and values, in its scan's month.
    assert [row[:5] for row in after["checks"]] == [row[:5] for row in before["checks"]]
    assert all(row[5] == by_id[row[1]][10].replace("scans_scan", "scans_checkresult")
               for row in after["checks"])
    # What pointed at a scan still does; no foreign key in the database does any more.
    assert after["alerts"] == before["alerts"] and after["bodies"] == before["bodies"]
    assert before["pointing_in"] and after["pointing_in"] == []
    assert dict(after["kinds"]) == {"scans_checkresult": "p", "scans_scan": "p"}
    # Every index, its unique ones now with the month (the public id's a plain index and a
    # unique key with the month).
    added = {n for (n,) in after["indexes"]} - {n for (n,) in before["indexes"]}
    removed = {n for (n,) in before["indexes"]} - {n for (n,) in after["indexes"]}
    public_id = {n for n in added | removed if n.startswith("scans_scan_public_id_")}
    assert added - public_id == {"one_scan_per_public_id"} and removed - public_id == set()
    assert len(public_id) == 2  # the unique key's index gone, a plain one made
    # The id goes on counting where it stood, each way.
    last_plain, first_partitioned, first_plain_again = result["ids"]
    assert last_plain > int(before["scans"][-1][0]) + 1  # past the deleted one
    assert first_partitioned == last_plain + 1 and first_plain_again == first_partitioned + 1
    # Migrated back: plain tables, every row (the one made while partitioned too), every
    # index and foreign key as before.
    assert [row[:10] for row in back["scans"][:-1]] == [row[:10] for row in after["scans"]]
    assert [row[:5] for row in back["checks"]] == [row[:5] for row in before["checks"]]
    assert dict(back["kinds"]) == {"scans_checkresult": "r", "scans_scan": "r"}
    assert back["indexes"] == before["indexes"] and back["pointing_in"] == before["pointing_in"]
    assert back["alerts"] == before["alerts"] and back["bodies"] == before["bodies"]


def _partition_of(model, pks) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT tableoid::regclass::text "  # noqa: S608 - the model's
                       f"FROM {model._meta.db_table} WHERE id = ANY(%s)", [list(pks)])
        return {name for (name,) in cursor.fetchall()}


def _attached(table: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c "
                       "ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass", [table])
        return {name for (name,) in cursor.fetchall()}


def _endpoint(**fields) -> Endpoint:
    tag = uuid.uuid4().hex[:8]
    team = teams.create_team(f"scans-{tag}", "Scans", owner=make_user(f"owner-{tag}"))
    return make_endpoint(team, **fields)


@pytest.mark.django_db
def test_a_slot_of_a_month_without_partitions_is_queued_there_once_and_stored_with_its_checks():
    endpoint = _endpoint()
    slot = datetime(2003, 4, 30, 23, 59, tzinfo=UTC)  # long before any partition
    assert "scans_scan_p200304" not in _attached("scans_scan")
    Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(next_scan_at=slot)
    endpoint.refresh_from_db()
    now = slot + timedelta(minutes=2)  # the beat runs in May: the slot's month holds it
    (scan_id,) = dispatch._enqueue_slot(endpoint, now)
    # A doubled beat for the same slot makes no second scan.
    Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(next_scan_at=slot)
    endpoint.refresh_from_db()
    assert dispatch._enqueue_slot(endpoint, now + timedelta(seconds=1)) == []
    assert Scan.dangerously_unscoped.filter(endpoint=endpoint, slot=slot).count() == 1
    scan = Scan.dangerously_unscoped.get(pk=scan_id)
    assert scan.partition_month == date(2003, 4, 1)
    assert _partition_of(Scan, [scan.pk]) == {"scans_scan_p200304"}
    from scans.running import worker

    worker.store_report(scan, make_report(model=endpoint.model))
    checks = CheckResult.dangerously_unscoped.filter(scan_id=scan.pk)
    assert checks.count() == len(make_report(model=endpoint.model)["checks"]) > 0
    assert _partition_of(CheckResult, checks.values_list("pk", flat=True)) == {
        "scans_checkresult_p200304"}


@pytest.mark.django_db(transaction=True)
def test_a_retried_upload_across_a_months_start_finds_its_scan(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    endpoint = _endpoint(mode="pushed")
    body = json.dumps(make_report(model=endpoint.model)).encode()
    sent = []
    original = pushes.send_proof
    pushes.send_proof = sent.append  # the broker is not this test's subject
    try:
        with time_machine.travel(datetime(2031, 5, 31, 23, 59, 59, tzinfo=UTC), tick=False):
            first = pushes.receive_report(endpoint, body)
        with time_machine.travel(datetime(2031, 6, 1, 0, 0, 1, tzinfo=UTC), tick=False):
            again = pushes.receive_report(endpoint, body)
    finally:
        pushes.send_proof = original
    assert first.created and not again.created
    assert again.scan.pk == first.scan.pk
    assert Scan.dangerously_unscoped.filter(endpoint=endpoint).count() == 1
    assert _partition_of(Scan, [first.scan.pk]) == {"scans_scan_p203105"}


@pytest.mark.django_db(transaction=True)
def test_retention_drops_the_months_wholly_past_it_with_their_checks_and_nothing_else(settings):
    settings.SCAN_RETENTION_DAYS = 400
    now = datetime(2040, 6, 15, 12, 0, tzinfo=UTC)
    endpoint = _endpoint()
    # Months of 2039 (cut-off: 2039-05-12): April ends before it, May straddles it.
    months = [date(2039, 3, 1), date(2039, 4, 1), date(2039, 5, 1), date(2039, 6, 1)]
    with time_machine.travel(now - timedelta(days=1), tick=False):
        by_month = {}
        for month in months:
            scan_partitions.ensure_scan_month(month)
            by_month[month] = _stored_in(endpoint, month)
    old = by_month[date(2039, 4, 1)]
    event = AlertEvent.dangerously_unscoped.create(team=endpoint.team, endpoint=endpoint,
                                                   scan=old, kind="down", message={"m": 1})
    rollups_before = ScanRollup.dangerously_unscoped.filter(endpoint=endpoint).count()

    dropped = set(retention.prune_scans(now=now))
    assert {"scans_scan_p203903", "scans_scan_p203904"} <= dropped  # March and April
    assert {"scans_scan_p203905", "scans_scan_p203906"}.isdisjoint(dropped)

    kept = set(Scan.dangerously_unscoped.filter(endpoint=endpoint).values_list(
        "partition_month", flat=True))
    assert kept == {date(2039, 5, 1), date(2039, 6, 1)}
    assert set(CheckResult.dangerously_unscoped.filter(endpoint=endpoint).values_list(
        "partition_month", flat=True)) == kept
    assert {"scans_scan_p203903", "scans_checkresult_p203904"}.isdisjoint(
        _attached("scans_scan") | _attached("scans_checkresult"))
    event.refresh_from_db()
    assert event.scan_id is None and event.message == {"m": 1}  # the news stays
    assert set(PushedReportBody.dangerously_unscoped.filter(
        scan__endpoint=endpoint).values_list("scan__partition_month", flat=True)) == kept
    assert ScanRollup.dangerously_unscoped.filter(endpoint=endpoint).count() == rollups_before
    assert retention.prune_scans(now=now) == []  # a second pass changes nothing
    # The ORM's own cascade still takes a scan's checks with it.
    Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).delete()
    assert not CheckResult.dangerously_unscoped.filter(endpoint_id=endpoint.pk).exists()


def _stored_in(endpoint: Endpoint, month: date) -> Scan:
    """A scan of `endpoint` in `month`'s partition, stored through the worker with its checks
    and a pushed body waiting."""
    from scans.running import worker

    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual",
                                            partition_month=month)
    PushedReportBody.dangerously_unscoped.create(scan=scan, body=b"{}")
    return worker.store_report(scan, make_report(model=endpoint.model))


@pytest.mark.django_db
def test_the_beat_pass_makes_this_month_and_the_months_ahead_once():
    now = timezone.now()
    month = month_start(now)
    scan_partitions.ensure_scan_partitions(now=now)
    for _ in range(scan_partitions.MONTHS_AHEAD + 1):
        for table in scan_partitions.TABLES:
            assert scan_partitions.partition_name(table, month) in _attached(table)
        month = (month.replace(day=28) + timedelta(days=4)).replace(day=1)
    assert scan_partitions.ensure_scan_partitions(now=now) == []


@pytest.mark.django_db
def test_the_parents_statistics_are_made_again_once_a_day_on_a_large_site():
    # Never analyzed (the migration leaves empty tables so): stale, once they hold rows.
    assert scan_partitions.stale_parents(min_rows=0) == list(scan_partitions.TABLES)
    # A small site is left to the planner's guesses (statistics of a few rows would mislead).
    assert scan_partitions.stale_parents() == []
    later = timezone.now() + scan_partitions.STATISTICS_MAX_AGE + timedelta(hours=1)
    assert scan_partitions.stale_parents(now=later, min_rows=0) == list(scan_partitions.TABLES)
