"""A status page's availability by UTC day: the share of the time scans (or liveness probes,
whichever covered more of the day: scans/liveness/history.py daily_cover) covered during which
an endpoint was not down. Uncovered time is no data, never up (DECISIONS.md, "Status page
availability"); each scan stands for the time scans.history.slo_windows.spans_cte gives it;
time in the endpoint's maintenance windows is left out, neither up, down nor no data, cut out
of the spans as the SLO windows cut it (scans.history.slo_windows.free_values,
scans.maintenance)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.db import connection
from django.utils import timezone

from scans import maintenance
from scans.grader import format_percent
from scans.history import slo_windows
from scans.history.slo_wording import duration_text
from scans.liveness import history as probe_history
from scans.models import Endpoint
from scans.status_pages.incidents import finished_scans

__all__ = ["DAYS", "DayCell", "daily_availability", "day_starts"]

DAYS = 90


@dataclass(frozen=True)
class DayCell:
    day: date
    day_s: float  # the day's length (today: up to now)
    covered_s: float  # time scans stood for (scans.history.slo_windows.spans_cte)
    down_s: float  # of which the endpoint was down
    maintenance_s: float = 0.0  # in maintenance windows: left out of the day

    @property
    def uncovered_s(self) -> float:
        return max(self.day_s - self.maintenance_s - self.covered_s, 0.0)

    @property
    def availability(self) -> float | None:
        return (self.covered_s - self.down_s) / self.covered_s if self.covered_s else None

    @property
    def kind(self) -> str:
        """'none' (no data), 'up', 'partial' (some down time) or 'down' (down all it was seen)."""
        if not self.covered_s:
            return "none"
        if not self.down_s:
            return "up"
        return "down" if self.down_s >= self.covered_s else "partial"

    @property
    def text(self) -> str:
        """What the cell's tooltip and screen readers say."""
        when = self.day.strftime("%-d %b %Y")
        held = (f", maintenance {duration_text(self.maintenance_s)} (not counted)"
                if self.maintenance_s >= 60 else "")
        if not self.covered_s:
            return f"{when}: no data{held}"
        words = f"{when}: {format_percent(self.availability, [1.0])} up"
        if self.down_s:
            words += f", down {duration_text(self.down_s)}"
        if self.uncovered_s >= 60:
            words += f", no data for {duration_text(self.uncovered_s)}"
        return words + held


def day_starts(days: int, now: datetime) -> list[datetime]:
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return [today - timedelta(days=n) for n in range(days - 1, -1, -1)]


def daily_availability(
    endpoints: Iterable[Endpoint], days: int = DAYS, now: datetime | None = None
) -> dict[int, list[DayCell]]:
    """Each endpoint's last `days` UTC days (today last, up to now): covered and down seconds,
    from the spans of scans.history.slo_windows outside the endpoint's maintenance windows, and the windows'
    time (one query for any number of endpoints)."""
    endpoints = list(endpoints)
    if not endpoints:
        return {}
    now = now or timezone.now()
    starts = day_starts(days, now)
    longest = max(e.interval_minutes for e in endpoints)
    scans = finished_scans(endpoints, starts[0] - timedelta(minutes=longest), now)
    spanned_sql, params = slo_windows.spans_cte(scans, now, ("down",))
    held = maintenance.intervals_for(endpoints, starts[0], now)
    free_rows, free_params = slo_windows.free_values(held)
    sql = f"""
        WITH {spanned_sql},
        free (endpoint_id, free_start, free_end) AS (VALUES {free_rows}),
        pieces AS (
            -- a succeeded scan's span as its pieces outside maintenance, as in scans.history.slo_windows
            SELECT s.endpoint_id, s.status, s.down,
                   GREATEST(s.queued_at, f.free_start) AS queued_at, LEAST(s.stop, f.free_end) AS stop
            FROM spanned s JOIN free f ON f.endpoint_id = s.endpoint_id
                AND f.free_start < s.stop AND f.free_end > s.queued_at
        ),
        days AS (SELECT generate_series(%s::timestamptz, %s::timestamptz, interval '1 day') AS d)
        SELECT endpoint_id, d,
               SUM(GREATEST(EXTRACT(EPOCH FROM (LEAST(stop, d + interval '1 day')
                                                - GREATEST(queued_at, d))), 0)) AS covered,
               SUM(GREATEST(EXTRACT(EPOCH FROM (LEAST(stop, d + interval '1 day')
                                                - GREATEST(queued_at, d))), 0))
                   FILTER (WHERE down) AS down
        FROM pieces JOIN days ON queued_at < d + interval '1 day' AND stop > d
        WHERE status = 'succeeded'
        GROUP BY endpoint_id, d
    """  # noqa: S608 - only the ORM's own SQL is formatted in; values are parameters
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *free_params, starts[0], starts[-1]])
        sums = {(e, d): (float(c or 0), float(dn or 0)) for e, d, c, dn in cursor.fetchall()}
    probed = probe_history.daily_cover(endpoints, starts[0], now, held)
    result = {}
    for endpoint in endpoints:
        cells = []
        for start in starts:
            day_s = min((now - start).total_seconds(), 86400.0)
            covered, down = sums.get((endpoint.pk, start), (0.0, 0.0))
            # The liveness probes count too: whichever covered more of the day tells it
            # (probes, every minute, cover a day far more finely than hourly scans).
            by_probes = probed.get((endpoint.pk, start))
            if by_probes is not None and by_probes[0] > covered:
                covered, down = by_probes
            day_end = min(start + timedelta(days=1), now)
            held_s = sum(
                max((min(ends, day_end) - max(begins, start)).total_seconds(), 0.0)
                for begins, ends in held[endpoint.pk]
            )
            cells.append(DayCell(start.date(), day_s, covered, down, held_s))
        result[endpoint.pk] = cells
    return result
