"""Probe results are partitioned by UTC day: scans_proberesult is a PostgreSQL table
PARTITIONED BY RANGE (at), one partition a day, named scans_proberesult_pYYYYMMDD
(common/time_partitions.py). Retention drops whole days (scans/history/retention.py) instead
of deleting rows. The hourly retention pass creates today's partition and DAYS_AHEAD more
(`ensure_probe_partitions`), as the migration that partitioned the table did; a batch of
probes makes sure of its own days before it is stored (`ensure_probe_days`, record.py), so a
site whose beat stood still for days still keeps every probe.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta

from django.utils import timezone

from common import aged_rows, time_partitions

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


def _ensure_days(days: Iterable[date]) -> list[str]:
    """Create the partitions of `days` that are missing; return the names created."""
    return time_partitions.ensure(TABLE, {
        partition_name(day): (_bound(day), _bound(day + timedelta(days=1))) for day in days})


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
