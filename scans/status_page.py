"""A team's public status page (issue 24): what it shows, its settings, and its cache.

What a visitor sees is only what the team chose: the page's title, and for each endpoint it
picked, the name it gave it (never the URL, the model, the team or a cause), with

- its state as the site computes it (scans.state: up, degraded, down; below floor reads
  "degraded", an error on our side "unknown": no news of the endpoint);
- its latest grade and the load profile it was graded under (scans.profile; a down scan has
  no grade, so this is the last graded scan, with its time);
- its availability over the last 90 UTC days, in time: the share of the time scans covered
  during which it was not down. Uncovered time is no data, never up (DECISIONS.md, "Status
  page availability"); each scan stands for the time scans.slo.spans_cte gives it; time in
  the endpoint's maintenance windows is left out, neither up, down nor no data, cut out of
  the spans as the SLO windows cut it (scans.slo.free_values, scans.maintenance);
- its incidents: each unbroken run of down scans (errored scans are our side's and neither
  break nor make one), from its first down scan to the first scan that was not down
  (`incidents`, derived from the stored scans: the site keeps no state history of its own).

The page is rendered without a request (no session, no CSRF token, no form) and cached under
its slug alone for CACHE_S; a change of settings deletes the entry at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta

from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import F
from django.template.loader import render_to_string
from django.utils import timezone

from accounts.models import Team
from accounts.tenancy import scoped_to_teams
from accounts.validators import one_line
from common.stale_cache import StaleWhileRebuild, Unavailable
from scans import maintenance, slo, state
from scans.grader import formatting as fmt
from scans.models import Endpoint, Scan, ScanStatus, StatusPage, StatusPageEndpoint
from scans.profile import plan_columns, profile_of_row

__all__ = [
    "CACHE_S",
    "DAYS",
    "DayCell",
    "Incident",
    "StatusPageUnavailable",
    "cached_page",
    "daily_availability",
    "incidents",
    "page_context",
    "page_of",
    "save_settings",
    "validate_slug",
]

DAYS = 90
CACHE_S = 60  # the page is rebuilt at most this often (and at once when its settings change)
BUILD_LOCK_S = 30
MAX_INCIDENTS = 50  # the newest shown; older ones are summed in one line
SLUG_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{1,48}[a-z0-9])$")
# Words a chosen slug may not be: they read as the site's own pages, or invite impersonation.
RESERVED_SLUGS = frozenset(
    {
        "admin",
        "api",
        "app",
        "benchmarks",
        "dashboard",
        "docs",
        "help",
        "login",
        "logout",
        "new",
        "settings",
        "signup",
        "static",
        "status",
        "support",
        "team",
        "teams",
        "tokvera",
        "www",
        "security",
        "billing",
        "account",
        "accounts",
        "about",
        "metrics",
        "healthz",
    }
)
PUBLIC_STATES = {
    state.UP: ("up", "Up"),
    state.DEGRADED: ("degraded", "Degraded"),
    state.BELOW_FLOOR: ("degraded", "Degraded"),
    state.DOWN: ("down", "Down"),
    state.ERRORED: ("unknown", "Unknown"),
    state.NOT_SCANNED: ("unknown", "No data yet"),
    state.MAINTENANCE: ("maintenance", "Maintenance"),
}


class StatusPageUnavailable(Exception):
    """Neither the cache nor the database can give the page now."""


# --- settings ---------------------------------------------------------------------------------


def validate_slug(text: str) -> str:
    """A slug a team chose: 3 to 50 of a-z, 0-9 and inner hyphens, not a reserved word."""
    slug = text.strip().lower()
    if not SLUG_RE.match(slug) or "--" in slug:
        raise ValidationError(
            "Use 3 to 50 lowercase letters, digits and single hyphens, "
            "starting and ending with a letter or digit."
        )
    if slug in RESERVED_SLUGS:
        raise ValidationError(f"“{slug}” is reserved; choose another address.")
    return slug


def page_of(team: Team) -> StatusPage:
    """The team's status page, made (off, with a random slug) the first time it is asked for."""
    page = StatusPage.objects.for_team(team).first()
    if page is None:
        page, _ = StatusPage.dangerously_unscoped.get_or_create(
            team=team, defaults={"title": f"{team.name} status"}
        )
    return page


