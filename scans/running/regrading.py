"""Re-grading stored scans under another scoring version, from their stored numbers.

A stored scan keeps the version that graded it, so history never mixes versions silently: a
chart breaks where the version changes and compare says when two grades were computed under
different versions. When a version is published after scans were graded under an earlier one
(0.9.0 → 1.0.0), `regrade_scans` re-grades those scans under it from the check values their
report.json stored (scans.grader.regrade: never re-measured), so an endpoint's history reads
under one version. Each re-grade is marked in the report
(`measurements.regraded_from_scoring_version`) and the scan page says so.

What a re-grade writes, per scan, in one transaction per batch:
- the report's `checks` and `score`, and the mark in `measurements` (everything else in the
  report stays as stored: only these parts are read and written, never the per-request
  samples, so a batch moves kilobytes, not whole reports);
- the Scan row's score columns, from the same function the worker uses as it stores a report
  (scans.running.worker.score_fields: a down scan keeps no letter and no points);
- each check's CheckResult row (status, counted, scoring_version), which check history and the
  endpoint's state read.

What it leaves alone, and why:
- scans already under the version (so a second run changes nothing);
- scans whose full report was pruned (`SKIP_PRUNED`, past REPORT_RETENTION_DAYS): their
  report.html, the evidence a grade is read beside, is gone, so they keep the grade their full
  report was given; scans whose report holds no checks (`SKIP_NO_CHECKS`: nothing to grade
  from) or checks the version cannot grade (`SKIP_UNREADABLE`: an unknown check id);
- the rollups (scans/history/rollups.py): they hold sums per scoring version, and a rollup row
  is recomputed from its scans only when a scan finishes in its hour, so long-range charts keep
  the version each bucket was rolled up under until then;
- alerts and the endpoint's alert flags: a re-grade is not news about the endpoint (nothing was
  measured), so nothing is sent; the next measured scan's alerts judge the history as it then
  stands, as they judge any history.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import JSONField, QuerySet
from django.db.models.expressions import RawSQL

from scans.grader import SCORING_VERSIONS, regrade
from scans.history.retention import LEVEL_SAMPLES
from scans.models import Endpoint, Scan, ScanStatus
from scans.running.worker import ScoreFields, check_reason, score_fields
from scans.system_wide import ALL_SCANS

__all__ = ["DEFAULT_BATCH", "SKIP_NO_CHECKS", "SKIP_NO_REPORT", "SKIP_PRUNED", "SKIP_UNREADABLE",
           "RegradeResult", "regrade_scans"]

DEFAULT_BATCH = 500

# Why a scan was left as it was graded (the summary line's words).
SKIP_PRUNED = "pruned"
SKIP_NO_REPORT = "no report"
SKIP_NO_CHECKS = "no checks"
SKIP_UNREADABLE = "unreadable"

# The parts of a report a re-grade reads: checks and score, the levels without their
# per-request samples (the first level's prompt length; whether any request succeeded) and the
# preflight (down or not). Built in SQL, so the samples (most of a full report) never leave
# the database.
_LEVELS = " ".join(f"- '{key}'" for key in LEVEL_SAMPLES)
_R = "scans_scan.report"
_PART_SQL = (
    f"CASE WHEN jsonb_typeof({_R}) = 'object' THEN jsonb_build_object("  # noqa: S608 - constants
    f"'checks', {_R} -> 'checks', 'score', {_R} -> 'score', 'preflight', {_R} -> 'preflight', "
    f"'levels', CASE WHEN jsonb_typeof({_R} -> 'levels') = 'array' THEN (SELECT "
    f"jsonb_agg(CASE WHEN jsonb_typeof(lv) = 'object' THEN lv {_LEVELS} ELSE lv END ORDER BY "
    f"ord) FROM jsonb_array_elements({_R} -> 'levels') WITH ORDINALITY AS t(lv, ord)) "
    f"ELSE {_R} -> 'levels' END) END")

# The report written back: its checks and score replaced, the mark added to its measurements.
_REPORT_SQL = (
    "jsonb_set(jsonb_set(report, '{checks}', %s::jsonb), '{score}', %s::jsonb) || "
    "jsonb_build_object('measurements', CASE WHEN jsonb_typeof(report -> 'measurements') = "
    "'object' THEN report -> 'measurements' ELSE '{}'::jsonb END || %s::jsonb)")

# Each check's row, as the worker writes it (one per report check, measured when the scan
# finished, in its scan's month): statuses and the version updated, a check new to the
# version inserted.
_CHECK_ROWS_SQL = """
INSERT INTO scans_checkresult
    (scan_id, partition_month, endpoint_id, check_id, value, status, counted, measured_at,
     scoring_version, reason)
