"""The report columns of a scan (target_url, load_plan, preflight_*, failure_summary), filled
from its stored report for scans stored without them: during an upgrade to those columns, a
worker of the previous release stores scans after the migration that filled the older ones
(scans/migrations/0023) has passed them. `manage.py fill_scan_columns` runs `fill_missing`
after the rollout.

A compatibility shim for that one upgrade: it goes (with the command) in the first release
after 2027-03-01, when no supported upgrade path starts before migration 0023.

It writes what a worker of this release writes as it stores a report (scans/running/worker.py,
report_columns), computed in SQL: each report is read once, only the parts needed, never loaded
into Python. The migration keeps its own frozen copy of this SQL (a migration must do the same
thing whatever later code says); this one follows scans.endpoints.profile.PLAN_PATHS as it is now.
"""

from __future__ import annotations

from django.db import connection, transaction

from scans.endpoints.profile import PLAN_PATHS

__all__ = ["DEFAULT_BATCH", "fill_missing"]

DEFAULT_BATCH = 500


def _plan_sql(report: str) -> str:
    """The load as jsonb {pf_<name>: text}, the text PostgreSQL's ->> gives (as the rollups
    and worker.report_columns have it)."""
    pairs = ", ".join(f"'pf_{name}', {report} #>> '{{plan,{','.join(path)}}}'"
                      for name, path in PLAN_PATHS.items())
    return f"jsonb_build_object({pairs})"


_FILL = f"""
UPDATE scans_scan AS s SET
    load_plan = {_plan_sql('p.rep')},
    target_url = LEFT(COALESCE(p.rep #>> '{{target,base_url}}', ''), 500),
    preflight_stopped = COALESCE(p.rep #>> '{{preflight,stopped}}' = 'true', false),
    preflight_cause = COALESCE(p.rep #>> '{{preflight,cause}}', ''),
    failure_summary = COALESCE(p.rep #>> '{{failure_summary,sentence}}', ''),
    preflight_warnings = p.rep #> '{{preflight,warnings}}'
FROM (
    SELECT r.id, (SELECT COALESCE(jsonb_object_agg(k, v), '{{}}'::jsonb)
                  FROM jsonb_each(r.report) AS e(k, v)
                  WHERE k IN ('plan', 'target', 'preflight', 'failure_summary')) AS rep
    FROM scans_scan AS r
    WHERE r.id = ANY(%s) AND jsonb_typeof(r.report) = 'object'
) AS p
WHERE s.id = p.id AND s.load_plan IS NULL
"""  # noqa: S608 - only the constant PLAN_PATHS is formatted in; ids are parameters

# A scan stored with its columns always has a load_plan (worker.report_columns writes one for
# every report), so a report without one is a scan stored without them.
_NEXT = ("SELECT id FROM scans_scan WHERE id > %s AND report IS NOT NULL AND load_plan IS NULL "
         "ORDER BY id LIMIT %s")


def fill_missing(batch: int = DEFAULT_BATCH) -> int:
    """Fill the report columns of every scan that has a report but not its columns, `batch`
    scans per transaction (row locks only, so scans go on being stored beside it); returns how
    many were filled. Safe to run again or beside itself: a filled scan is not read twice."""
    filled, last = 0, 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_NEXT, [last, batch])
            ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                return filled
            cursor.execute(_FILL, [ids])
            filled += cursor.rowcount
        last = ids[-1]