@transaction.atomic
def save_settings(
    page: StatusPage, *, enabled: bool, slug: str, title: str, shown: list[tuple[Endpoint, str]]
) -> StatusPage:
    """Store the page's settings and the endpoints it shows, in order, under their names
    (blank: the endpoint's own name). `slug` is already validated; a taken one raises
    ValidationError. The cached page (under the old slug and the new) is dropped."""
    old_slug = page.slug
    if (
        slug != old_slug and StatusPage.dangerously_unscoped.filter(slug=slug).exclude(pk=page.pk).exists()
    ):  # only "taken", never whose
        raise ValidationError("This address is taken; choose another.")
    page.enabled, page.slug, page.title = enabled, slug, title.strip() or "Status"
    page.save()
    for endpoint, _ in shown:
        if endpoint.team_id != page.team_id:
            raise ValueError("a status page shows only its own team's endpoints")
    StatusPageEndpoint.objects.for_team(page.team_id).filter(status_page=page).delete()
    StatusPageEndpoint.dangerously_unscoped.bulk_create(
        [
            StatusPageEndpoint(
                status_page=page,
                endpoint=endpoint,
                position=i,
                display_name=(name.strip() or endpoint.name)[:100],
            )
            for i, (endpoint, name) in enumerate(shown)
        ]
    )
    # Now, and again once committed: a visitor in between may have cached the old page.
    forget(old_slug, slug)
    transaction.on_commit(lambda: forget(old_slug, slug))
    return page


def forget(*slugs: str) -> None:
    try:
        cache.delete_many([_key(s) for s in slugs])
    except Exception as exc:  # noqa: BLE001 - the entry then lapses within CACHE_S
        from common.cache_outage import warn

        warn("status page cache entry not dropped", exc)


# --- incidents --------------------------------------------------------------------------------


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


