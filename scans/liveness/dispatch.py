"""The beat's probe pass: which endpoints are due a probe, and which worker queue gets them.

Claiming is one UPDATE … RETURNING that moves each due endpoint's next_probe_at on by its
interval (on its own cadence, not the beat's), with SKIP LOCKED, so two beats never probe an
endpoint twice for one slot. A claimed endpoint is then left out of this round when its origin
has a graded scan running (a probe must not land in the scan's load, and the scan tells about
the endpoint meanwhile) or a maintenance window pauses its scans. The rest go, in batches of
BATCH, to each of their locations' queue (scans.<location>): every location probes for itself.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

from celery import current_app as celery_app  # the site's app (tokvera_site/celery.py)
from django.db import connection
from django.utils import timezone

from scans import maintenance
from scans.endpoints import scheduling
from scans.models import Endpoint, OriginLock
from scans.origins import origin_of

log = logging.getLogger(__name__)

__all__ = ["BATCH", "RUN_PROBES_TASK", "dispatch_due"]

RUN_PROBES_TASK = "scans.tasks.run_probes"
#: Endpoints per task: one task probes them all at once on one event loop.
BATCH = 500
#: The most endpoints one pass claims (the rest are due at the next pass).
MOST_PER_PASS = 50_000


def _claim(now: datetime) -> list[Endpoint]:
    # System-wide beat step: every team's due endpoints (no team is known here).
    sql = """
        UPDATE scans_endpoint e SET next_probe_at = CASE
            WHEN e.next_probe_at + make_interval(secs => e.probe_interval_s) > %(now)s
            THEN e.next_probe_at + make_interval(secs => e.probe_interval_s)
            ELSE %(now)s + make_interval(secs => e.probe_interval_s) END
        WHERE e.id IN (
            SELECT id FROM scans_endpoint
            WHERE enabled AND mode = 'scheduled'
              AND (next_probe_at IS NULL OR next_probe_at <= %(now)s)
            ORDER BY next_probe_at NULLS FIRST
            LIMIT %(most)s
            FOR UPDATE SKIP LOCKED)
        RETURNING e.id, e.team_id, e.base_url, e.locations
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, {"now": now, "most": MOST_PER_PASS})
        # Unsaved instances holding just what the pass reads (no second query).
        # Django reads jsonb as text and decodes it itself; a raw cursor gets the text.
        return [Endpoint(pk=pk, team_id=team, base_url=url,
                         locations=list((json.loads(locs) if isinstance(locs, str) else locs)
                                        or []))
                for pk, team, url, locs in cursor.fetchall()]


def dispatch_due(now: datetime | None = None) -> int:
    """Claim the due endpoints and send their probes; returns how many probes were sent."""
    now = now or timezone.now()
    due = _claim(now)
    if not due:
        return 0
    busy = set(OriginLock.objects.filter(expires_at__gt=now).values_list("origin", flat=True))
    paused = {pk for pk, occurrence in maintenance.covering_now(due, now).items()
              if occurrence.window.pause_scans}
    by_location: dict[str, list[int]] = {}
    for endpoint in due:
        if endpoint.pk in paused or origin_of(endpoint.base_url) in busy:
            continue
        for location in scheduling.locations_of(endpoint):
            by_location.setdefault(location, []).append(endpoint.pk)
    sent = 0
    for location, ids in by_location.items():
        queue = scheduling.queue_for(location)
        for start in range(0, len(ids), BATCH):
            batch = ids[start:start + BATCH]
            # By name: the task module imports this one.
            celery_app.tasks[RUN_PROBES_TASK].apply_async((batch,), queue=queue,
                                                          routing_key=queue)
            sent += len(batch)
    return sent
