"""Probe results live in one PostgreSQL partition per UTC day (scans/liveness/partitions.py):
the migration that partitioned the table kept every row and its id; probes from the real
probe path land in their day's partition, and one of a day with no partition yet is stored
all the same; retention drops whole days past PROBE_RETENTION_DAYS and nothing else, twice
or twice at once; the ORM reads, writes and cascades as before."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, time, timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from accounts import teams
from scans.grader.demo_server import running_target
from scans.history import retention
from scans.liveness import partitions
from scans.liveness import worker as probe_worker
from scans.models import Endpoint, ProbeResult
from tests.conftest import make_user
from tests.helpers.factories import make_endpoint
from tests.helpers.migrations import run_migration_script

BEFORE = ("scans", "0032_agent_workload")
AFTER = ("scans", "0033_probe_partitions")

# Run in another process on a scratch copy of a migrated database (as the other migration
# tests do): back to BEFORE, a populated probe table, forward, back, forward again.
SCRIPT = r"""
def rows():
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, endpoint_id, location, at::text, ok, counted, status_code, "
                       "ttft_ms, kind, cause, tableoid::regclass::text, "
                       "to_char(at AT TIME ZONE 'UTC', 'YYYYMMDD') FROM scans_proberesult "
                       "ORDER BY id")
        return [list(row) for row in cursor.fetchall()]


def table_kind():
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE relname = 'scans_proberesult'")
        return cursor.fetchone()[0]


def insert_one(endpoint_id):
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO scans_proberesult (endpoint_id, location, at, ok, counted, "
                       "kind, cause) VALUES (%s, 'site', now(), true, true, '', '') "
                       "RETURNING id", [endpoint_id])
        return cursor.fetchone()[0]


migrate(BEFORE)
# Made with today's models: the other apps stand at their newest migration.
from accounts.models import Team
from scans.models import Endpoint
team = Team.dangerously_unscoped.create(name="Acme", slug="acme")
endpoint = Endpoint.dangerously_unscoped.create(team=team, name="e", model="m", levels=[1],
                                                base_url="http://127.0.0.1:9/v1")
with connection.cursor() as cursor:
    # 3,000 probes over six days back from an hour ago (five locations, every kind of value),
    # then the newest ten deleted: the sequence stands past the largest id left.
    cursor.execute('''
        INSERT INTO scans_proberesult (endpoint_id, location, at, ok, counted, status_code,
                                       ttft_ms, kind, cause)
        SELECT %s, 'loc-' || (i %% 5), now() - interval '1 hour' - i * interval '173 seconds',
               i %% 7 <> 0, i %% 11 <> 0, CASE WHEN i %% 3 = 0 THEN NULL ELSE 200 + i %% 300 END,
               CASE WHEN i %% 4 = 0 THEN NULL ELSE i / 7.0 END, 'kind-' || (i %% 3),
               repeat('why ', i %% 9)
        FROM generate_series(1, 3000) AS i
    ''', [endpoint.pk])
    cursor.execute("DELETE FROM scans_proberesult WHERE id IN "
                   "(SELECT id FROM scans_proberesult ORDER BY id DESC LIMIT 10)")
before = rows()
last_plain_id = insert_one(endpoint.pk)

migrate(AFTER)
after = rows()
partitioned_kind = table_kind()
first_partitioned_id = insert_one(endpoint.pk)

migrate(BEFORE)
back = rows()
plain_kind = table_kind()
first_plain_again_id = insert_one(endpoint.pk)
migrate(AFTER)
print(json.dumps({"before": before, "after": after, "back": back,
                  "kinds": [partitioned_kind, plain_kind], "after_again": len(rows()),
                  "ids": [last_plain_id, first_partitioned_id, first_plain_again_id]}))
