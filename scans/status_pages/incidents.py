"""A status page's incidents: each unbroken run of down scans of an endpoint (errored scans are
our side's and neither break nor make one), from its first down scan to the first scan that
was not down, derived from the stored scans: the site keeps no state history of its own.
Scans started in one of the endpoint's maintenance windows are left out: announced work is no
incident."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from accounts.tenancy import scoped_to_teams
from scans import maintenance
from scans.history import slo_windows
from scans.models import Endpoint, Scan, ScanStatus

__all__ = ["Incident", "finished_scans", "incidents"]


@dataclass(frozen=True)
class Incident:
    endpoint_id: int
    started_at: datetime  # the first down scan of the run
    ended_at: datetime | None  # the first scan after it that was not down (None: still down)
    down_scans: int
    before_window: bool = False  # the run was already going when the window began
    until_maintenance: bool = False  # still down when a maintenance window began: ends there

    @property
    def ongoing(self) -> bool:
        return self.ended_at is None

    def duration_s(self, now: datetime) -> float:
        return ((self.ended_at or now) - self.started_at).total_seconds()


def finished_scans(endpoints: list[Endpoint], since: datetime, now: datetime):
    return scoped_to_teams(Scan, {e.team_id for e in endpoints}).filter(
        endpoint__in=[e.pk for e in endpoints],
        queued_at__gt=since,
        queued_at__lte=now,
        status__in=[ScanStatus.SUCCEEDED, ScanStatus.ERRORED],
    )


def incidents(
    endpoints: Iterable[Endpoint], since: datetime, now: datetime | None = None
) -> dict[int, list[Incident]]:
    """Each endpoint's down runs among its succeeded scans in (since, now], newest first, in
    one query: consecutive scans with the same `down` flag form a run (errored scans are left
    out: they say nothing of the endpoint; so are scans started in one of the endpoint's
    maintenance windows: announced work is no incident); a down run ends at the next run's
    first scan."""
    endpoints = list(endpoints)
    result: dict[int, list[Incident]] = {e.pk: [] for e in endpoints}
    if not endpoints:
        return result
    now = now or timezone.now()
    free_rows, free_params = slo_windows.free_values(maintenance.intervals_for(endpoints, since, now))
    scans = (
        finished_scans(endpoints, since, now)
        .filter(status=ScanStatus.SUCCEEDED)
        .order_by()
        .values("id", "endpoint_id", "queued_at", "down")
    )
    inner_sql, inner_params = scans.query.sql_with_params()
    sql = f"""
        WITH free (endpoint_id, free_start, free_end) AS (VALUES {free_rows}),
        flips AS (
            SELECT s.endpoint_id, queued_at, down, id,
                   CASE WHEN down IS DISTINCT FROM LAG(down) OVER w THEN 1 ELSE 0 END AS flip,
                   ROW_NUMBER() OVER w AS nth
            FROM ({inner_sql}) AS s
            JOIN free f ON f.endpoint_id = s.endpoint_id
                AND s.queued_at >= f.free_start AND s.queued_at < f.free_end
            WINDOW w AS (PARTITION BY s.endpoint_id ORDER BY queued_at, id)
        ), numbered AS (
            SELECT *, SUM(flip) OVER (PARTITION BY endpoint_id ORDER BY queued_at, id) AS run
            FROM flips
        ), runs AS (
            SELECT endpoint_id, run, BOOL_AND(down) AS down, MIN(queued_at) AS started,
                   COUNT(*) AS scans, MIN(nth) = 1 AS first_run
            FROM numbered GROUP BY endpoint_id, run
        ), ended AS (
            SELECT *, LEAD(started) OVER (PARTITION BY endpoint_id ORDER BY run) AS ended
            FROM runs
        )
        SELECT endpoint_id, started, ended, scans, first_run FROM ended WHERE down
        ORDER BY endpoint_id, started DESC
    """  # noqa: S608 - only the ORM's own SQL is formatted in; values are parameters
    with connection.cursor() as cursor:
        cursor.execute(sql, [*free_params, *inner_params])
        rows = cursor.fetchall()
    intervals = {e.pk: timedelta(minutes=e.interval_minutes) for e in endpoints}
    for endpoint_id, started, ended, count, first_run in rows:
        # A run that opens the window within one scan interval of its start was most likely
        # going before it ("down since at least …").
        before = bool(first_run) and started - since <= intervals[endpoint_id]
        result[endpoint_id].append(Incident(endpoint_id, started, ended, count, before))
    return result
