"""The report columns of a scan (target_url, load_plan, preflight_*, failure_summary, the
headline figures, caps_applied, capacity_found) and its checks' reasons, filled from its
stored report for scans stored without them: during an upgrade to those columns, a worker of
the previous release stores scans after the migration that filled the older ones
(scans/migrations/0023 and 0028) has passed them. `manage.py fill_scan_columns` runs
`fill_missing` after the rollout.

A compatibility shim for those upgrades: it goes (with the command) in the first release
after 2027-06-01, when no supported upgrade path starts before migration 0028.

It writes what a worker of this release writes as it stores a report (scans/running/worker.py,
report_columns), computed in SQL: each report is read once, only the parts needed, never loaded
into Python. The migration keeps its own frozen copy of this SQL (a migration must do the same
thing whatever later code says); this one follows scans.endpoints.profile.PLAN_PATHS as it is now.
"""

from __future__ import annotations

from django.db import connection, transaction

from scans.endpoints.profile import PLAN_PATHS
from scans.running.worker import REPORT_COLUMNS_VERSION

__all__ = ["DEFAULT_BATCH", "fill_missing"]

DEFAULT_BATCH = 500


def _plan_sql(report: str) -> str:
    """The load as jsonb {pf_<name>: text}, the text PostgreSQL's ->> gives (as the rollups
    and worker.report_columns have it)."""
    pairs = ", ".join(f"'pf_{name}', {report} #>> '{{plan,{','.join(path)}}}'"
                      for name, path in PLAN_PATHS.items())
    return f"jsonb_build_object({pairs})"


def _number(path: str) -> str:
    """The JSON number at `path` of p.rep as a float; NULL for anything else (as
    worker._figure takes only numbers)."""
    return (f"CASE WHEN jsonb_typeof(p.rep #> '{{{path}}}') = 'number' "
            f"THEN (p.rep #>> '{{{path}}}')::float END")


_FILL = f"""
UPDATE scans_scan AS s SET
    load_plan = {_plan_sql('p.rep')},
    target_url = LEFT(COALESCE(p.rep #>> '{{target,base_url}}', ''), 500),
    preflight_stopped = COALESCE(p.rep #>> '{{preflight,stopped}}' = 'true', false),
    preflight_cause = COALESCE(p.rep #>> '{{preflight,cause}}', ''),
    failure_summary = COALESCE(p.rep #>> '{{failure_summary,sentence}}', ''),
    preflight_warnings = p.rep #> '{{preflight,warnings}}',
    ttft_p50_ms = {_number('levels,0,ttft_ms,p50')},
    ttft_p95_ms = {_number('levels,0,ttft_ms,p95')},
    tokens_per_s = {_number('levels,0,generation_rate,median')},
    tokens_basis = CASE WHEN jsonb_typeof(p.rep #> '{{levels,0,generation_rate,basis}}') = 'string'
                   THEN LEFT(p.rep #>> '{{levels,0,generation_rate,basis}}', 12) ELSE '' END,
    first_answer_p50_ms = {_number('levels,0,time_to_first_answer_ms,p50')},
    thinking_p50_ms = {_number('levels,0,thinking_ms,p50')},
    caps_applied = CASE WHEN jsonb_typeof(p.rep #> '{{score,caps_applied}}') = 'array' THEN
        COALESCE((SELECT jsonb_agg(COALESCE(c ->> 'id', ''))
                  FROM jsonb_array_elements(p.rep #> '{{score,caps_applied}}') AS c
                  WHERE jsonb_typeof(c) = 'object'), '[]'::jsonb)
        ELSE '[]'::jsonb END,
    capacity_found = CASE WHEN jsonb_typeof(p.rep -> 'capacity') = 'object'
                     THEN p.rep -> 'capacity' END,
    report_columns_version = %s
FROM (
    SELECT r.id, (SELECT COALESCE(jsonb_object_agg(k, v), '{{}}'::jsonb)
                  FROM jsonb_each(r.report) AS e(k, v)
                  WHERE k IN ('plan', 'target', 'preflight', 'failure_summary', 'levels',
                              'score', 'capacity')) AS rep
    FROM scans_scan AS r
    WHERE r.id = ANY(%s) AND jsonb_typeof(r.report) = 'object'
) AS p
WHERE s.id = p.id AND s.report_columns_version < %s
"""  # noqa: S608 - only constant paths are formatted in; ids are parameters

# Each check's reason (the charts' hover text) from the report's checks list.
_REASONS = """
UPDATE scans_checkresult AS c SET reason = x.reason
FROM (
    SELECT r.id AS scan_id, e ->> 'id' AS check_id, e ->> 'reason' AS reason
    FROM scans_scan AS r, jsonb_array_elements(
        CASE WHEN jsonb_typeof(r.report -> 'checks') = 'array' THEN r.report -> 'checks'
             ELSE '[]'::jsonb END) AS e
    WHERE r.id = ANY(%s) AND jsonb_typeof(e -> 'reason') = 'string'
) AS x
WHERE c.scan_id = x.scan_id AND c.check_id = x.check_id AND c.reason <> x.reason
"""

# A worker of this release writes REPORT_COLUMNS_VERSION with every report: a report stored
# with a lower version was stored by an older worker.
_NEXT = ("SELECT id FROM scans_scan WHERE id > %s AND report IS NOT NULL "
         "AND report_columns_version < %s ORDER BY id LIMIT %s")


def fill_missing(batch: int = DEFAULT_BATCH) -> int:
    """Fill the report columns of every scan that has a report but not its columns, `batch`
    scans per transaction (row locks only, so scans go on being stored beside it); returns how
    many were filled. Safe to run again or beside itself: a filled scan is not read twice."""
    filled, last = 0, 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_NEXT, [last, REPORT_COLUMNS_VERSION, batch])
            ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                return filled
            cursor.execute(_FILL, [REPORT_COLUMNS_VERSION, ids, REPORT_COLUMNS_VERSION])
            filled += cursor.rowcount
            cursor.execute(_REASONS, [ids])
        last = ids[-1]
