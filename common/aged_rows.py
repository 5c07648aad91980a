"""Rows past their retention: deleted a batch at a time (`delete_older_than`: each batch its
own transaction, row locks only, so writers go on beside it, until none is left or the pass's
time is spent), or, for a table partitioned by time, dropped a whole partition at a time
(`drop_partitions_before`: no row is deleted, and inserts are never held up)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

__all__ = ["delete_older_than", "drop_partitions_before", "lock_timeout", "partition_prefix"]

#: How long partition maintenance waits for a lock before it gives up (the next pass tries
#: again): while a DDL statement waits for its lock, every statement queued behind it waits too.
LOCK_TIMEOUT = "5s"


def delete_older_than(table: str, column: str, before: datetime, *, batch: int,
                      budget_s: float, where: str = "TRUE") -> int:
    """Delete the rows of `table` whose `column` is before `before` (and that meet `where`),
    `batch` per transaction, across every team (by age alone: nothing of the rows leaves the
    database); returns how many were deleted. `table`, `column` and `where` are the caller's
    constants, never input."""
    sql = (f"DELETE FROM {table} WHERE id IN "  # noqa: S608 - constant identifiers only
           f"(SELECT id FROM {table} WHERE {column} < %s AND ({where}) LIMIT %s)")
    deleted, started = 0, time.monotonic()
    while time.monotonic() - started < budget_s:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [before, batch])
            count = cursor.rowcount
        deleted += count
        if count < batch:
            break
    return deleted


def partition_prefix(table: str) -> str:
    """What the name of each partition of `table` starts with (then its range, e.g. a day):
    how a partition detached by an interrupted pass is found again and dropped."""
    return f"{table}_p"


@contextmanager
def lock_timeout(cursor: CursorWrapper, value: str = LOCK_TIMEOUT) -> Iterator[None]:
    """`lock_timeout` for the statements inside, which run in a transaction.atomic() of their
    own: then back to what it was, even inside a caller's transaction (where SET LOCAL would
    outlive the block); a failure rolls the block back, and the setting with it."""
    if not connection.in_atomic_block:
        raise RuntimeError("lock_timeout() belongs inside transaction.atomic()")
    cursor.execute("SELECT current_setting('lock_timeout')")
    (before,) = cursor.fetchone()
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [value])
    yield
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [before])


def _aged_partitions(cursor: CursorWrapper, table: str,
                     before: datetime) -> list[tuple[str, bool]]:
    """The partitions of `table` whose range ends at or before `before`, oldest first, with
    whether a concurrent detach of it was left half done. The upper bound is read from the
    catalog's own bound (a DEFAULT or MAXVALUE partition has none and is never aged)."""
    cursor.execute(r"""
        SELECT name, pending FROM (
            SELECT c.relname AS name, i.inhdetachpending AS pending,
                   (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                 'TO \(''([^'']+)''\)'))[1]::timestamptz AS upper
            FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
            WHERE i.inhparent = %s::regclass
        ) AS parts
        WHERE upper <= %s
        ORDER BY upper
    """, [table, before])
    return [(name, pending) for name, pending in cursor.fetchall()]


def _detached_leftovers(cursor: CursorWrapper, table: str) -> list[str]:
    """Tables named as `table`'s partitions (the prefix, then digits) that are attached to
    nothing: a pass detached them and stopped before its DROP."""
    cursor.execute("""
        SELECT c.relname FROM pg_class AS c
        WHERE c.relname ~ ('^' || %s || '[0-9]+$') AND c.relkind = 'r' AND NOT c.relispartition
          AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = %s::regclass)
    """, [partition_prefix(table), table])
    return [name for (name,) in cursor.fetchall()]


def drop_partitions_before(table: str, before: datetime, *,
                           first: Callable[[str], list[str]] | None = None) -> list[str]:
    """Drop the partitions of `table` (partitioned by range of a time) whose whole range is
    before `before`; returns their names. Rows of a partition that straddles `before` stay
    until their whole partition is old. `table` is the caller's constant, never input.

    Outside a transaction (the beat's pass), each partition is detached CONCURRENTLY, then
    dropped: inserts and reads never wait on it, though an ATTACH does (PostgreSQL's rules
    for CONCURRENTLY: not inside a transaction block, nor beside a DEFAULT partition). A
    detach cut off half way is finished (FINALIZE) and dropped by the next pass, as is a
    table detached but not yet dropped. Two passes at once: the second drops nothing (a
    session advisory lock). Inside a caller's transaction, a concurrent detach is impossible:
    each partition is dropped at once, which holds the table (ACCESS EXCLUSIVE) until that
    transaction ends, and waits at most LOCK_TIMEOUT for it.

    `first(name)` gives SQL run before a partition is detached or dropped: what other tables
    hold of its rows, let go (nothing new points into a partition past its retention)."""
    first = first or (lambda _name: [])
    with connection.cursor() as cursor:
        if connection.in_atomic_block:
            aged = [name for name, _pending in _aged_partitions(cursor, table, before)]
            with transaction.atomic(), lock_timeout(cursor):
                if aged:
                    # A table with checks still pending cannot be dropped: run them now, as
                    # the commit would, then defer again (as Django's foreign keys are).
                    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                    cursor.execute("SET CONSTRAINTS ALL DEFERRED")
                for name in aged:
                    for sql in first(name):
                        cursor.execute(sql)
                    cursor.execute(f"DROP TABLE IF EXISTS {name}")
            return aged
        cursor.execute("SELECT pg_try_advisory_lock(hashtext(%s))",
                       [f"drop partitions of {table}"])
        if not cursor.fetchone()[0]:
            return []  # another pass is at it
        try:
            dropped = []
            for name, pending in _aged_partitions(cursor, table, before):
                how = "FINALIZE" if pending else "CONCURRENTLY"
                for sql in first(name):
                    cursor.execute(sql)
                # each its own statement and transaction: CONCURRENTLY refuses a transaction
                cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {name} {how}")
                cursor.execute(f"DROP TABLE {name}")
                dropped.append(name)
            for name in _detached_leftovers(cursor, table):
                for sql in first(name):
                    cursor.execute(sql)
                cursor.execute(f"DROP TABLE IF EXISTS {name}")
                dropped.append(name)
            return dropped
        finally:
            cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))",
                           [f"drop partitions of {table}"])
