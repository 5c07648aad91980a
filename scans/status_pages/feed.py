"""A public status page's Atom feed (/status/<slug>/feed.atom): one entry per incident of a shown
endpoint (scans/status_pages/incidents.py), per public update of the team's incidents
(public_updates.py), and per current or next occurrence of a maintenance
window covering one, newest first, under the names the page shows (never the endpoint's own
name, URL or model, nor the window's name: the team's wording, not chosen for the page).

Written by Django's feed generator (the syndication framework's Atom1Feed) with absolute links
to SITE_URL, never to the request's host: the feed is cached under its slug alone, like the page
(rendering.py), and dropped with it when the page's settings change.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db.models import F
from django.utils.feedgenerator import Atom1Feed

from accounts.validators import one_line
from common.stale_cache import StaleWhileRebuild, Unavailable
from scans import maintenance
from scans.history.slo_wording import duration_text
from scans.models import StatusPage, StatusPageEndpoint
from scans.status_pages import public_updates
from scans.status_pages.availability import DAYS
from scans.status_pages.incidents import incidents
from scans.status_pages.rendering import BUILD_LOCK_S, CACHE_S, StatusPageUnavailable, feed_key

__all__ = ["cached_feed", "feed_xml"]

MAX_ENTRIES = 100
MAINTENANCE_AHEAD_DAYS = 14  # as far ahead as the dashboard lists upcoming windows
_IDS = uuid.uuid5(uuid.NAMESPACE_URL, "tokvera:status-page-feed")


class _Item(NamedTuple):
    title: str
    description: str
    published: datetime
    updated: datetime
    unique_id: str


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%-d %b %Y, %H:%M UTC")


def _entry_id(*parts: object) -> str:
    """A stable id that names nothing: a name-based UUID of the page's own row ids and times."""
    return f"urn:uuid:{uuid.uuid5(_IDS, ':'.join(str(p) for p in parts))}"


def feed_xml(page: StatusPage, now: datetime) -> str:
    page_url = f"{settings.SITE_URL}/status/{page.slug}/"
    rows = list(
        StatusPageEndpoint.objects.for_team(page.team_id)
        .filter(status_page=page)
        .select_related("endpoint")
        .annotate(team_of_endpoint=F("endpoint__team_id"))
    )
    rows = [r for r in rows if r.team_of_endpoint == page.team_id]
    names = {r.endpoint_id: one_line(r.display_name) for r in rows}
    endpoints = [r.endpoint for r in rows]
    items: list[_Item] = []
    for endpoint_id, found in incidents(endpoints, now - timedelta(days=DAYS), now).items():
        name = names[endpoint_id]
        for incident in found:
            lasted = duration_text(incident.duration_s(now))
            if incident.ongoing:
                title = f"{name} is down"
                text = f"{name} is down since {_when(incident.started_at)} (ongoing, {lasted} so far)."
            else:
                title = f"{name} was down for {lasted}"
                text = (f"{name} was down from {_when(incident.started_at)} to "
                        f"{_when(incident.ended_at or now)} ({lasted}).")
            items.append(_Item(
                title, text, incident.started_at, incident.ended_at or incident.started_at,
                _entry_id(page.pk, "incident", endpoint_id, incident.started_at.isoformat())))
    for public in public_updates.for_page(page, names, now - timedelta(days=DAYS)):
        services = ", ".join(public.services) or "All services"
        for update in public.updates:
            items.append(_Item(
                f"{update.status}: {services}", f"{update.status} ({_when(update.at)}): {update.text}",
                update.at, update.at,
                _entry_id(page.pk, "update", public.incident_id, update.at.isoformat())))
    shown = set(names)
    for window in maintenance.windows_of(page.team_id, shown) if shown else []:
        covered = [names[window.endpoint_id]] if window.endpoint_id else list(names.values())
        ahead = maintenance.occurrences(window, now, now + timedelta(days=MAINTENANCE_AHEAD_DAYS))
        if not ahead:
            continue
        nearest = ahead[0]
        state = "in progress" if nearest.covers(now) else "planned"
        items.append(_Item(
            f"Maintenance {state}: {', '.join(covered)}",
            f"Maintenance {state} for {', '.join(covered)} from {_when(nearest.start)} to "
            f"{_when(nearest.end)}.",
            window.created_at, window.created_at,
            _entry_id(page.pk, "maintenance", window.pk, nearest.start.isoformat())))
    items.sort(key=lambda item: item.updated, reverse=True)
    title = one_line(page.title)
    feed = Atom1Feed(title=title, link=page_url, description=f"Incidents and maintenance: {title}",
                     feed_url=f"{page_url}feed.atom", id=_entry_id(page.pk, "feed"), language="en")
    for item in items[:MAX_ENTRIES]:
        feed.add_item(title=item.title, link=page_url, description=item.description,
                      unique_id=item.unique_id, pubdate=item.published, updateddate=item.updated)
    return feed.writeString("utf-8")


def _build(slug: str, now: datetime) -> dict:
    page = (StatusPage.dangerously_unscoped  # public: the slug is the whole credential
            .filter(slug=slug, enabled=True).first())
    return {"built_at": now, "xml": feed_xml(page, now) if page else None}


_CACHE = StaleWhileRebuild(max_age_s=CACHE_S, lock_s=BUILD_LOCK_S, cold_wait_steps=1, keep_last=False)


def cached_feed(slug: str) -> str | None:
    """The feed's XML (None: no such page, or it is off), cached as the page is."""
    try:
        return _CACHE.get(feed_key(slug), lambda now: _build(slug, now))["xml"]
    except Unavailable as exc:
        raise StatusPageUnavailable from exc
