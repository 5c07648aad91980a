"""The cached public snapshot behind /v1/slo, /v1/stats and /benchmarks. Every figure comes from
`benchmarks.public.snapshot.build_snapshot`:

- `/v1/slo` and `/v1/stats` read the live snapshot, rebuilt at request time when the copy in the
  cache is older than LIVE_CACHE_S;
- `/benchmarks` reads the page snapshot, rebuilt every REFRESH_EVERY_S by the Celery task
  `benchmarks.tasks.refresh_public_benchmarks` (or `manage.py refresh_benchmarks`) and kept
  for PAGE_CACHE_S, so visitors are served the stored rendering.

Both are kept by the one stale-while-rebuild cache (common/stale_cache.py): past its limit, one
request rebuilds a copy while the others are served the previous one; through a cache outage
each process serves what it last built or read, and with neither the cache nor the database,
its last copy whatever its age (the page and the JSON carry the time it was built), or, having
none, a 503 with Retry-After: never a 500.
"""

from __future__ import annotations

import json
from datetime import datetime

from django.utils import timezone

from benchmarks.public import snapshot as snap
from benchmarks.public.page import render_page
from common.stale_cache import StaleWhileRebuild, Unavailable

PAGE_CACHE_S = 300  # the page snapshot is kept this long in the site's cache


PAGE_MAX_AGE_S = 300  # and browsers / shared caches may keep the page this long


REFRESH_EVERY_S = 240  # the periodic rebuild, a little under PAGE_CACHE_S so it never lapses


LIVE_CACHE_S = 15  # /v1/slo and /v1/stats: computed at request time, reused this long at most


LIVE_MAX_AGE_S = 15


# The version is the snapshot's shape: a copy cached by an older release (no `no_host` count in
# its windows) is never read by this one, whose page would need it.
PAGE_KEY = "benchmarks:public:page:v2"


LIVE_KEY = "benchmarks:public:live:v2"


# Neither the cache, nor the database, nor this process's memory has a snapshot to serve.
SnapshotUnavailable = Unavailable


UNAVAILABLE_RETRY_AFTER_S = 30  # a 503 (no snapshot at all) says to come back after this


_PAGE = StaleWhileRebuild(max_age_s=PAGE_CACHE_S)
_LIVE = StaleWhileRebuild(max_age_s=LIVE_CACHE_S)


def _dumps(payload: dict) -> bytes:
    return json.dumps(payload).encode()


def build_live_entry(now: datetime) -> dict:
    snapshot = snap.build_snapshot(now)
    return {"built_at": now, "snapshot": snapshot,
            "slo": _dumps(snap.slo_payload(snapshot)), "stats": _dumps(snap.stats_payload(snapshot))}


def build_page_entry(now: datetime) -> dict:
    snapshot = snap.build_snapshot(now)
    return {"built_at": now, "snapshot": snapshot, "html": render_page(snapshot)}


def live_entry() -> dict:
    return _LIVE.get(LIVE_KEY, build_live_entry)


def page_entry() -> dict:
    return _PAGE.get(PAGE_KEY, build_page_entry)


def refresh(now: datetime | None = None) -> dict:
    """Rebuild the page snapshot (and the live one, from the same build) at once."""
    now = now or timezone.now()
    snapshot = snap.build_snapshot(now)
    page = {"built_at": now, "snapshot": snapshot, "html": render_page(snapshot)}
    live = {"built_at": now, "snapshot": snapshot,
            "slo": _dumps(snap.slo_payload(snapshot)), "stats": _dumps(snap.stats_payload(snapshot))}
    _PAGE.store(PAGE_KEY, page)
    _LIVE.store(LIVE_KEY, live)
    return snapshot
