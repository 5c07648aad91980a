"""Tables PARTITIONED BY RANGE of a time, one partition per period (a UTC day, a UTC month),
each named after its table and the period's start (`aged_rows.partition_prefix`, then digits),
so that retention drops whole periods (`aged_rows.drop_partitions_before`).

There is no DEFAULT partition (PostgreSQL refuses DETACH ... CONCURRENTLY beside one, and a
period's partition could not be created later without moving its rows out of it), so a row of
a period without a partition is refused: the beat's hourly pass creates the periods ahead, and
a writer that may run ahead of it makes sure of its own period first (`ensure`).

A partition is created as a table of its own and then attached: ATTACH PARTITION holds the
parent with SHARE UPDATE EXCLUSIVE, which inserts and reads never wait on (CREATE TABLE ...
PARTITION OF would hold it ACCESS EXCLUSIVE). Creators take turns (a transaction advisory
lock) and each looks again under it, so two at once create each period once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, timedelta

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from common import aged_rows

__all__ = ["attached", "ensure", "month_start", "next_month", "this_month"]


def attached(cursor: CursorWrapper, table: str, names: Iterable[str]) -> set[str]:
    """Which of `names` are partitions of `table` now (a half-detached one is not)."""
    cursor.execute("""
        SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = %s::regclass AND NOT i.inhdetachpending AND c.relname = ANY(%s)
    """, [table, list(names)])
    return {name for (name,) in cursor.fetchall()}


def ensure(table: str, bounds: Mapping[str, tuple[str, str]]) -> list[str]:
    """Create the partitions of `table` named in `bounds` that are missing, each FROM its first
    literal TO its second (SQL literals the caller made from dates, never input); return the
    names created. One catalog read when none is missing."""
    if not bounds:
        return []
    with connection.cursor() as cursor:
        if attached(cursor, table, bounds) == set(bounds):
            return []  # the usual case: no lock
        with transaction.atomic(), aged_rows.lock_timeout(cursor):
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                           [f"create partitions of {table}"])
            missing = sorted(set(bounds) - attached(cursor, table, bounds))
            for name in missing:
                lower, upper = bounds[name]
                # A table left by an earlier detach is attached again, its rows kept.
                cursor.execute(f"CREATE TABLE IF NOT EXISTS {name} "
                               f"(LIKE {table} INCLUDING CONSTRAINTS INCLUDING COMPRESSION)")
                cursor.execute(f"ALTER TABLE {table} ATTACH PARTITION {name} "
                               f"FOR VALUES FROM ({lower}) TO ({upper})")
    return missing


def month_start(moment: datetime) -> date:
    """The first day of `moment`'s UTC month: the key of a table partitioned by month."""
    return moment.astimezone(UTC).date().replace(day=1)


def next_month(month: date) -> date:
    return (month.replace(day=28) + timedelta(days=4)).replace(day=1)


def this_month() -> date:
    """The UTC month of now (a model field's default)."""
    return month_start(timezone.now())
