"""Hourly and daily rollups of scans and check results, which long chart ranges read.

A rollup row is one hour (or one UTC day) of one endpoint's succeeded scans, per location,
scoring version, load (scans/endpoints/profile.py PLAN_PATHS, as the `pf_*` texts history reads) and URL:
exactly the groups a chart never merges (the series of scans/history/: grades.py,
check_results.py, headlines.py). It holds sums, counts, minimums and maximums, never means,
so any run of hours adds up to the same figures as its scans:
grade points (count, sum, min, max), the worst grade, how many were capped, had no letter,
were down or provisional, and the headline figures of the first level (sum and count of
each). Check rollups do the same per check (value sum, count, min, max; counts per status).

Filling (`roll_up`, every 5 minutes from the beat): the scans that finished since the last
pass (less an overlap, for transactions that committed late) name the hours they touched, by
queued_at (checks: measured_at); each touched hour is recomputed from all its scans with one
INSERT … SELECT … GROUP BY … ON CONFLICT DO UPDATE, then each touched day from its hours.
Recomputing whole buckets makes a pass idempotent, and a scan that finished late (a long scan,
a pushed report) lands in its old hour at the next pass. Passes step through the backlog a
week of finish times per transaction, so the first pass on a big table stops at its time
budget and the next goes on; an advisory lock keeps two passes from racing.

Reading (`long_range`): a chart whose buckets are an hour or wider is laid on whole hours (a
day or wider: whole UTC days) and reads rollup rows for the buckets the last pass completed
and raw rows after that, merged per chart bucket (scans/history/downsampling.py). Grids are aligned whether or
not rollups exist, so the series are the same either way.

Keeping: daily rows are kept for good; hourly rows HOURLY_ROLLUP_RETENTION_DAYS (the pages'
longest range and a margin), then deleted (`prune_hours`, from the hourly retention pass). A
range that starts before then is laid on whole UTC days whatever its width, so it reads daily
rows where hourly ones are gone, and draws the same series with scans or rollups.

Rollup rows are written system-wide (every team's rows, like the reaper) and read through the
scoped manager like any team-owned row.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from common import aged_rows
from scans.endpoints import profile as load_profile
from scans.grader import CHECKS, GRADES, INSUFFICIENT_EVIDENCE
from scans.models import CheckRollup, RollupPeriod, RollupWatermark, ScanRollup

__all__ = ["DAY_S", "HOUR_S", "OVERLAP", "LongRange", "RollUpResult", "hours_kept_since",
           "long_range", "prune_hours", "roll_up"]

HOUR_S, DAY_S = 3600, 86400
#: Scans that finished this long before the watermark are read again by the next pass: a
#: scan's row is written with its finish time a moment before its transaction commits.
OVERLAP = timedelta(minutes=15)
#: The most finish time one transaction reads (the first pass on a big table steps through).
STEP = timedelta(days=7)
WATERMARK = "scans"
_LOCK_KEY = 0x746F6B726F6C  # pg advisory lock: one rollup pass at a time
DEFAULT_BUDGET_S = 120.0

PLAN_NAMES = [f"pf_{name}" for name in load_profile.PLAN_PATHS]
#: The headline figures of the first level, where report.json holds them (read for a scan an
#: older worker stored without their columns). ScanRollup has a <key>_sum and <key>_n column for
#: each.
FIGURE_PATHS = {
    "ttft_p50": ("levels", "0", "ttft_ms", "p50"),
    "ttft_p95": ("levels", "0", "ttft_ms", "p95"),
    "tokens_per_s": ("levels", "0", "generation_rate", "median"),
    # the agent-shaped load's, of the top level (the most loaded)
    "tool_calls_valid": ("levels", "-1", "tool_calls", "valid_share"),
    "json_valid": ("levels", "-1", "structured_output", "valid_share"),
}
FIGURES = tuple(FIGURE_PATHS)
_LETTERS = "ARRAY[" + ", ".join(f"'{g}'" for g in GRADES) + "]::varchar[]"


def _figure_paths() -> dict[str, str]:
    return {key: "{" + ",".join(path) + "}" for key, path in FIGURE_PATHS.items()}


def _plan_sql(report: str) -> str:
    """The load as jsonb {pf_name: text}, as scans.endpoints.profile.plan_annotations reads it."""
    pairs = ", ".join(f"'pf_{name}', {report} #>> '{{plan,{','.join(path)}}}'"
                      for name, path in load_profile.PLAN_PATHS.items())
    return f"jsonb_build_object({pairs})"


def _url_sql(report: str) -> str:
    return f"COALESCE({report} #>> '{{target,base_url}}', '')"


# A scan's load and URL: its columns (every stored report has a load_plan since they exist),
# else its report.
_LOAD = f"(CASE WHEN s.load_plan IS NOT NULL THEN s.load_plan ELSE {_plan_sql('s.report')} END)"
_URL = f"(CASE WHEN s.load_plan IS NOT NULL THEN s.target_url ELSE {_url_sql('s.report')} END)"


def _trunc(unit: str, column: str) -> str:
    return f"(date_trunc('{unit}', {column} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')"


_SCAN_SUMS = ("scans", "points_sum", "points_n", "capped", "no_letter", "down", "provisional",
              *(f"{key}_{part}" for key in FIGURES for part in ("sum", "n")))
_SCAN_COLUMNS = ("first_at", "last_at", *_SCAN_SUMS, "points_min", "points_max", "worst_grade")
_SCAN_KEY = ("endpoint_id", "period", "bucket_start", "location", "scoring_version", "plan",
             "target_url")
_CHECK_SUMS = ("scans", "value_sum", "value_n", "passed", "warned", "failed", "unmeasured",
               "insufficient")
_CHECK_COLUMNS = ("first_at", "last_at", *_CHECK_SUMS, "value_min", "value_max")
_CHECK_KEY = ("endpoint_id", "check_id", "period", "bucket_start", "location", "scoring_version",
              "plan", "target_url")


# Each join below is a LATERAL subquery with OFFSET 0, which PostgreSQL does not flatten: one
# index scan per touched bucket (check_history, scan_endpoint_time, the rollups' unique index)
# whatever the statistics say. Flattened, the planner merge-joined a week's touched hours with
# every check row of the endpoint (176 million row pairs, 45 s a step, in the benchmark).


def _upsert(table: str, key: tuple[str, ...], columns: tuple[str, ...]) -> tuple[str, str]:
    """The INSERT head and the ON CONFLICT tail around a SELECT of `key` then `columns`."""
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns)
    return (f"INSERT INTO {table} ({', '.join((*key, *columns))})",
            f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}")


#: A scan's load, URL and headline figures are columns written as it was stored
#: (scans/running/worker.py, report_columns); a scan an older worker stored without them
#: (report_columns_version below) is read from its report instead, so its hour rolls up the same.
#: A CASE reads the report only for those rows: each reference to s.report detoasts the whole
#: report.
#: The same as scans.history.headlines.HEADLINE_FIGURES (a test holds them equal; history
#: imports this module, so not the other way round).
FIGURE_COLUMNS = {"ttft_p50": "ttft_p50_ms", "ttft_p95": "ttft_p95_ms",
                  "tokens_per_s": "tokens_per_s", "tool_calls_valid": "tool_calls_valid_share",
                  "json_valid": "json_valid_share"}


def _column_or_report(column: str, from_report: str, version: int) -> str:
    return (f"(CASE WHEN s.report_columns_version >= {version} THEN s.{column} "
            f"ELSE {from_report} END)")


def _scan_hours_sql() -> str:
    figures = {key: _column_or_report(FIGURE_COLUMNS[key],
                                      f"(s.report #>> '{path}')::double precision", 2)
               for key, path in _figure_paths().items()}
    values = {f"{key}_sum": f"SUM({figure})" for key, figure in figures.items()}
    values |= {f"{key}_n": f"COUNT({figure})" for key, figure in figures.items()}
    values |= {
        "first_at": "MIN(s.queued_at)", "last_at": "MAX(s.queued_at)", "scans": "COUNT(*)",
        "points_sum": "SUM(s.points)", "points_n": "COUNT(s.points)",
        "points_min": "MIN(s.points)", "points_max": "MAX(s.points)",
        "worst_grade": "MAX(s.grade)",
        # scans.history.grades._capped_q: a worse letter than the band the points earned
        "capped": f"COUNT(*) FILTER (WHERE array_position({_LETTERS}, s.grade) > "
                  f"array_position({_LETTERS}, s.uncapped_grade))",
        "no_letter": f"COUNT(*) FILTER (WHERE NOT (s.grade = ANY({_LETTERS})))",
        "down": "COUNT(*) FILTER (WHERE s.down)",
        "provisional": "COUNT(*) FILTER (WHERE s.provisional)",
    }
    head, tail = _upsert("scans_scanrollup", _SCAN_KEY, _SCAN_COLUMNS)
    return f"""
        WITH touched AS (
            SELECT DISTINCT endpoint_id, location, {_trunc('hour', 'queued_at')} AS h
            FROM scans_scan
            WHERE status = 'succeeded' AND finished_at > %(after)s AND finished_at <= %(until)s
        )
        {head}
        SELECT s.endpoint_id, 'hour', t.h, s.location, s.scoring_version,
               {_LOAD}, {_URL},
               {', '.join(values[c] for c in _SCAN_COLUMNS)}
        FROM touched t
        CROSS JOIN LATERAL (
            SELECT * FROM scans_scan s0
            WHERE s0.endpoint_id = t.endpoint_id AND s0.location = t.location
                  AND s0.queued_at >= t.h AND s0.queued_at < t.h + interval '1 hour'
                  AND s0.status = 'succeeded' OFFSET 0) AS s
        GROUP BY 1, 2, 3, 4, 5, 6, 7
        {tail}
    """  # noqa: S608 - only this module's constant SQL is formatted in; values are parameters


def _check_hours_sql() -> str:
    values = {
        "first_at": "MIN(c.measured_at)", "last_at": "MAX(c.measured_at)", "scans": "COUNT(*)",
        "value_sum": "SUM(c.value)", "value_n": "COUNT(c.value)",
        "value_min": "MIN(c.value)", "value_max": "MAX(c.value)",
        "passed": "COUNT(*) FILTER (WHERE c.status = 'pass')",
        "warned": "COUNT(*) FILTER (WHERE c.status = 'warn')",
        "failed": "COUNT(*) FILTER (WHERE c.status = 'fail')",
        "unmeasured": "COUNT(*) FILTER (WHERE c.status NOT IN ('pass', 'warn', 'fail'))",
        "insufficient": f"COUNT(*) FILTER (WHERE c.status = '{INSUFFICIENT_EVIDENCE}')",
    }
    head, tail = _upsert("scans_checkrollup", _CHECK_KEY, _CHECK_COLUMNS)
    return f"""
        WITH touched AS (
            SELECT DISTINCT s.endpoint_id, s.location, {_trunc('hour', 'c.measured_at')} AS h
            FROM scans_scan s
            CROSS JOIN LATERAL (SELECT measured_at FROM scans_checkresult c0
                                WHERE c0.scan_id = s.id OFFSET 0) AS c
            WHERE s.status = 'succeeded' AND s.finished_at > %(after)s
                  AND s.finished_at <= %(until)s
        ),
        results AS MATERIALIZED (
            SELECT c.*, t.h, t.location FROM touched t
            CROSS JOIN LATERAL (
                SELECT * FROM scans_checkresult c0
                WHERE c0.endpoint_id = t.endpoint_id AND c0.check_id = ANY(%(checks)s)
                      AND c0.measured_at >= t.h
                      AND c0.measured_at < t.h + interval '1 hour' OFFSET 0) AS c
        ),
        loads AS MATERIALIZED (  -- each scan's load and URL
            SELECT s.id, s.location, {_LOAD} AS plan, {_URL} AS url
            FROM scans_scan s
            WHERE s.id IN (SELECT scan_id FROM results)
        )
        {head}
        SELECT c.endpoint_id, c.check_id, 'hour', c.h, l.location, c.scoring_version,
               l.plan, l.url, {', '.join(values[col] for col in _CHECK_COLUMNS)}
        FROM results c JOIN loads l ON l.id = c.scan_id AND l.location = c.location
        GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
        {tail}
    """  # noqa: S608 - only this module's constant SQL is formatted in; values are parameters


def _days_sql(table: str, key: tuple[str, ...], columns: tuple[str, ...], sums: tuple[str, ...],
              touched: str) -> str:
    values = {c: f"SUM(r.{c})" for c in sums}
    values |= {"first_at": "MIN(r.first_at)", "last_at": "MAX(r.last_at)"}
    values |= {c: f"MIN(r.{c})" for c in columns if c.endswith("_min")}
    values |= {c: f"MAX(r.{c})" for c in columns if c.endswith("_max") or c == "worst_grade"}
    group = [f"r.{k}" if k not in ("period", "bucket_start") else
             ("'day'" if k == "period" else "t.d") for k in key]
    head, tail = _upsert(table, key, columns)
    check_join = " AND r0.check_id = t.check_id" if "check_id" in key else ""
    return f"""
        WITH touched AS ({touched})
        {head}
        SELECT {', '.join(group)}, {', '.join(values[c] for c in columns)}
        FROM touched t
        CROSS JOIN LATERAL (
            SELECT * FROM {table} r0
            WHERE r0.endpoint_id = t.endpoint_id AND r0.location = t.location{check_join}
                  AND r0.period = 'hour' AND r0.bucket_start >= t.d
                  AND r0.bucket_start < t.d + interval '1 day' OFFSET 0) AS r
        GROUP BY {', '.join(str(i + 1) for i in range(len(key)))}
        {tail}
    """  # noqa: S608 - only this module's constant SQL is formatted in; values are parameters


def _scan_days_sql() -> str:
    touched = (f"SELECT DISTINCT endpoint_id, location, {_trunc('day', 'queued_at')} AS d "  # noqa: S608
               f"FROM scans_scan WHERE status = 'succeeded' AND finished_at > %(after)s "
               f"AND finished_at <= %(until)s")
    return _days_sql("scans_scanrollup", _SCAN_KEY, _SCAN_COLUMNS, _SCAN_SUMS, touched)


def _check_days_sql() -> str:
    touched = (f"SELECT DISTINCT s.endpoint_id, c.check_id, s.location, "  # noqa: S608
               f"{_trunc('day', 'c.measured_at')} AS d FROM scans_scan s CROSS JOIN LATERAL "
               f"(SELECT check_id, measured_at FROM scans_checkresult c0 WHERE c0.scan_id = s.id "
               f"OFFSET 0)"
               f" AS c WHERE s.status = 'succeeded' AND s.finished_at > %(after)s "
               f"AND s.finished_at <= %(until)s")
    return _days_sql("scans_checkrollup", _CHECK_KEY, _CHECK_COLUMNS, _CHECK_SUMS, touched)


@dataclass
class RollUpResult:
    steps: int = 0
    hours: int = 0  # scan rollup rows written (hours), check rollup rows in check_hours
    check_hours: int = 0
    until: datetime | None = None
    seconds: float = 0.0
    busy: bool = False  # another pass held the lock
    stopped_by_budget: bool = False

    def __str__(self) -> str:
        if self.busy:
            return "another rollup pass is running; nothing done"
        until = f"{self.until:%Y-%m-%d %H:%M:%S} UTC" if self.until else "no scan yet"
        return (f"rolled up {self.hours} scan hours and {self.check_hours} check hours in "
                f"{self.steps} steps, {self.seconds:.2f} s; complete until {until}"
                + ("; stopped at the time budget, more remain" if self.stopped_by_budget else ""))


def _step(after: datetime, until: datetime) -> tuple[int, int] | None:
    params: dict[str, Any] = {"after": after, "until": until, "checks": [c.id for c in CHECKS]}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_LOCK_KEY])
        if not cursor.fetchone()[0]:
            return None
        cursor.execute(_scan_hours_sql(), params)
        hours = cursor.rowcount
        cursor.execute(_check_hours_sql(), params)
        check_hours = cursor.rowcount
        cursor.execute(_scan_days_sql(), params)
        cursor.execute(_check_days_sql(), params)
        RollupWatermark.objects.update_or_create(name=WATERMARK, defaults={"until": until})
    return hours, check_hours


def roll_up(*, now: datetime | None = None, budget_s: float = DEFAULT_BUDGET_S) -> RollUpResult:
    """Recompute the rollup buckets touched by scans that finished since the last pass."""
    now = now or timezone.now()
    result = RollUpResult()
    started = time.monotonic()
    mark = RollupWatermark.objects.filter(name=WATERMARK).first()
    if mark is not None:
        after = mark.until - OVERLAP
    else:
        # First pass: from the first finished scan (system-wide, by age only).
        with connection.cursor() as cursor:
            cursor.execute("SELECT MIN(finished_at) FROM scans_scan WHERE status = 'succeeded'")
            first = cursor.fetchone()[0]
        if first is None:
            RollupWatermark.objects.update_or_create(name=WATERMARK, defaults={"until": now})
            result.until = now
            return result
        after = first - timedelta(microseconds=1)
    while True:
        # `until` is where this step reads to, and what the watermark records; the next pass
        # starts OVERLAP before it.
        until = min(now, after + STEP)
        written = _step(after, until)
        if written is None:
            result.busy = True
            break
        result.steps += 1
        result.hours += written[0]
        result.check_hours += written[1]
        result.until = until
        after = until
        if until >= now:
            break
        if time.monotonic() - started >= budget_s:
            result.stopped_by_budget = True
            break
    result.seconds = time.monotonic() - started
    return result


# --- reading (scans/history/downsampling.py) -------------------------------------------------------


def _floor(at: datetime, step_s: int) -> datetime:
    epoch = math.floor(at.timestamp() / step_s) * step_s
    return datetime.fromtimestamp(epoch, tz=UTC)


def complete_until() -> datetime | None:
    """Buckets starting before this hold every scan (the last pass read their finish times)."""
    mark = RollupWatermark.objects.filter(name=WATERMARK).values_list("until", flat=True).first()
    return None if mark is None else _floor(mark - OVERLAP, HOUR_S)


@dataclass(frozen=True)
class LongRange:
    """A chart range whose buckets are an hour or wider: laid on whole hours (`step_s` 3,600)
    or whole UTC days (86,400) from `since`; rollup rows for [since, rolled_until) — daily
    ones before `days_until`, hourly ones after — and raw rows from `rolled_until` on."""

    since: datetime
    until: datetime
    step_s: int
    rolled_until: datetime
    days_until: datetime

    def width(self, buckets: int) -> int:
        span = (self.until - self.since).total_seconds() + 1
        raw = math.ceil(span / max(1, buckets))
        return max(self.step_s, math.ceil(raw / self.step_s) * self.step_s)

    def _rolled(self, rows):
        days = Q(period=RollupPeriod.DAY, bucket_start__lt=self.days_until)
        hours = Q(period=RollupPeriod.HOUR, bucket_start__gte=self.days_until)
        return rows.filter(days | hours, bucket_start__gte=self.since,
                           bucket_start__lt=self.rolled_until)

    def scan_rollups(self, endpoint, location: str | None = None):
        rows = ScanRollup.objects.for_team(endpoint.team_id).filter(endpoint=endpoint)
        return self._rolled(rows.filter(location=location) if location else rows)

    def check_rollups(self, endpoint, check_id: str, location: str | None = None):
        rows = CheckRollup.objects.for_team(endpoint.team_id).filter(endpoint=endpoint,
                                                                      check_id=check_id)
        return self._rolled(rows.filter(location=location) if location else rows)


def hours_kept_since(now: datetime | None = None) -> datetime:
    """The start of the oldest UTC day whose hourly rollups are kept: whole days go, so a day
    recomputed from its hours never misses some of them."""
    kept = timedelta(days=settings.HOURLY_ROLLUP_RETENTION_DAYS)
    return _floor((now or timezone.now()) - kept, DAY_S)


def long_range(since: datetime, until: datetime, width_s: int) -> LongRange | None:
    """The grid for a range whose narrowest bucket would be `width_s`; None under an hour.
    Whole UTC days for a range that starts before the hourly rollups kept."""
    if width_s < HOUR_S:
        return None
    step = DAY_S if width_s >= DAY_S or since < hours_kept_since() else HOUR_S
    aligned = _floor(since, step)
    done = complete_until()
    rolled = aligned if done is None else max(aligned, min(done, _floor(until, HOUR_S)))
    days = _floor(rolled, DAY_S) if step == DAY_S else aligned
    return LongRange(since=aligned, until=until, step_s=step, rolled_until=rolled,
                     days_until=max(aligned, days))


def prune_hours(*, now: datetime | None = None, batch: int = 5000,
                budget_s: float = DEFAULT_BUDGET_S) -> int:
    """Delete the hourly scan and check rollups older than HOURLY_ROLLUP_RETENTION_DAYS (their
    days stay), `batch` rows a transaction, until none is left or `budget_s` has passed (the
    next pass goes on); returns how many rows went. Idempotent: a deleted hour is never
    recomputed, as no scan finishes in it any more."""
    before, started, deleted = hours_kept_since(now), time.monotonic(), 0
    for table in (CheckRollup._meta.db_table, ScanRollup._meta.db_table):
        left = budget_s - (time.monotonic() - started)
        if left <= 0:
            break
        deleted += aged_rows.delete_older_than(table, "bucket_start", before, batch=batch,
                                               budget_s=left, where="period = 'hour'")
    return deleted


def rolled_plan(row: dict[str, Any]) -> dict[str, Any]:
    """A rollup row's `plan` spread into the pf_* names history's rows carry."""
    plan = row.get("plan") or {}
    return {name: plan.get(name) for name in PLAN_NAMES}


def group_key(row: dict[str, Any], bucket: bool = True) -> tuple:
    """(bucket, scoring version, load, URL): what one chart point stands for."""
    key = (row["scoring_version"], tuple(row.get(n) for n in PLAN_NAMES),
           row.get("target_url") or "")
    return ((row["bucket"], *key) if bucket else key)


def merge(parts: Iterable[dict[str, Any]], sums: Iterable[str], mins: Iterable[str] = (),
          maxes: Iterable[str] = (), key=group_key) -> list[dict[str, Any]]:
    """Rows of the same key added up (sums), their minimums and maximums kept; first and
    last times as `at` / `last_at`. Ordered by bucket, then first time."""
    sums, mins, maxes = tuple(sums), tuple(mins), tuple(maxes)
    merged: dict[tuple, dict[str, Any]] = {}
    for row in parts:
        k = key(row)
        into = merged.get(k)
        if into is None:
            merged[k] = dict(row)
            continue
        for name in sums:
            if row[name] is not None:
                into[name] = row[name] if into[name] is None else into[name] + row[name]
        for name, pick in [*((n, min) for n in ("at", *mins)),
                           *((n, max) for n in ("last_at", *maxes))]:
            values = [v for v in (into[name], row[name]) if v is not None]
            into[name] = pick(values) if values else None
    return sorted(merged.values(), key=lambda r: (r["bucket"], r["at"]))
