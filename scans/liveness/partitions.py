"""Probe results are partitioned by UTC day: scans_proberesult is a PostgreSQL table
PARTITIONED BY RANGE (at), one partition a day, named scans_proberesult_pYYYYMMDD. Retention
drops whole days (scans/history/retention.py) instead of deleting rows.

There is no DEFAULT partition (PostgreSQL refuses DETACH ... CONCURRENTLY beside one, and a
day's partition could not be created later without moving its rows out of it), so a probe of
a day that has no partition yet would be refused. Hence:
- the hourly retention pass creates today's partition and DAYS_AHEAD more
  (`ensure_probe_partitions`), as the migration that partitioned the table did;
- a batch of probes makes sure of its own days before it is stored (`ensure_probe_days`,
  record.py), so a site whose beat stood still for days still keeps every probe.

A partition is created as a table of its own and then attached: ATTACH PARTITION holds the
parent with SHARE UPDATE EXCLUSIVE, which inserts and reads never wait on (CREATE TABLE ...
PARTITION OF would hold it ACCESS EXCLUSIVE). Creators take turns (a transaction advisory
lock) and each looks again under it, so two at once create each day once.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from common import aged_rows

__all__ = ["DAYS_AHEAD", "TABLE", "ensure_probe_days", "ensure_probe_partitions",
           "partition_name"]

TABLE = "scans_proberesult"
#: Days after today created ahead: the beat's pass is hourly, so a few spare days keep DDL
#: off the probes' path through a stopped beat; a longer stop is covered by ensure_probe_days.
DAYS_AHEAD = 3


def partition_name(day: date) -> str:
    return f"{aged_rows.partition_prefix(TABLE)}{day:%Y%m%d}"


def _bound(day: date) -> str:
    """A day's start as a timestamptz literal in UTC (a date's digits only, never input)."""
    return f"'{datetime.combine(day, time(), UTC).isoformat()}'"


def _attached(cursor: CursorWrapper, names: Iterable[str]) -> set[str]:
    cursor.execute("""
        SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = %s::regclass AND NOT i.inhdetachpending AND c.relname = ANY(%s)
    """, [TABLE, list(names)])
    return {name for (name,) in cursor.fetchall()}


def _ensure_days(days: Iterable[date]) -> list[str]:
    """Create the partitions of `days` that are missing; return the names created."""
    wanted = {partition_name(day): day for day in days}
    if not wanted:
        return []
    with connection.cursor() as cursor:
        if _attached(cursor, wanted) == set(wanted):
            return []  # the usual case: one catalog read, no lock
        with transaction.atomic(), aged_rows.lock_timeout(cursor):
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                           [f"create partitions of {TABLE}"])
            missing = sorted(set(wanted) - _attached(cursor, wanted))
            for name in missing:
                day = wanted[name]
                # A table left by an earlier detach is attached again, its rows kept.
                cursor.execute(f"CREATE TABLE IF NOT EXISTS {name} "
                               f"(LIKE {TABLE} INCLUDING CONSTRAINTS)")
                cursor.execute(f"ALTER TABLE {TABLE} ATTACH PARTITION {name} FOR VALUES "
                               f"FROM ({_bound(day)}) TO ({_bound(day + timedelta(days=1))})")
    return missing


def ensure_probe_partitions(days_ahead: int = DAYS_AHEAD,
                            now: datetime | None = None) -> list[str]:
    """Today's partition (UTC) and `days_ahead` more, those missing created; returns their
    names. Idempotent, and safe beside itself and beside probe inserts."""
    today = (now or timezone.now()).astimezone(UTC).date()
    return _ensure_days(today + timedelta(days=n) for n in range(days_ahead + 1))


def ensure_probe_days(times: Iterable[datetime]) -> list[str]:
    """The partitions that probes taken at `times` go to, those missing created (before the
    probes' own transaction: the attach then waits on nothing that transaction holds)."""
    return _ensure_days({t.astimezone(UTC).date() for t in times})
