"""Report retention: a scan's full report.json is kept REPORT_RETENTION_DAYS after it finished,
then replaced by its summary.

The summary is the same JSON, in the same shape, less what only the full report needs: each
level's per-request samples (`request_timelines`, `ttft_samples_ms`, in `levels`,
`search_levels` and `rate_levels`) and the GPU samples (`measurements.gpu_samples`). Those are
about nine tenths of a report. Everything the site reads of a stored report stays, so every
query on report.json keeps working unchanged: the grade and score (caps, pillars), every
check with its value and status, each level's figures (percentiles, rates, counts), the plan,
the target, the preflight and the capacity search. Charts, compare, the endpoint's state,
badges, status pages and the history API read a pruned scan as they read any other.

What goes: the TTFT histograms and request timelines of the report, and report.json and
report.html themselves (410 Gone). A pushed scan's uploaded body (PushedReportBody) goes too;
its digest stays on the scan, so a retried upload still finds it.

The pass (`prune`) runs hourly from the beat and by hand (`manage.py prune_reports`): batches
of `batch` rows, each one short transaction of one UPDATE whose rows come from a subquery
with FOR UPDATE SKIP LOCKED, so it takes row locks only, never waits on a row another
transaction holds, and never blocks inserts. The summary is computed in SQL (the reports are
never loaded into Python); `summary_of` is the same cut in Python, and a test holds them equal.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from common import aged_rows
from scans.models import scan_partitions

__all__ = ["LEVEL_LISTS", "LEVEL_SAMPLES", "SINGLE_LEVELS", "PruneResult", "prune",
           "prune_scans", "pruned_sentence", "summary_of", "summary_tables"]

log = logging.getLogger(__name__)

#: The report's lists of levels, its single levels (a replayed trace's), and the per-request
#: keys each level loses.
LEVEL_LISTS = ("levels", "search_levels", "rate_levels")
SINGLE_LEVELS = ("trace_replay",)
LEVEL_SAMPLES = ("request_timelines", "ttft_samples_ms")
#: Per-sample lists outside the levels: (parent key, key).
OTHER_SAMPLES = (("measurements", "gpu_samples"),)

DEFAULT_BATCH = 500
DEFAULT_BUDGET_S = 120.0


def summary_of(report: Mapping[str, Any]) -> dict[str, Any]:
    """The summary a pruned scan keeps of `report` (the same cut as the SQL in `prune`)."""
    summary = dict(report)
    for name in LEVEL_LISTS:
        levels = summary.get(name)
        if isinstance(levels, list):
            summary[name] = [
                {k: v for k, v in level.items() if k not in LEVEL_SAMPLES}
                if isinstance(level, Mapping) else level
                for level in levels
            ]
    for name in SINGLE_LEVELS:
        level = summary.get(name)
        if isinstance(level, Mapping):
            summary[name] = {k: v for k, v in level.items() if k not in LEVEL_SAMPLES}
    for parent, key in OTHER_SAMPLES:
        part = summary.get(parent)
        if isinstance(part, Mapping) and key in part:
            summary[parent] = {k: v for k, v in part.items() if k != key}
    return summary


def _summary_sql(column: str) -> str:
    """SQL for summary_of(column): the top-level object rebuilt once, each level list without
    its samples (in order), the other samples removed. Keys a report lacks stay absent."""
    strip = "".join(f" - '{key}'" for key in LEVEL_SAMPLES)
    lists = ", ".join(f"'{name}'" for name in LEVEL_LISTS)
    others = "".join(f" WHEN k = '{parent}' AND jsonb_typeof(v) = 'object' THEN v - '{key}'"
                     for parent, key in OTHER_SAMPLES)
    others += "".join(f" WHEN k = '{name}' AND jsonb_typeof(v) = 'object' THEN v{strip}"
                      for name in SINGLE_LEVELS)
    # only this module's constant names are formatted in
    return (
        f"CASE WHEN jsonb_typeof({column}) = 'object' THEN COALESCE((SELECT jsonb_object_agg("  # noqa: S608
        f"k, CASE WHEN k IN ({lists}) AND jsonb_typeof(v) = 'array' THEN COALESCE((SELECT "
        f"jsonb_agg(CASE WHEN jsonb_typeof(lv) = 'object' THEN lv{strip} ELSE lv END ORDER BY "
        f"ord) FROM jsonb_array_elements(v) WITH ORDINALITY AS t(lv, ord)), '[]'::jsonb)"
        f"{others} ELSE v END) FROM jsonb_each({column}) AS e(k, v)), '{{}}'::jsonb) "
        f"ELSE {column} END")


def cutoff(now: datetime | None = None, days: int | None = None) -> datetime:
    """Scans that finished before this keep only their summary."""
    return (now or timezone.now()) - timedelta(days=days or settings.REPORT_RETENTION_DAYS)


def pruned_sentence(days: int | None = None) -> str:
    """What a pruned scan's page and downloads say."""
    days = days or settings.REPORT_RETENTION_DAYS
    return (f"The full report of this scan was removed after {days} days, as this "
            f"site keeps full reports for {days} days. Its summary remains: the grade, the "
            f"points, every check's value and each level's figures; the per-request samples "
            f"(timelines, TTFT histograms) are gone.")


