"""Scans and their check results are partitioned by UTC month: scans_scan and scans_checkresult
are PostgreSQL tables PARTITIONED BY RANGE (partition_month), one partition a month each,
named scans_scan_pYYYYMM and scans_checkresult_pYYYYMM (common/time_partitions.py). A scan and
its checks share the month (the scan's slot's, else its queue time's; scans/models/scans.py),
so retention drops the two partitions of a month together (retention.prune_scans).

The hourly retention pass creates this month's partitions and MONTHS_AHEAD more
(`ensure_scan_partitions`), as the migration that partitioned the tables did; a scan's first
save makes sure of its month (`ensure_scan_month`, from Scan.save), so a site whose beat stood
still for months, or a slot from long ago, is still stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime, timedelta

from django.db import connection
from django.utils import timezone

from common import aged_rows, time_partitions

__all__ = ["MONTHS_AHEAD", "TABLES", "analyze_if_stale", "ensure_scan_month",
           "ensure_scan_partitions", "partition_name", "rows_pointing_into", "stale_parents"]

#: A scan's table first: a month's scans are created before their checks.
TABLES = ("scans_scan", "scans_checkresult")
#: Months after this one created ahead: DDL stays off the scans' path through a stopped beat.
MONTHS_AHEAD = 2
#: How old a partitioned table's own statistics may get: autovacuum analyzes each partition as
#: it changes but never the parent, whose statistics plan every query across months.
STATISTICS_MAX_AGE = timedelta(days=1)
#: Rows below which the parents are left to the planner's guesses (stale_parents).
STATISTICS_MIN_ROWS = 100_000

def partition_name(table: str, month: date) -> str:
    return f"{aged_rows.partition_prefix(table)}{month:%Y%m}"


def _ensure_months(months: Iterable[date]) -> list[str]:
    months = set(months)
    created = []
    for table in TABLES:
        created += time_partitions.ensure(table, {
            partition_name(table, month):
                (f"'{month.isoformat()}'", f"'{time_partitions.next_month(month).isoformat()}'")
            for month in months})
    return created


def ensure_scan_partitions(months_ahead: int = MONTHS_AHEAD,
                           now: datetime | None = None) -> list[str]:
    """This month's partitions (UTC) and `months_ahead` more, those missing created; returns
    their names. Idempotent, and safe beside itself and beside scans being stored."""
    month = time_partitions.month_start(now or timezone.now())
    months = []
    for _ in range(months_ahead + 1):
        months.append(month)
        month = time_partitions.next_month(month)
    return _ensure_months(months)


def ensure_scan_month(month: date) -> None:
    """Make sure the partitions of a scan of `month` exist (one catalog read when they do).
    Inside the caller's transaction, an attach holds the table (SHARE UPDATE EXCLUSIVE, which
    inserts and reads never wait on) until it ends."""
    _ensure_months([month])


def rows_pointing_into(partition: str) -> list[str]:
    """SQL that detaches what other tables hold of the scans in `partition` (a partition of
    scans_scan about to be dropped): an alert keeps its news without its scan, a pushed body
    goes. `partition` is a catalog name, never input."""
    return [
        f"UPDATE scans_alertevent SET scan_id = NULL "  # noqa: S608 - catalog name
        f"WHERE scan_id IN (SELECT id FROM {partition})",
        f"DELETE FROM scans_pushedreportbody "  # noqa: S608 - catalog name
        f"WHERE scan_id IN (SELECT id FROM {partition})",
    ]


def stale_parents(now: datetime | None = None, min_rows: int = STATISTICS_MIN_ROWS) -> list[str]:
    """The partitioned tables whose own statistics are older than STATISTICS_MAX_AGE (or
    missing) and whose partitions hold at least `min_rows` rows (as their own statistics
    count them): on a small table the planner's guesses serve, and statistics taken of a
    nearly empty one would mislead it once rows arrive."""
    now = now or timezone.now()
    stale = []
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute("""
                SELECT (SELECT last_analyze FROM pg_stat_user_tables WHERE relid = %s::regclass),
                       (SELECT COALESCE(sum(GREATEST(c.reltuples, 0)), 0) FROM pg_inherits AS i
                        JOIN pg_class AS c ON c.oid = i.inhrelid
                        WHERE i.inhparent = %s::regclass)
            """, [table, table])
            analyzed_at, rows = cursor.fetchone()
            if rows >= min_rows and (analyzed_at is None
                                     or analyzed_at < now - STATISTICS_MAX_AGE):
                stale.append(table)
    return stale


def analyze_if_stale(now: datetime | None = None) -> list[str]:
    """ANALYZE each of `stale_parents` (a sample of each: seconds, whatever the table's size);
    returns their names."""
    stale = stale_parents(now)
    with connection.cursor() as cursor:
        for table in stale:  # one of TABLES, never input
            cursor.execute(f"ANALYZE {table}")
    return stale
