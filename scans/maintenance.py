"""Maintenance windows: when they are, and what they cover (docs/operations.md).

A window is one-off ([starts_at, ends_at)) or weekly (on some weekdays at a local time for a
duration, in the window's own timezone). A weekly start is a wall-clock time: across a change
of daylight saving time it stays at 02:00 local, so its UTC instant moves by an hour; its
duration is elapsed time. A local start that does not exist that day (the skipped hour) is read
with the offset before the change (zoneinfo's fold=0), so it starts an hour later on the clock;
one that happens twice (the repeated hour) starts at the first. A weekly window recurs from its
created_at on: it changes no SLO figure from before it existed.

Alerts (scans/notify/alerts.py) are held while a scan ran in a window; SLO windows
(scans/history/slo_windows.py) leave the windows' time out of covered and bad time; the
dispatcher (scans/running/dispatch.py) starts no scheduled scan in a window that pauses
scans. Every read goes through the team scoping layer.

A one-off window is bounded where it is typed (span_errors): it starts no earlier than
PAST_GRACE before now, lasts at most MAX_LENGTH and starts within MAX_AHEAD of now.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db.models import Q

from accounts.tenancy import scoped_to_teams
from scans.models import Endpoint, MaintenanceKind, MaintenanceWindow

__all__ = [
    "MAX_AHEAD",
    "MAX_LENGTH",
    "PAST_GRACE",
    "Occurrence",
    "covering_for",
    "covering_now",
    "excluded",
    "in_maintenance",
    "intervals_for",
    "maintenance_intervals",
    "occurrences",
    "scans_paused",
    "span_errors",
    "span_text",
    "upcoming",
    "window_errors",
    "windows_covering",
    "windows_of",
]

# A window may begin a little before now (work that has just started) but no further back: a
# window that reached into the past would quietly take that time out of the public status
# page's and the SLO's availability.
PAST_GRACE = timedelta(hours=1)
# Longer would hold alerts (and leave time out of the SLO) for longer than any planned work.
MAX_LENGTH = timedelta(days=31)
# Work planned further ahead than this is a typing mistake; the bound also keeps every stored
# instant inside what Python and psycopg can read back, in any timezone.
MAX_AHEAD = timedelta(days=5 * 365)

WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@dataclass(frozen=True)
class Occurrence:
    window: MaintenanceWindow
    start: datetime  # UTC
    end: datetime  # UTC

    def covers(self, at: datetime) -> bool:
        return self.start <= at < self.end


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def occurrences(window: MaintenanceWindow, start: datetime, end: datetime) -> list[Occurrence]:
    """The window's spans that overlap [start, end), unclipped, in time order (UTC)."""
    if window.kind == MaintenanceKind.ONCE:
        if (
            window.starts_at
            and window.ends_at
            and window.starts_at < end
            and window.ends_at > start
            and window.ends_at > window.starts_at
        ):
            return [Occurrence(window, window.starts_at, window.ends_at)]
        return []
    if not window.weekdays or window.start_time is None or not window.duration_minutes:
        return []
    tz = zone(window.timezone)
    duration = timedelta(minutes=window.duration_minutes)
    since = max(start, window.created_at) if window.created_at else start
    # An occurrence that began up to `duration` before `since` still overlaps it.
    day = (since - duration).astimezone(tz).date() - timedelta(days=1)
    last = end.astimezone(tz).date() + timedelta(days=1)
    found = []
    while day <= last:
        if day.weekday() in window.weekdays:
            local = datetime.combine(day, window.start_time, tzinfo=tz)
            begins = local.astimezone(UTC)
            ends = begins + duration
            if begins < end and ends > since:
                found.append(Occurrence(window, begins, ends))
        day += timedelta(days=1)
    return found


def windows_of(team_id: int, endpoint_ids: Iterable[int] | None = None):
    """The team's windows that apply to these endpoints (their own and the team-wide ones)."""
    windows = MaintenanceWindow.objects.for_team(team_id).select_related("endpoint")
    if endpoint_ids is not None:
        windows = windows.filter(Q(endpoint__isnull=True) | Q(endpoint__in=list(endpoint_ids)))
    return windows


def _merge(spans: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    merged: list[tuple[datetime, datetime]] = []
    for begins, ends in sorted(spans):
        if merged and begins <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], ends))
        else:
            merged.append((begins, ends))
    return merged


