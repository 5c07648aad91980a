"""A team's public status page as a visitor sees it, and its cache.

What a visitor sees is only what the team chose: the page's title, and for each endpoint it
picked, the name it gave it (never the URL, the model, the team or a cause), with

- its state as the site computes it (scans.history.state: up, degraded, down; below floor reads
  "degraded", an error on our side "unknown": no news of the endpoint);
- its latest grade and the load profile it was graded under (scans.endpoints.profile; a down scan has
  no grade, so this is the last graded scan, with its time);
- its availability over the last 90 UTC days (scans/status_pages/availability.py);
- its incidents (scans/status_pages/incidents.py).

The page is rendered without a request (no session, no CSRF token, no form) and cached under
its slug alone for CACHE_S; a change of settings deletes the entry at once.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from django.core.cache import cache
from django.db.models import F
from django.dispatch import receiver
from django.template.loader import render_to_string

from accounts.tenancy import scoped_to_teams
from accounts.validators import one_line
from common.stale_cache import StaleWhileRebuild, Unavailable
from scans.endpoints.profile import plan_columns, profile_of_row
from scans.grader import format_percent
from scans.history import state
from scans.history.slo_wording import duration_text
from scans.models import Endpoint, IncidentUpdate, Scan, ScanStatus, StatusPage, StatusPageEndpoint
from scans.models.incidents import public_update_posted
from scans.status_pages import public_updates
from scans.status_pages.availability import DAYS, DayCell, daily_availability, day_starts
from scans.status_pages.incidents import Incident, incidents

__all__ = ["CACHE_S", "StatusPageUnavailable", "cached_page", "feed_key", "forget", "page_context",
           "render"]

CACHE_S = 60  # the page is rebuilt at most this often (and at once when its settings change)
BUILD_LOCK_S = 30
MAX_INCIDENTS = 50  # the newest shown; older ones are summed in one line
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


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%-d %b %Y, %H:%M UTC")


def _latest_grades(page: StatusPage, endpoints: list[Endpoint]) -> dict[int, dict]:
    """Each endpoint's latest graded scan: grade, provisional, scoring version, time, profile
    label. The
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
        .values("endpoint_id", "grade", "provisional", "scoring_version", "queued_at",
                *plan_columns().keys())
    )
    result = {}
    for row in rows:
        row = {**row, "pf_dataset_name": None}
        result[row["endpoint_id"]] = {
            "grade": row["grade"],
            "provisional": row["provisional"],
            "scoring_version": row["scoring_version"],
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
        "text": format_percent(share, [1.0]) if share is not None else "no data",
        "uncovered_text": (
            f"no data for {duration_text(whole - covered)} of {len(cells)} days"
            if whole - covered >= 60
            else ""
        ),
        "down_text": duration_text(down) if down else "",
        "maintenance_text": (
            f"maintenance for {duration_text(held)} not counted" if held >= 60 else ""
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
    updates = public_updates.for_page(page, names, now - timedelta(days=DAYS))
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
        "updates": [_update_row(incident) for incident in updates[:MAX_INCIDENTS]],
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
        "first_day": day_starts(DAYS, now)[0].strftime("%-d %b"),
        "slug": page.slug,
    }


def _update_row(incident: public_updates.PublicIncident) -> dict:
    return {
        "services": ", ".join(incident.services) or "All services",
        "status": incident.status,
        "ongoing": incident.ongoing,
        "updates": [{"at": _when(u.at), "status": u.status, "text": u.text}
                    for u in incident.updates],
    }


def _incident_row(incident: Incident, name: str, now: datetime) -> dict:
    since = "Down since at least" if incident.before_window else "Down since"
    if incident.ongoing:
        headline = f"{since} {_when(incident.started_at)}"
        detail = f"ongoing, {duration_text(incident.duration_s(now))} so far"
    elif incident.until_maintenance:
        headline = f"Down for {duration_text(incident.duration_s(now))}, then maintenance"
        detail = (f"down from {_when(incident.started_at)} until maintenance began at "
                  f"{_when(incident.ended_at or now)}")
    else:
        headline = f"Recovered after {duration_text(incident.duration_s(now))}"
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


# --- the cache ----------------------------------------------------------------------------------


def forget(*slugs: str) -> None:
    try:
        cache.delete_many([key(s) for s in slugs for key in (_key, feed_key)])
    except Exception as exc:  # noqa: BLE001 - the entry then lapses within CACHE_S
        from common.cache_outage import warn

        warn("status page cache entry not dropped", exc)


def _key(slug: str) -> str:
    return f"scans:status-page:v1:{slug}"


def feed_key(slug: str) -> str:
    """The page's Atom feed (feed.py): under the slug alone too, dropped with the page."""
    return f"scans:status-page-feed:v1:{slug}"


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


@receiver(public_update_posted)
def _forget_pages_of_update(sender: object, *, update: IncidentUpdate, **_: object) -> None:
    """A public incident update shows at once, not after the cached copy lapses."""
    forget(*[page.slug for page, _ in public_updates.pages_for(update)])
