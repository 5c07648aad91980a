"""The cached public snapshot behind /v1/slo, /v1/stats and /benchmarks. Every figure comes from
`benchmarks.snapshot.build_snapshot`:

- `/v1/slo` and `/v1/stats` read the live snapshot, rebuilt at request time when the copy in the
  cache is older than LIVE_CACHE_S;
- `/benchmarks` reads the page snapshot, rebuilt every REFRESH_EVERY_S by the Celery task
  `benchmarks.tasks.refresh_public_benchmarks` (or `manage.py refresh_benchmarks`) and kept
  for PAGE_CACHE_S, so visitors are served the stored rendering.

A cached copy stores the coordinator time it was built at. Past its limit, the first request
takes the build lock and rebuilds it, and every other request meanwhile is served the previous
copy at once (nobody waits for a build); a copy is never served more than STALE_GRACE_S past its
limit, whatever the cache backend's own expiry does. Only a cache with no copy at all makes a
request wait for the builder (briefly, then it builds one itself).

When the cache cannot be reached (Redis down, or the database behind the database cache), each
process falls back on its own memory: it serves the last entry it built or read while that one
is fresh, else builds one from the database (one build at a time per process). When the
database cannot answer either, it serves its last entry whatever its age (the page and the JSON
carry the time it was built), or, having none, answers 503 with Retry-After: never a 500.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta
from typing import TypeGuard

from django.core.cache import cache
from django.db import Error as DatabaseError
from django.utils import timezone

from benchmarks import snapshot as snap
from benchmarks.public_page import render_page
from tokvera_site.cache_outage import CACHE_ERRORS, warn

PAGE_CACHE_S = 300  # the page snapshot is kept this long in the site's cache


PAGE_MAX_AGE_S = 300  # and browsers / shared caches may keep the page this long


REFRESH_EVERY_S = 240  # the periodic rebuild, a little under PAGE_CACHE_S so it never lapses


LIVE_CACHE_S = 15  # /v1/slo and /v1/stats: computed at request time, reused this long at most


LIVE_MAX_AGE_S = 15


# The version is the snapshot's shape: a copy cached by an older release (no `no_host` count in
# its windows) is never read by this one, whose page would need it.
PAGE_KEY = "benchmarks:public:page:v2"


LIVE_KEY = "benchmarks:public:live:v2"


BUILD_LOCK_S = 30  # one builder at a time per entry; the others are served the previous copy


# A copy past its limit is served while one request rebuilds it, for at most this long.
STALE_GRACE_S = BUILD_LOCK_S


BUILD_WAIT_STEPS = 100  # with no copy at all: how many times a request looks again (every 50 ms)


# Entries are stored a little longer than they may be served: _fresh() decides, from the
# coordinator time each one was built at, so the backend's own expiry never cuts in early.
_CACHE_SLACK_S = 5


def _fresh(entry: dict | None, max_age_s: int, now: datetime) -> TypeGuard[dict]:
    return entry is not None and timedelta(0) <= now - entry["built_at"] <= timedelta(seconds=max_age_s)


UNAVAILABLE_RETRY_AFTER_S = 30  # a 503 (no snapshot at all) says to come back after this


class SnapshotUnavailable(Exception):
    """Neither the cache, nor the database, nor this process's memory has a snapshot to serve."""


# Per process: the newest entry this process built or read, by full cache key (prefix included).
_last_entries: dict[str, dict] = {}


_build_lock = threading.Lock()


def _entry(key: str, max_age_s: int, build) -> dict:
    """The entry under `key`: from the cache when it is reachable, else from this process."""
    try:
        entry = _entry_from_cache(key, max_age_s, build)
    except CACHE_ERRORS as exc:
        warn(f"{key} served without the cache", exc)
        entry = _entry_without_cache(key, max_age_s, build)
    _last_entries[cache.make_key(key)] = entry
    return entry


def _store(key: str, entry: dict, max_age_s: int) -> None:
    # Kept past its limit so that it can stand in while one request rebuilds it.
    cache.set(key, entry, timeout=max_age_s + STALE_GRACE_S + _CACHE_SLACK_S)


def _entry_from_cache(key: str, max_age_s: int, build) -> dict:
    """The cached entry under `key` if it is fresh, else a new one built by one request while
    the others are served the previous copy."""
    now = timezone.now()
    entry = cache.get(key)
    if _fresh(entry, max_age_s, now):
        return entry
    lock = f"{key}:lock"
    if cache.add(lock, 1, timeout=BUILD_LOCK_S):
        try:
            entry = build(now)
            _store(key, entry, max_age_s)
            return entry
        finally:
            cache.delete(lock)
    if _fresh(entry, max_age_s + STALE_GRACE_S, now):
        return entry  # another request is rebuilding it: the previous copy, at once
    for _ in range(BUILD_WAIT_STEPS):  # no copy at all (a cold cache): the builder's result
        time.sleep(0.05)
        entry = cache.get(key)
        if _fresh(entry, max_age_s, timezone.now()):
            return entry
    return build(timezone.now())


def _entry_without_cache(key: str, max_age_s: int, build) -> dict:
    with _build_lock:  # while the cache cannot coordinate builders: one per process
        last = _last_entries.get(cache.make_key(key))
        if _fresh(last, max_age_s, timezone.now()):
            return last
        try:
            return build(timezone.now())
        except DatabaseError as exc:
            if last is None:
                raise SnapshotUnavailable from exc
            warn(f"{key}: the database is unreachable too; serving the copy of {last['built_at']}", exc)
            return last


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
    return _entry(LIVE_KEY, LIVE_CACHE_S, build_live_entry)


def page_entry() -> dict:
    return _entry(PAGE_KEY, PAGE_CACHE_S, build_page_entry)


def refresh(now: datetime | None = None) -> dict:
    """Rebuild the page snapshot (and the live one, from the same build) at once."""
    now = now or timezone.now()
    snapshot = snap.build_snapshot(now)
    page = {"built_at": now, "snapshot": snapshot, "html": render_page(snapshot)}
    live = {"built_at": now, "snapshot": snapshot,
            "slo": _dumps(snap.slo_payload(snapshot)), "stats": _dumps(snap.stats_payload(snapshot))}
    _store(PAGE_KEY, page, PAGE_CACHE_S)
    _store(LIVE_KEY, live, LIVE_CACHE_S)
    return snapshot