def summary_tables(report: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """What the scan page shows of a pruned scan: each level's figures and every check."""
    from scans.grader import CHECK_LABELS

    def stat(level: Mapping[str, Any], name: str, key: str) -> Any:
        part = level.get(name)
        return part.get(key) if isinstance(part, Mapping) else None

    levels = [
        {"concurrency": lv.get("concurrency"), "requests": lv.get("requests"),
         "succeeded": lv.get("succeeded"), "ttft_p50": stat(lv, "ttft_ms", "p50"),
         "ttft_p95": stat(lv, "ttft_ms", "p95"), "ttft_p99": stat(lv, "ttft_ms", "p99"),
         "rate": stat(lv, "generation_rate", "median"),
         "rate_unit": stat(lv, "generation_rate", "unit") or "tokens/s"}
        for lv in report.get("levels") or [] if isinstance(lv, Mapping)
    ]
    checks = [
        {"id": c.get("id"), "label": CHECK_LABELS.get(str(c.get("id")), c.get("id")),
         "value": c.get("value"), "unit": c.get("unit") or "", "status": c.get("status")}
        for c in report.get("checks") or [] if isinstance(c, Mapping)
    ]
    return {"levels": levels, "checks": checks}


@dataclass
class PruneResult:
    scans: int = 0
    bodies: int = 0
    batches: int = 0
    batch_seconds: list[float] = field(default_factory=list)
    seconds: float = 0.0
    stopped_by_budget: bool = False

    @property
    def median_batch_s(self) -> float | None:
        return statistics.median(self.batch_seconds) if self.batch_seconds else None

    def __str__(self) -> str:
        median = self.median_batch_s
        return (f"pruned {self.scans} scan reports to summaries and deleted {self.bodies} "
                f"uploaded bodies in {self.batches} batches, {self.seconds:.2f} s"
                + (f" (median batch {median * 1000:.0f} ms)" if median is not None else "")
                + ("; stopped at the time budget, more remain" if self.stopped_by_budget else ""))


def _prune_batch(before: datetime, batch: int, now: datetime) -> tuple[int, int]:
    """One transaction: up to `batch` scans finished before `before` get their summary."""
    # System-wide (every team's scans, like the reaper): raw SQL on the scans table; the
    # rows are picked by age alone and nothing of them leaves the database.
    sql = f"""
        WITH batch AS (
            SELECT id FROM scans_scan
            WHERE report_pruned_at IS NULL AND report IS NOT NULL AND finished_at < %s
            ORDER BY finished_at
            LIMIT %s
            FOR UPDATE SKIP LOCKED
        )
        UPDATE scans_scan AS s SET report = {_summary_sql('s.report')}, report_pruned_at = %s
        FROM batch WHERE s.id = batch.id
        RETURNING s.id
    """  # noqa: S608 - only _summary_sql's constant SQL is formatted in; values are parameters
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, [before, batch, now])
        ids = [row[0] for row in cursor.fetchall()]
        bodies = 0
        if ids:
            cursor.execute("DELETE FROM scans_pushedreportbody WHERE scan_id = ANY(%s)", [ids])
            bodies = cursor.rowcount
    return len(ids), bodies


def prune(*, batch: int = DEFAULT_BATCH, budget_s: float = DEFAULT_BUDGET_S,
          now: datetime | None = None, days: int | None = None) -> PruneResult:
    """Replace the full reports of scans that finished more than `days` (REPORT_RETENTION_DAYS)
    ago by their summaries, `batch` rows per transaction, until none is left or `budget_s`
    has passed (the next pass goes on). Safe to run twice, and beside itself: a second pass
    skips the rows the first holds."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch!r}")
    now = now or timezone.now()
    before = cutoff(now, days)
    result = PruneResult()
    started = time.monotonic()
    while True:
        batch_started = time.monotonic()
        scans, bodies = _prune_batch(before, batch, now)
        if scans:
            result.batches += 1
            result.batch_seconds.append(time.monotonic() - batch_started)
            result.scans += scans
            result.bodies += bodies
        if scans < batch:
            break
        if time.monotonic() - started >= budget_s:
            result.stopped_by_budget = True
            break
    result.seconds = time.monotonic() - started
    if result.scans:
        log.info("retention: %s", result)
    return result


def prune_scans(*, now: datetime | None = None) -> list[str]:
    """Drop the months of scans and their check results (scans/models/scan_partitions.py: a
    partition per UTC month of each) that ended more than SCAN_RETENTION_DAYS ago; their
    rollups stay, and an alert that named one of those scans keeps its message without it.
    Whole months go: a scan is kept between SCAN_RETENTION_DAYS and a month more. Returns the
    names of the scans' partitions dropped."""
    before = (now or timezone.now()) - timedelta(days=settings.SCAN_RETENTION_DAYS)
    checks, scans = scan_partitions.TABLES[1], scan_partitions.TABLES[0]
    aged_rows.drop_partitions_before(checks, before)
    return aged_rows.drop_partitions_before(scans, before,
                                            first=scan_partitions.rows_pointing_into)


def prune_probes(*, now: datetime | None = None) -> int:
    """Drop the days of liveness probes (scans/liveness/partitions.py: a partition per UTC
    day) that ended more than PROBE_RETENTION_DAYS ago; their hours (ProbeHour) stay. Rows
    are kept whole days: a probe goes between PROBE_RETENTION_DAYS and one day more after it
    ran, when its day's partition does. Returns how many partitions were dropped."""
    before = (now or timezone.now()) - timedelta(days=settings.PROBE_RETENTION_DAYS)
    return len(aged_rows.drop_partitions_before("scans_proberesult", before))