SELECT x.scan_id, s.partition_month, x.endpoint_id, x.check_id, x.value, x.status, x.counted,
       x.measured_at, x.scoring_version, x.reason
FROM jsonb_to_recordset(%s::jsonb) AS x(scan_id bigint, endpoint_id bigint, check_id text,
    value double precision, status text, counted boolean, measured_at timestamptz,
    scoring_version text, reason text)
JOIN scans_scan AS s ON s.id = x.scan_id
ON CONFLICT (scan_id, check_id, partition_month) DO UPDATE SET
    status = EXCLUDED.status, counted = EXCLUDED.counted,
    scoring_version = EXCLUDED.scoring_version, reason = EXCLUDED.reason
"""


@dataclass
class RegradeResult:
    """What one run did (or, with dry_run, would do)."""

    version: str
    dry_run: bool = False
    scanned: int = 0  # scans graded under another version
    same_letter: int = 0  # re-graded, and the letter held (points may have moved)
    changed_letter: int = 0  # re-graded to another letter
    skipped: dict[str, int] = field(default_factory=dict)  # reason → scans left as graded

    @property
    def regraded(self) -> int:
        return self.same_letter + self.changed_letter

    def summary(self, width: int = 80) -> str:
        """One line of at most `width` columns: the longest of its wordings that fits (a big
        run's numbers take the room of its words, the reasons going last)."""
        dry = "dry run, " if self.dry_run else ""
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()) if n)
        skipped = sum(self.skipped.values())
        counts = f"{self.scanned} scanned, {self.regraded} re-graded"
        wordings = (
            f"scoring {self.version}: {counts} ({self.same_letter} same letter, "
            f"{self.changed_letter} changed), {skipped} skipped" + (f" ({reasons})" if reasons
                                                                    else ""),
            f"{self.version}: {counts} ({self.same_letter} same, {self.changed_letter} "
            f"changed), skipped {reasons or 'none'}",
            # the version was named on the command line: the counts need the room more
            f"{counts} ({self.same_letter} same, {self.changed_letter} new), skipped "
            f"{reasons or 'none'}",
            f"{counts} ({self.same_letter} same, {self.changed_letter} new), {skipped} skipped",
            f"{counts}, {skipped} skipped",
        )
        for line in wordings:
            if len(dry + line) <= width:
                return dry + line
        return (dry + wordings[-1])[:width]


def regrade_scans(version: str, *, team_id: int | None = None, endpoint: Endpoint | None = None,
                  dry_run: bool = False, batch: int = DEFAULT_BATCH) -> RegradeResult:
    """Re-grade every succeeded scan graded under another scoring version than `version`
    (of one team, or one endpoint, when given) from its stored check values, `batch` scans per
    transaction. With `dry_run` nothing is written. ValueError for a version never published.
    Safe to run again: a re-graded scan is under `version` and is not read again."""
    if version not in SCORING_VERSIONS:
        raise ValueError(f"unknown scoring version {version!r} (known: "
                         f"{', '.join(SCORING_VERSIONS)})")
    result = RegradeResult(version, dry_run=dry_run)
    scans = _scans(version, team_id, endpoint)
    last = 0
    while True:
        with transaction.atomic():
            rows = _next_batch(scans.filter(report_pruned_at__isnull=True), last, batch,
                               lock=not dry_run)
            if not rows:
                break
            checks: list[dict[str, Any]] = []
            for row in rows:
                result.scanned += 1
                why = _skip_reason(row)
                new = None if why else _regraded(row["part"], version)
                if new is None:
                    why = why or SKIP_UNREADABLE
                    result.skipped[why] = result.skipped.get(why, 0) + 1
                    continue
                fields = score_fields(new)
                if fields.grade == row["grade"]:
                    result.same_letter += 1
                else:
                    result.changed_letter += 1
                if not dry_run:
                    _write(row, new, fields)
                    checks += _check_rows(row, new, fields.scoring_version)
            if checks:
                with connection.cursor() as cursor:
                    cursor.execute(_CHECK_ROWS_SQL, [json.dumps(checks)])
        last = rows[-1]["pk"]
    # Pruned scans are counted, never read: a pruned report is never re-graded, and there may
    # be years of them.
    pruned = scans.filter(report_pruned_at__isnull=False).count()
    if pruned:
        result.scanned += pruned
        result.skipped[SKIP_PRUNED] = result.skipped.get(SKIP_PRUNED, 0) + pruned
    return result