"""


def test_the_migration_keeps_every_probe_and_its_id_each_in_its_days_partition():
    result = run_migration_script("probe_partitions", SCRIPT, BEFORE, AFTER)

    before, after = result["before"], result["after"]
    assert len(before) == 2990
    assert len({row[-1] for row in before}) >= 6  # the rows span six or seven UTC days
    # Every row, with its id and every value, in the partition of its own UTC day.
    assert [row[:10] for row in after] == [row[:10] for row in before] + [
        after[-1][:10]]  # and the row inserted just before migrating
    assert all(row[10] == f"scans_proberesult_p{row[11]}" for row in after)
    assert result["kinds"] == ["p", "r"]  # partitioned, then a plain table again
    # The id goes on counting from where it stood, each way.
    last_plain, first_partitioned, first_plain_again = result["ids"]
    assert last_plain > before[-1][0] + 10  # past the deleted ten
    assert first_partitioned == last_plain + 1
    assert first_plain_again == first_partitioned + 1
    # Migrated back, every row is kept too, the one inserted while partitioned with them.
    back = result["back"]
    assert [row[:10] for row in back[:-1]] == [row[:10] for row in after]
    assert back[-1][0] == first_partitioned
    assert result["after_again"] == len(result["back"]) + 1


def _attached() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c "
                       "ON c.oid = i.inhrelid WHERE i.inhparent = 'scans_proberesult'::regclass "
                       "ORDER BY c.relname")
        return [name for (name,) in cursor.fetchall()]


def _partition_of(probe_ids) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT tableoid::regclass::text FROM scans_proberesult "
                       "WHERE id = ANY(%s)", [list(probe_ids)])
        return {name for (name,) in cursor.fetchall()}


def _day_start(at: datetime) -> datetime:
    return datetime.combine(at.astimezone(UTC).date(), time(), UTC)


def _team_and_endpoint(**fields) -> Endpoint:
    tag = uuid.uuid4().hex[:8]
    team = teams.create_team(f"probes-{tag}", "Probes", owner=make_user(f"owner-{tag}"))
    return make_endpoint(team, **{"base_url": "http://127.0.0.1:9/v1", "model": "m", **fields})


def _probes(endpoint: Endpoint, times) -> list[ProbeResult]:
    times = list(times)
    partitions.ensure_probe_days(times)  # yesterday's, just after midnight (UTC)
    return ProbeResult.dangerously_unscoped.bulk_create([
        ProbeResult(endpoint=endpoint, location="site", at=at, ok=True, ttft_ms=40.0)
        for at in times])


@pytest.mark.django_db
def test_the_real_probe_path_stores_each_probe_in_its_days_partition(settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with running_target() as (host, port):
        endpoint = _team_and_endpoint(base_url=f"http://{host}:{port}/v1", model="demo")
        assert probe_worker.probe_batch([endpoint.pk], "site") == 1
        # A day the beat never made a partition for (it makes a few days ahead): the batch
        # makes it, and its probe is stored, not refused.
        later = timezone.now() + timedelta(days=40)
        assert partitions.partition_name(later.astimezone(UTC).date()) not in _attached()
        with time_machine.travel(later, tick=False):
            assert probe_worker.probe_batch([endpoint.pk], "site") == 1
    now_probe, later_probe = ProbeResult.dangerously_unscoped.filter(
        endpoint=endpoint).order_by("at")
    assert now_probe.ok and later_probe.ok
    assert _partition_of([now_probe.pk]) == {
        partitions.partition_name(now_probe.at.astimezone(UTC).date())}
    assert _partition_of([later_probe.pk]) == {
        partitions.partition_name(later.astimezone(UTC).date())}


@pytest.mark.django_db
def test_the_orm_writes_reads_and_cascades_probes_as_before():
    endpoint = _team_and_endpoint()
    stored = _probes(endpoint, [timezone.now() - timedelta(minutes=n) for n in range(5)])
    assert all(p.pk for p in stored)  # bulk_create returns each row's id
    assert len({p.pk for p in stored}) == 5
    one = ProbeResult.dangerously_unscoped.get(pk=stored[2].pk)
    one.cause = "changed"
    one.save()
    assert ProbeResult.dangerously_unscoped.get(pk=stored[2].pk).cause == "changed"
    ProbeResult.dangerously_unscoped.filter(pk=stored[0].pk).delete()
    assert ProbeResult.dangerously_unscoped.filter(endpoint=endpoint).count() == 4
    Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).delete()  # cascades to its probes
    assert not ProbeResult.dangerously_unscoped.filter(pk__in=[p.pk for p in stored]).exists()


@pytest.mark.django_db
def test_the_models_match_the_migrations():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


@pytest.mark.django_db
def test_the_beat_pass_makes_today_and_the_days_ahead_once():
    now = timezone.now()
    days = [(now + timedelta(days=n)).astimezone(UTC).date()
            for n in range(partitions.DAYS_AHEAD + 1)]
    partitions.ensure_probe_partitions(now=now)
    assert {partitions.partition_name(day) for day in days} <= set(_attached())
    assert partitions.ensure_probe_partitions(now=now) == []  # a second pass makes nothing


def _spread_over_days(endpoint: Endpoint, now: datetime, days_back: range) -> dict[int, list]:
    """A probe at 01:00 and at 23:00 UTC of each day `days_back` before today, by day."""
    today = _day_start(now)
    by_day = {}
    for back in days_back:
        day = today - timedelta(days=back)
        partitions.ensure_probe_days([day])
        by_day[back] = [p.pk for p in _probes(endpoint, [day + timedelta(hours=1),
                                                         day + timedelta(hours=23)])]
    return by_day


def _kept(ids) -> set[int]:
    return set(ProbeResult.dangerously_unscoped.filter(pk__in=ids).values_list("pk", flat=True))


@pytest.mark.django_db(transaction=True)
def test_retention_drops_the_days_wholly_past_retention_and_nothing_else(settings):
    settings.PROBE_RETENTION_DAYS = 14
    now = timezone.now()
    endpoint = _team_and_endpoint()
    by_day = _spread_over_days(endpoint, now, range(12, 19))
    cutoff = now - timedelta(days=14)
    old_days = [back for back in by_day if _day_start(now) - timedelta(days=back - 1) <= cutoff]
    assert sorted(old_days) == [15, 16, 17, 18]  # day 14 straddles the cut-off
    names = {back: partitions.partition_name((_day_start(now) - timedelta(days=back)).date())
             for back in by_day}
    assert set(names.values()) <= set(_attached())

    assert retention.prune_probes(now=now) == 4

    attached = set(_attached())
    for back, ids in by_day.items():
        if back in old_days:
            assert names[back] not in attached and not _kept(ids), back
        else:  # kept whole, even the straddling day's probe older than the cut-off
            assert names[back] in attached and _kept(ids) == set(ids), back
    assert retention.prune_probes(now=now) == 0  # a second pass changes nothing
    assert set(_attached()) == attached


@pytest.mark.django_db(transaction=True)
def test_two_retention_passes_at_once_drop_each_day_once(settings):
    settings.PROBE_RETENTION_DAYS = 14
    now = timezone.now()
    endpoint = _team_and_endpoint()
    by_day = _spread_over_days(endpoint, now, range(14, 20))
    dropped, errors = [], []

    def one_pass():
        try:
            dropped.append(retention.prune_probes(now=now))
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)
        finally:
            connection.close()

    passes = [threading.Thread(target=one_pass) for _ in range(2)]
    for p in passes:
        p.start()
    for p in passes:
        p.join()
    assert errors == []
    assert retention.prune_probes(now=now) + sum(dropped) == 5  # days 15 to 19, once each
    assert _kept(by_day[14]) == set(by_day[14])
    assert not _kept([pk for back in range(15, 20) for pk in by_day[back]])


@pytest.mark.django_db(transaction=True)
def test_a_day_left_detached_by_an_interrupted_pass_is_dropped_by_the_next():
    endpoint = _team_and_endpoint()
    day = datetime(2001, 2, 3, tzinfo=UTC)
    partitions.ensure_probe_days([day])
    (stale,) = _probes(endpoint, [day + timedelta(hours=5)])
    name = partitions.partition_name(day.date())
    with connection.cursor() as cursor:  # a pass that stopped between its DETACH and DROP
        cursor.execute(f"ALTER TABLE scans_proberesult DETACH PARTITION {name}")
    assert name not in _attached()
    retention.prune_probes()
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [name])
        assert cursor.fetchone()[0] is None
    assert not _kept([stale.pk])


@pytest.mark.django_db
def test_retention_inside_a_transaction_drops_the_old_days_too(settings):
    settings.PROBE_RETENTION_DAYS = 14
    now = timezone.now()
    by_day = _spread_over_days(_team_and_endpoint(), now, range(14, 17))
    assert retention.prune_probes(now=now) == 2
    assert not _kept(by_day[15] + by_day[16]) and _kept(by_day[14]) == set(by_day[14])