def intervals_for(
    endpoints: Iterable[Endpoint], start: datetime, end: datetime
) -> dict[int, list[tuple[datetime, datetime]]]:
    """Per endpoint id: its maintenance time within [start, end), merged and clipped, in time
    order; one query for all the endpoints (fetched through the scoping layer by the caller)."""
    endpoints = list(endpoints)
    result: dict[int, list[tuple[datetime, datetime]]] = {e.pk: [] for e in endpoints}
    if not endpoints:
        return result
    teams: dict[int, list[int]] = {}
    for e in endpoints:
        teams.setdefault(e.team_id, []).append(e.pk)
    windows = scoped_to_teams(MaintenanceWindow, set(teams)).filter(
        Q(endpoint__isnull=True) | Q(endpoint__in=list(result))
    )
    spans: dict[int, list[tuple[datetime, datetime]]] = {pk: [] for pk in result}
    for window in windows:
        applies = teams[window.team_id] if window.endpoint_id is None else [window.endpoint_id]
        for occurrence in occurrences(window, start, end):
            piece = (max(occurrence.start, start), min(occurrence.end, end))
            for pk in applies:
                spans[pk].append(piece)
    return {pk: _merge(pieces) for pk, pieces in spans.items()}


def maintenance_intervals(
    endpoint: Endpoint, start: datetime, end: datetime
) -> list[tuple[datetime, datetime]]:
    """The endpoint's maintenance time within [start, end), merged, clipped, in time order."""
    return intervals_for([endpoint], start, end)[endpoint.pk]


def covering_now(endpoints: Iterable[Endpoint], at: datetime) -> dict[int, Occurrence]:
    """Per endpoint id covered by a window at the instant `at`: the covering occurrence that
    ends last (its own windows and the team-wide ones); one query for all the endpoints
    (fetched through the scoping layer by the caller). Endpoints not covered are absent."""
    endpoints = list(endpoints)
    if not endpoints:
        return {}
    teams: dict[int, list[int]] = {}
    for e in endpoints:
        teams.setdefault(e.team_id, []).append(e.pk)
    ids = [e.pk for e in endpoints]
    windows = scoped_to_teams(MaintenanceWindow, set(teams)).filter(
        Q(endpoint__isnull=True) | Q(endpoint__in=ids)
    )
    found: dict[int, Occurrence] = {}
    for window in windows:
        applies = teams[window.team_id] if window.endpoint_id is None else [window.endpoint_id]
        for occurrence in occurrences(window, at, at + timedelta(microseconds=1)):
            if not occurrence.covers(at):
                continue
            for pk in applies:
                if pk not in found or occurrence.end > found[pk].end:
                    found[pk] = occurrence
    return found


def windows_covering(endpoint: Endpoint, at: datetime) -> list[MaintenanceWindow]:
    """The windows (the endpoint's own and the team-wide ones) that cover the instant `at`."""
    return [
        w
        for w in windows_of(endpoint.team_id, [endpoint.pk])
        if any(o.covers(at) for o in occurrences(w, at, at + timedelta(microseconds=1)))
    ]


def in_maintenance(endpoint: Endpoint, start: datetime, end: datetime | None = None) -> bool:
    """Some window overlaps [start, end] (a scan's run), or covers `start` when no end."""
    end = end if end and end > start else start + timedelta(microseconds=1)
    return bool(maintenance_intervals(endpoint, start, end))


def covering_for(endpoint: Endpoint, spans: list[tuple[datetime, datetime | None]]) -> list[bool]:
    """For each (start, end) span of the endpoint (its scans' runs), whether it overlaps a
    window; one query."""
    if not spans:
        return []
    lo = min(s for s, _ in spans)
    hi = max((e or s) for s, e in spans) + timedelta(microseconds=1)
    intervals = maintenance_intervals(endpoint, lo, hi)
    result = []
    for s, e in spans:
        e = e if e and e > s else s + timedelta(microseconds=1)
        result.append(any(b < e and s < f for b, f in intervals))
    return result


def scans_paused(endpoint: Endpoint, at: datetime) -> bool:
    """A window that pauses scans covers `at` (the dispatcher then starts no scheduled scan)."""
    return any(w.pause_scans for w in windows_covering(endpoint, at))


def upcoming(
    team_id: int, now: datetime, endpoint: Endpoint | None = None, days: int = 14
) -> list[Occurrence]:
    """The current and next occurrence of each of the team's windows (those that apply to
    `endpoint` when given) within `days`, soonest first."""
    windows = windows_of(team_id, None if endpoint is None else [endpoint.pk])
    found = []
    for window in windows:
        ahead = occurrences(window, now, now + timedelta(days=days))
        if ahead:
            found.append(ahead[0])
    return sorted(found, key=lambda o: o.start)


def duration_text(minutes: int) -> str:
    """90 -> '1 h 30 min' (scans.history.slo_wording says it the same way; imported from neither side)."""
    hours, minutes = divmod(minutes, 60)
    return (
        " ".join(part for part in (f"{hours} h" * bool(hours), f"{minutes} min" * bool(minutes)) if part)
        or "0 min"
    )