def _finished(endpoints: list[Endpoint], since: datetime, now: datetime):
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
    free_rows, free_params = slo.free_values(maintenance.intervals_for(endpoints, since, now))
    scans = (
        _finished(endpoints, since, now)
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


# --- availability by day ----------------------------------------------------------------------


@dataclass(frozen=True)
class DayCell:
    day: date
    day_s: float  # the day's length (today: up to now)
    covered_s: float  # time scans stood for (scans.slo.spans_cte)
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
        held = (f", maintenance {slo.duration_text(self.maintenance_s)} (not counted)"
                if self.maintenance_s >= 60 else "")
        if not self.covered_s:
            return f"{when}: no data{held}"
        words = f"{when}: {fmt.percent(self.availability, [1.0])} up"
        if self.down_s:
            words += f", down {slo.duration_text(self.down_s)}"
        if self.uncovered_s >= 60:
            words += f", no data for {slo.duration_text(self.uncovered_s)}"
        return words + held


def _day_starts(days: int, now: datetime) -> list[datetime]:
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return [today - timedelta(days=n) for n in range(days - 1, -1, -1)]


def daily_availability(
    endpoints: Iterable[Endpoint], days: int = DAYS, now: datetime | None = None
) -> dict[int, list[DayCell]]:
    """Each endpoint's last `days` UTC days (today last, up to now): covered and down seconds,
    from the spans of scans.slo outside the endpoint's maintenance windows, and the windows'
    time (one query for any number of endpoints)."""
    endpoints = list(endpoints)
    if not endpoints:
        return {}
    now = now or timezone.now()
    starts = _day_starts(days, now)
    longest = max(e.interval_minutes for e in endpoints)
    scans = _finished(endpoints, starts[0] - timedelta(minutes=longest), now)
    spanned_sql, params = slo.spans_cte(scans, now, ("down",))
    held = maintenance.intervals_for(endpoints, starts[0], now)
    free_rows, free_params = slo.free_values(held)
    sql = f"""
        WITH {spanned_sql},
        free (endpoint_id, free_start, free_end) AS (VALUES {free_rows}),
        pieces AS (
            -- a succeeded scan's span as its pieces outside maintenance, as in scans.slo
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
    result = {}
    for endpoint in endpoints:
        cells = []
        for start in starts:
            day_s = min((now - start).total_seconds(), 86400.0)
            covered, down = sums.get((endpoint.pk, start), (0.0, 0.0))
            day_end = min(start + timedelta(days=1), now)
            held_s = sum(
                max((min(ends, day_end) - max(begins, start)).total_seconds(), 0.0)
                for begins, ends in held[endpoint.pk]
            )
            cells.append(DayCell(start.date(), day_s, covered, down, held_s))
        result[endpoint.pk] = cells
    return result


# --- the page ---------------------------------------------------------------------------------


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%-d %b %Y, %H:%M UTC")


def _latest_grades(page: StatusPage, endpoints: list[Endpoint]) -> dict[int, dict]:
    """Each endpoint's latest graded scan: grade, provisional, time, profile label. The
    profile never names a dataset (a file name is the team's, not chosen for the page)."""
    if not endpoints:
        return {}
    scans = (
        scoped_to_teams(Scan, [page.team_id])
        .filter(endpoint__in=[e.pk for e in endpoints], status=ScanStatus.SUCCEEDED, down=False)
        .exclude(grade="")
    )
    if page.team.badge_site_measured_only:  # the team keeps pushed grades off its public faces
        scans = scans.filter(pushed=False)
    rows = (
        scans.order_by("endpoint_id", "-queued_at", "-pk")
        .distinct("endpoint_id")
        .annotate(**plan_columns())
        .values("endpoint_id", "grade", "provisional", "queued_at", *plan_columns().keys())
    )
    result = {}
    for row in rows:
        row = {**row, "pf_dataset_name": None}
        result[row["endpoint_id"]] = {
            "grade": row["grade"],
            "provisional": row["provisional"],
            "at": _when(row["queued_at"]),
            "profile": profile_of_row(row).label,
        }
    return result


def _availability(cells: list[DayCell]) -> dict:
    covered = sum(c.covered_s for c in cells)
    down = sum(c.down_s for c in cells)
    held = sum(c.maintenance_s for c in cells)
    whole = sum(c.day_s for c in cells) - held
    share = (covered - down) / covered if covered else None
    return {
        "share": share,
        "text": fmt.percent(share, [1.0]) if share is not None else "no data",
        "uncovered_text": (
            f"no data for {slo.duration_text(whole - covered)} of {len(cells)} days"
            if whole - covered >= 60
            else ""
        ),
        "down_text": slo.duration_text(down) if down else "",
        "maintenance_text": (
            f"maintenance for {slo.duration_text(held)} not counted" if held >= 60 else ""
        ),
    }


def page_context(page: StatusPage, now: datetime) -> dict:
    """Everything the public page shows, and nothing else (read through the scoping layer)."""
    entries = list(
        StatusPageEndpoint.objects.for_team(page.team_id)
        .filter(status_page=page)
        .select_related("endpoint")
        .annotate(team_of_endpoint=F("endpoint__team_id"))
    )
    endpoints = [e.endpoint for e in entries if e.team_of_endpoint == page.team_id]
    states = state.states_for(endpoints)
    currents = {e.pk: state.current(e) for e in endpoints if states[e.pk].state != state.UP}
    # Announced work shows as maintenance, never as down or an ongoing incident.
    currents = state.during_maintenance(endpoints, {**states, **currents}, now)
    grades = _latest_grades(page, endpoints)
    days = daily_availability(endpoints, DAYS, now)
    found = incidents(endpoints, now - timedelta(days=DAYS), now)
    # Names stored before the one-line rule reach the public without their control characters.
    names = {e.endpoint_id: one_line(e.display_name) for e in entries}
    rows, history = [], []
    for endpoint in endpoints:
        current = currents.get(endpoint.pk, states[endpoint.pk])
        kind, label = PUBLIC_STATES[current.state]
        rows.append(
            {
                "name": names[endpoint.pk],
                "state": kind,
                "state_label": label,
                "since": _when(current.since) if current.since and kind != "up" else "",
                "grade": grades.get(endpoint.pk),
                "days": days[endpoint.pk],
                "availability": _availability(days[endpoint.pk]),
            }
        )
        for incident in found[endpoint.pk]:
            if incident.ongoing and current.state == state.MAINTENANCE and current.since:
                # down when the window began: the incident ends there, the rest is maintenance
                incident = replace(incident, ended_at=max(current.since, incident.started_at),
                                   until_maintenance=True)
            history.append((incident, names[endpoint.pk]))
    history.sort(key=lambda pair: pair[0].started_at, reverse=True)
    shown = [_incident_row(incident, name, now) for incident, name in history[:MAX_INCIDENTS]]
    worst = next(
        (k for k in ("down", "degraded", "unknown", "maintenance") if any(r["state"] == k for r in rows)),
        "up",
    )
    return {
        "title": one_line(page.title),
        "rows": rows,
        "incidents": shown,
        "older_incidents": max(len(history) - MAX_INCIDENTS, 0),
        "overall": worst,
        "overall_text": {
            "down": "Some systems are down",
            "degraded": "Some systems are degraded",
            "unknown": "Some systems have no recent data",
            "maintenance": "Maintenance in progress",
            "up": "All systems are up",
        }[worst]
        if rows
        else "Nothing to show yet",
        "days": DAYS,
        "built_at": _when(now),
        "cache_s": CACHE_S,
        "first_day": _day_starts(DAYS, now)[0].strftime("%-d %b"),
    }


def _incident_row(incident: Incident, name: str, now: datetime) -> dict:
    since = "Down since at least" if incident.before_window else "Down since"
    if incident.ongoing:
        headline = f"{since} {_when(incident.started_at)}"
        detail = f"ongoing, {slo.duration_text(incident.duration_s(now))} so far"
    elif incident.until_maintenance:
        headline = f"Down for {slo.duration_text(incident.duration_s(now))}, then maintenance"
        detail = (f"down from {_when(incident.started_at)} until maintenance began at "
                  f"{_when(incident.ended_at or now)}")
    else:
        headline = f"Recovered after {slo.duration_text(incident.duration_s(now))}"
        detail = f"down from {_when(incident.started_at)} to {_when(incident.ended_at or now)}"
    return {
        "name": name,
        "ongoing": incident.ongoing,
        "headline": headline,
        "detail": detail,
        "started": incident.started_at.isoformat(),
    }


def render(page: StatusPage, now: datetime) -> str:
    # No request: no context processor runs, so nothing reads a session or a user.
    return render_to_string("scans/status_page.html", page_context(page, now))


# --- the cache --------------------------------------------------------------------------------


def _key(slug: str) -> str:
    return f"scans:status-page:v1:{slug}"


def _build(slug: str, now: datetime) -> dict:
    page = (
        StatusPage.dangerously_unscoped.filter(  # public: the slug is the whole credential
            slug=slug, enabled=True
        )
        .select_related("team")
        .first()
    )
    return {"built_at": now, "html": render(page, now) if page else None}


# Rebuilt by one request while the others are served the previous copy (common/stale_cache.py);
# through a cache outage each request builds from the database, and never serves an old copy.
_CACHE = StaleWhileRebuild(max_age_s=CACHE_S, lock_s=BUILD_LOCK_S, cold_wait_steps=1, keep_last=False)


def cached_page(slug: str) -> str | None:
    """The page's HTML (None: no such page, or it is off), from the shared cache when fresh;
    else one request rebuilds it while the others are served the previous copy."""
    try:
        return _CACHE.get(_key(slug), lambda now: _build(slug, now))["html"]
    except Unavailable as exc:
        raise StatusPageUnavailable from exc
