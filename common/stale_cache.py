"""One cached entry per key, rebuilt by one request while the others are served the previous copy.

An entry is a dict that stores the time it was built at (`built_at`). Past `max_age_s`, the first
request takes the build lock and rebuilds it, and every other request meanwhile is served the
previous copy at once (nobody waits for a build); a copy is never served more than
`stale_grace_s` past its limit, whatever the cache backend's own expiry does. Only a cache with
no copy at all makes a request wait for the builder (briefly, then it builds one itself).

When the cache cannot be reached (Redis down, or the database behind the database cache), each
request builds from the database. With `keep_last`, each process also remembers the last entry
it built or read: it serves that one while it is fresh (one build at a time per process), and
when the database cannot answer either, whatever its age (the entry carries its build time).
With nothing to serve, `get` raises `Unavailable` (the caller answers 503, never a 500).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeGuard

from django.core.cache import cache
from django.db import Error as DatabaseError
from django.utils import timezone

from common.cache_outage import CACHE_ERRORS, warn

Entry = dict[str, Any]
Build = Callable[[datetime], Entry]

# Entries are stored a little longer than they may be served: `fresh` decides, from the time
# each one was built at, so the backend's own expiry never cuts in early.
CACHE_SLACK_S = 5
WAIT_STEP_S = 0.05  # with no copy at all, a request looks again this often for the builder's


class Unavailable(Exception):
    """Neither the cache, nor the database, nor this process's memory has an entry to serve."""


def fresh(entry: object, max_age_s: float, now: datetime) -> TypeGuard[Entry]:
    return (isinstance(entry, dict)
            and timedelta(0) <= now - entry["built_at"] <= timedelta(seconds=max_age_s))


# Per process: the newest entry this process built or read, by full cache key (prefix included).
_last_entries: dict[str, Entry] = {}
_build_lock = threading.Lock()


@dataclass(frozen=True)
class StaleWhileRebuild:
    max_age_s: float
    lock_s: float = 30  # one builder at a time per key
    cold_wait_steps: int = 100  # with no copy at all: how many times a request looks again
    keep_last: bool = True  # serve this process's last entry through a cache outage

    @property
    def stale_grace_s(self) -> float:
        return self.lock_s

    def get(self, key: str, build: Build) -> Entry:
        """The entry under `key`: from the cache when it is reachable, else without it."""
        try:
            entry = self._from_cache(key, build)
        except CACHE_ERRORS as exc:
            warn(f"{key} served without the cache", exc)
            entry = self._without_cache(key, build)
        if self.keep_last:
            _last_entries[cache.make_key(key)] = entry
        return entry

    def store(self, key: str, entry: Entry) -> None:
        # Kept past its limit so that it can stand in while one request rebuilds it.
        cache.set(key, entry, timeout=self.max_age_s + self.stale_grace_s + CACHE_SLACK_S)

    def _from_cache(self, key: str, build: Build) -> Entry:
        now = timezone.now()
        entry = cache.get(key)
        if fresh(entry, self.max_age_s, now):
            return entry
        lock = f"{key}:lock"
        if cache.add(lock, 1, timeout=self.lock_s):
            try:
                entry = build(now)
                self.store(key, entry)
                return entry
            finally:
                cache.delete(lock)
        if fresh(entry, self.max_age_s + self.stale_grace_s, now):
            return entry  # another request is rebuilding it: the previous copy, at once
        for _ in range(self.cold_wait_steps):  # no copy at all (a cold cache): the builder's
            time.sleep(WAIT_STEP_S)
            entry = cache.get(key)
            if fresh(entry, self.max_age_s, timezone.now()):
                return entry
        return build(timezone.now())

    def _without_cache(self, key: str, build: Build) -> Entry:
        if not self.keep_last:
            try:
                return build(timezone.now())
            except DatabaseError as exc:
                raise Unavailable(key) from exc
        with _build_lock:  # while the cache cannot coordinate builders: one per process
            last = _last_entries.get(cache.make_key(key))
            if fresh(last, self.max_age_s, timezone.now()):
                return last
            try:
                return build(timezone.now())
            except DatabaseError as exc:
                if last is None:
                    raise Unavailable(key) from exc
                warn(f"{key}: the database is unreachable too; serving the copy of {last['built_at']}", exc)
                return last