def describe(window: MaintenanceWindow) -> str:
    """'every Monday and Thursday at 02:00 for 1 h 30 min (Europe/Berlin)' or the one span."""
    if window.kind == MaintenanceKind.WEEKLY:
        days = [WEEKDAY_NAMES[d] for d in sorted(window.weekdays or [])]
        named = days[0] if len(days) == 1 else ", ".join(days[:-1]) + " and " + days[-1]
        at = window.start_time.strftime("%H:%M") if window.start_time else "?"
        return f"every {named} at {at} for {duration_text(window.duration_minutes or 0)} ({window.timezone})"
    tz = zone(window.timezone)
    if not window.starts_at or not window.ends_at:
        return "once"
    start, end = window.starts_at.astimezone(tz), window.ends_at.astimezone(tz)
    end_text = end.strftime("%H:%M") if end.date() == start.date() else end.strftime("%Y-%m-%d %H:%M")
    return f"once, {start:%Y-%m-%d %H:%M} to {end_text} ({window.timezone})"


def span_text(span: timedelta) -> str:
    """5 × 365 days -> '5 years', 31 days -> '31 days', 1 hour -> '1 h'."""
    if span.days >= 365 and span.days % 365 == 0 and not span.seconds:
        return f"{span.days // 365} years"
    if span >= timedelta(days=1):
        return f"{span.days} days"
    return duration_text(int(span.total_seconds() // 60))


def span_errors(
    start: datetime, end: datetime, now: datetime, before: tuple[datetime, datetime] | None = None
) -> dict[str, str]:
    """Why a one-off window [start, end) may not be saved, by form field ("starts_at",
    "ends_at"); empty when it may. `before` is the span the window covers already (an edit
    that keeps what it applies to): time it covers already may stay, only new time is held to
    PAST_GRACE."""
    errors: dict[str, str] = {}
    if end <= start:
        return errors  # the form says so at the end's field
    if start > now + MAX_AHEAD:
        errors["starts_at"] = (
            f"Start no later than {span_text(MAX_AHEAD)} from now "
            f"({(now + MAX_AHEAD).astimezone(UTC):%Y-%m-%d} UTC)."
        )
        return errors
    earliest = now - PAST_GRACE
    grace = span_text(PAST_GRACE)
    new_from_start = start if before is None or start < before[0] else None
    new_from_end = max(start, before[1]) if before is not None and end > before[1] else None
    if new_from_start is not None and new_from_start < earliest:
        errors["starts_at"] = (
            f"Start no earlier than {grace} before now ({earliest.astimezone(UTC):%Y-%m-%d %H:%M} UTC): "
            "a window cannot take past time out of availability."
        )
    elif new_from_end is not None and new_from_end < earliest:
        errors["ends_at"] = (
            f"The longer window would cover time earlier than {grace} before now: "
            "a window cannot take past time out of availability."
        )
    if end - start > MAX_LENGTH:
        errors.setdefault(
            "ends_at",
            f"A window lasts at most {span_text(MAX_LENGTH)}; for longer work, add another when it ends.",
        )
    return errors


# A weekly window lasts at most a week: longer, it would overlap its own next occurrence.
MAX_WEEKLY_MINUTES = 7 * 24 * 60


def window_errors(
    kind: str,
    *,
    starts_at: datetime | None,
    ends_at: datetime | None,
    weekdays: list[int] | None,
    start_time: object | None,
    duration_minutes: int | None,
    now: datetime,
    before: tuple[datetime, datetime] | None = None,
) -> dict[str, str]:
    """Why a window may not be saved, by field; empty when it may. The one place for the
    rules: the page's form and the API's serializer only parse and hand their values here.
    `before` as for span_errors."""
    errors: dict[str, str] = {}
    if kind == MaintenanceKind.ONCE:
        for name, value in (("starts_at", starts_at), ("ends_at", ends_at)):
            if value is None:
                errors[name] = "Give a date and time."
        if starts_at is None or ends_at is None:
            return errors
        if ends_at <= starts_at:
            return {"ends_at": "The window ends before it starts: give a later end."}
        return span_errors(starts_at, ends_at, now, before)
    if not weekdays:
        errors["weekdays"] = "Pick at least one day."
    elif any(d not in range(7) for d in weekdays):
        errors["weekdays"] = "Days are 0 (Monday) to 6 (Sunday)."
    if start_time is None:
        errors["start_time"] = "Give a time of day."
    if duration_minutes is None:
        errors["duration_minutes"] = "Give how long it lasts, in minutes."
    elif duration_minutes <= 0:
        errors["duration_minutes"] = "The window must last at least a minute."
    elif duration_minutes > MAX_WEEKLY_MINUTES:
        errors["duration_minutes"] = f"At most a week ({MAX_WEEKLY_MINUTES:,} minutes)."
    return errors


def excluded(window: MaintenanceWindow, now: datetime, days: int = 90) -> timedelta:
    """How much time the window has taken out of availability over the last `days` up to now
    (for each endpoint it applies to)."""
    start = now - timedelta(days=days)
    spans = [(max(o.start, start), min(o.end, now)) for o in occurrences(window, start, now)]
    return sum((b - a for a, b in _merge(spans) if b > a), timedelta())
