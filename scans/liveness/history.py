"""What the endpoint page and the status page read of the probes: each location's standing
with its latest probes (the strip), the probe TTFT series over a range (each probe for short
ranges, hours from ProbeHour for long ones), and probe coverage by UTC day."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from accounts.tenancy import scoped_to_teams
from scans.endpoints import scheduling
from scans.history.downsampling import bucket_width_s
from scans.models import Endpoint, LivenessState, ProbeHour, ProbeResult

__all__ = ["STRIP", "LocationLiveness", "ProbePoint", "daily_cover", "locations", "series"]

#: How many of a location's latest probes the page shows as a strip.
STRIP = 60
#: Ranges up to this long chart each probe; longer ones chart hours.
EACH_PROBE_UP_TO = timedelta(hours=6)


@dataclass(frozen=True)
class LocationLiveness:
    location: str
    standing: LivenessState | None
    strip: list[ProbeResult] = field(default_factory=list)  # oldest first

    @property
    def answered_share(self) -> float | None:
        counted = [p for p in self.strip if p.counted]
        return sum(p.ok for p in counted) / len(counted) if counted else None

    @property
    def state(self) -> str:
        if self.standing is None or self.standing.since is None:
            return "none"
        return "down" if self.standing.down else "up"


def locations(endpoint: Endpoint) -> list[LocationLiveness]:
    """Each of the endpoint's locations (and any other that still has a standing), in order."""
    names = scheduling.locations_of(endpoint)
    standings = {s.location: s for s in
                 LivenessState.objects.for_team(endpoint.team_id).filter(endpoint=endpoint)}
    names += [name for name in sorted(standings) if name not in names]
    probes = ProbeResult.objects.for_team(endpoint.team_id).filter(endpoint=endpoint)
    return [LocationLiveness(name, standings.get(name),
                             list(reversed(probes.filter(location=name).order_by("-at")[:STRIP])))
            for name in names]


@dataclass(frozen=True)
class ProbePoint:
    at: datetime
    last_at: datetime
    probes: int
    ttft_ms: float | None  # the mean of the answered probes' TTFT (None: none answered)


def series(endpoint: Endpoint, since: datetime, until: datetime,
           max_points: int | None = None) -> dict[str, list[ProbePoint]]:
    """Probe TTFT per location over [since, until]: each probe for a short range, each hour's
    mean for a longer one (ProbeHour, kept after the probes' own rows are gone). With
    `max_points`, neighbouring points are merged into at most that many per location (a
    chart of 30 days of hours drew 720 points per location, most of the page's time)."""
    result: dict[str, list[tuple[datetime, datetime, int, float, int]]] = {}
    if until - since <= EACH_PROBE_UP_TO:
        rows = (ProbeResult.objects.for_team(endpoint.team_id)
                .filter(endpoint=endpoint, at__gte=since, at__lt=until)
                .order_by("at").values_list("location", "at", "ttft_ms"))
        for location, at, ttft in rows:
            result.setdefault(location, []).append(
                (at, at, 1, ttft or 0.0, int(ttft is not None)))
    else:
        hours = (ProbeHour.objects.for_team(endpoint.team_id)
                 .filter(endpoint=endpoint, hour__gte=since, hour__lt=until)
                 .order_by("hour")
                 .values_list("location", "hour", "probes", "ttft_sum", "ttft_n"))
        for location, hour, probes, ttft_sum, ttft_n in hours:
            result.setdefault(location, []).append(
                (hour, hour + timedelta(minutes=59), probes, ttft_sum, ttft_n))
    width_s = bucket_width_s(since, until, max_points) if max_points else None
    return {location: _points(rows, since, width_s) for location, rows in result.items()}


def _points(rows: list[tuple[datetime, datetime, int, float, int]], since: datetime,
            width_s: int | None) -> list[ProbePoint]:
    """(at, last_at, probes, ttft sum, ttft count) rows as points, merged per `width_s`
    seconds from `since` when given: sums and counts added, so a mean stays exact."""
    merged: list[list] = []
    for at, last_at, probes, ttft_sum, ttft_n in rows:
        bucket = (at - since).total_seconds() // width_s if width_s else None
        if merged and bucket is not None and merged[-1][0] == bucket:
            last = merged[-1]
            last[2:] = [last_at, last[3] + probes, last[4] + ttft_sum, last[5] + ttft_n]
        else:
            merged.append([bucket, at, last_at, probes, ttft_sum, ttft_n])
    return [ProbePoint(at, last_at, probes, ttft_sum / ttft_n if ttft_n else None)
            for _, at, last_at, probes, ttft_sum, ttft_n in merged]


def daily_cover(endpoints: Iterable[Endpoint], since: datetime, until: datetime,
                held: Mapping[int, Sequence[tuple[datetime, datetime]]] | None = None,
                ) -> dict[tuple[int, datetime], tuple[float, float]]:
    """(endpoint id, UTC day) → (seconds the probes covered, of which the endpoint was down),
    from the hours of ProbeHour (one query for any number of endpoints).

    Each counted probe stands for its endpoint's probe interval then, a failed one for as
    much down time. Across locations an hour is covered as much as its best-covered location
    and down as much as a majority of locations saw it down (the quorum's rule, by the hour:
    the down time of the location ranked at the majority, counting locations without a
    probe as not down); docs/liveness.md. An hour that overlaps one of the endpoint's `held`
    intervals (maintenance) is left out whole: its probes are neither up nor down."""
    endpoints = list(endpoints)
    if not endpoints:
        return {}
    majority = {e.pk: len(scheduling.locations_of(e)) // 2 + 1 for e in endpoints}
    rows = (scoped_to_teams(ProbeHour, {e.team_id for e in endpoints})
            .filter(endpoint__in=[e.pk for e in endpoints], hour__gte=since, hour__lt=until)
            .values_list("endpoint_id", "hour", "covered_s", "down_s"))
    hours: dict[tuple[int, datetime], list[tuple[float, float]]] = {}
    for endpoint_id, hour, covered, down in rows:
        hours.setdefault((endpoint_id, hour), []).append((covered, down))
    result: dict[tuple[int, datetime], tuple[float, float]] = {}
    held = held or {}
    for (endpoint_id, hour), figures in hours.items():
        if any(start < hour + timedelta(hours=1) and end > hour
               for start, end in held.get(endpoint_id, ())):
            continue
        downs = sorted((down for _, down in figures), reverse=True)
        rank = majority[endpoint_id] - 1
        covered = min(max(c for c, _ in figures), 3600.0)
        down = min(downs[rank] if rank < len(downs) else 0.0, covered)
        day = hour.replace(hour=0)
        before = result.get((endpoint_id, day), (0.0, 0.0))
        result[(endpoint_id, day)] = (before[0] + covered, before[1] + down)
    return result
