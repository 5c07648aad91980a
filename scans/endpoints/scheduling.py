"""When an endpoint is scanned, and from where: the only place that computes `next_scan_at`.

A location is a Celery queue, `scans.<location>`; a worker started with
`celery -A tokvera_site worker -Q scans.<location>` on any machine serves it. Each location an
endpoint chooses gets its own scan per schedule slot (dispatch.enqueue_due).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from scans.models import Endpoint, EndpointMode

QUEUE_PREFIX = "scans."
LOCATION_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


class UnknownLocation(ValueError):
    pass


def next_slot(after: datetime, interval_minutes: int) -> datetime:
    """The next schedule slot: `after` plus the interval, truncated to the minute."""
    return (after + timedelta(minutes=interval_minutes)).replace(second=0, microsecond=0)


def apply_schedule(endpoint: Endpoint, old_interval: int | None, now: datetime | None = None) -> None:
    """Keep next_scan_at consistent with the endpoint (not saved here): none unless enabled
    and scheduled; a new one's first scan at the next beat; a shorter interval brings the next
    scan forward. `old_interval` is None for an endpoint being created."""
    now = now or timezone.now()
    if not endpoint.enabled or endpoint.mode != EndpointMode.SCHEDULED:
        endpoint.next_scan_at = None
    elif endpoint.next_scan_at is None:
        endpoint.next_scan_at = now
    elif old_interval is not None and endpoint.interval_minutes != old_interval:
        endpoint.next_scan_at = min(endpoint.next_scan_at,
                                    now + timedelta(minutes=endpoint.interval_minutes))


def configured_locations() -> list[str]:
    return list(settings.SCAN_LOCATIONS)


def clean_locations(names: object) -> list[str]:  # whatever a form or a body gave
    """An endpoint's chosen locations, checked against SCAN_LOCATIONS (UnknownLocation with one
    line otherwise); duplicates dropped, order kept. An empty choice means the default."""
    if names is None:
        return []
    if isinstance(names, str):
        names = [part for part in re.split(r"[\s,]+", names) if part]
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise UnknownLocation("locations must be a list of location names")
    known = configured_locations()
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UnknownLocation(f"unknown location {unknown[0]!r}; this site scans from: "
                              f"{', '.join(known)}")
    return list(dict.fromkeys(names))


def locations_of(endpoint: Endpoint) -> list[str]:
    """Where the endpoint's scheduled scans run: its choice, else the site's own location."""
    return list(endpoint.locations or locations_of_default())


def locations_of_default() -> list[str]:
    """Where an endpoint that chose no location is scanned and probed from."""
    return [settings.SCAN_DEFAULT_LOCATION]


def queue_for(location: str) -> str:
    if not LOCATION_NAME.match(location):
        raise UnknownLocation(f"{location!r} is not a location name (a-z, 0-9 and -)")
    return QUEUE_PREFIX + location


def location_of_queue(queue: str | None) -> str | None:
    """The location a scan queue serves; None for any other queue name."""
    if queue and queue.startswith(QUEUE_PREFIX):
        return queue[len(QUEUE_PREFIX):]
    return None