def _scans(version: str, team_id: int | None, endpoint: Endpoint | None) -> QuerySet[Scan]:
    """Succeeded scans graded under another version (a scan that did not succeed has no
    grade to re-grade)."""
    if endpoint is not None:
        scans = Scan.objects.for_team(endpoint.team_id).filter(endpoint=endpoint)
    elif team_id is not None:
        scans = Scan.objects.for_team(team_id)
    else:
        scans = ALL_SCANS.all()  # an admin's pass over every team, like the retention pass
    return scans.filter(status=ScanStatus.SUCCEEDED).exclude(scoring_version=version)


def _next_batch(scans: QuerySet[Scan], last: int, batch: int,
                lock: bool) -> list[dict[str, Any]]:
    """The next `batch` scans by id after `last`, with the parts of their reports a re-grade
    reads; locked for this transaction when it writes (a pruning pass skips locked rows)."""
    page = scans.filter(pk__gt=last).order_by("pk")
    if lock:
        page = page.select_for_update(of=("self",))
    rows = (page.annotate(part=RawSQL(_PART_SQL, [],  # noqa: S611 - constant SQL
                                      output_field=JSONField()))
            .values("pk", "endpoint_id", "grade", "finished_at", "part"))
    return [dict(row) for row in rows[:batch]]


def _skip_reason(row: dict) -> str:
    """Why a scan cannot be re-graded from what it stored ("" when it can; pruned scans are
    never read)."""
    part = row["part"]
    if part is None:
        return SKIP_NO_REPORT
    if not isinstance(part.get("checks"), list) or not part["checks"]:
        return SKIP_NO_CHECKS
    return ""


def _regraded(part: dict, version: str) -> dict | None:
    """The re-graded parts, or None when the stored checks cannot be graded under `version`
    (a check it does not know, a value of the wrong type, a malformed entry)."""
    try:
        return regrade({key: value for key, value in part.items() if value is not None},
                       version)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _write(row: dict, new: dict, fields: ScoreFields) -> None:
    mark = {"regraded_from_scoring_version":
            new["measurements"]["regraded_from_scoring_version"]}
    ALL_SCANS.filter(pk=row["pk"]).update(
        report=RawSQL(_REPORT_SQL,  # noqa: S611 - constant SQL, the values as parameters
                      [json.dumps(new["checks"]), json.dumps(new["score"]), json.dumps(mark)],
                      output_field=JSONField()),
        grade=fields.grade, points=fields.points, uncapped_grade=fields.uncapped_grade,
        scoring_version=fields.scoring_version, provisional=fields.provisional,
        down=fields.down, caps_applied=fields.caps_applied)


def _check_rows(row: dict, new: dict, version: str) -> Iterator[dict[str, Any]]:
    for check in new["checks"]:
        value = check.get("value")
        yield {"scan_id": row["pk"], "endpoint_id": row["endpoint_id"], "check_id": check["id"],
               "value": float(value) if isinstance(value, int | float) else None,
               "status": check["status"], "counted": bool(check["counted"]),
               "measured_at": row["finished_at"].isoformat() if row["finished_at"] else None,
               "scoring_version": version, "reason": check_reason(check)}

