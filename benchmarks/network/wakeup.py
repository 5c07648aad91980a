"""Wake-ups for hosts waiting for work (the waiting lease, benchmarks/network/services.py).

An assignment pass that gave jobs to hosts publishes their ids on the site's Redis channel
(`channel`), once per pass and after its transaction commits; nothing is published for a
heartbeat or for a pass that assigned nothing. Each web process holds one subscription (a
daemon thread, started by the first wait) and wakes its waiting calls for those hosts. A
woken call looks in the database, which alone says whether it has a job, so a wake-up meant
for another site sharing the Redis server, or a repeated one, costs one query and is never
wrong.

Two ways to wait, the same looks and wake-ups: `wait` parks the calling thread (the web
process's thread workers), `wait_on_loop` awaits on an event loop, holding no thread between
looks (the host-call server, benchmarks/network/host_call_server.py).

While the cache is not Redis or Redis is unreachable, waiting calls look every POLL_S instead:
slower, never wrong. When the subscription (re)connects, every waiting call looks once, so a
message lost while it was down costs nothing either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, TypeVar

import redis
from django.conf import settings

CHANNEL_PREFIX = "tokvera:benchmarks:host-work"
POLL_S = 1.0  # how often a waiting call looks in the database while no wake-up can come
_RECONNECT_S = 1.0

log = logging.getLogger(__name__)
T = TypeVar("T")


def _redis_url() -> str | None:
    config = settings.CACHES["default"]
    if not config.get("BACKEND", "").endswith("RedisCache"):
        return None
    location = config.get("LOCATION")
    return location[0] if isinstance(location, list | tuple) else location


def channel(url: str) -> str:
    """The wake-up channel of the site whose cache is at `url`. Redis's channels belong to the
    whole server, not to a database: named by the cache's database number, sites (or test runs)
    sharing a server on different databases never hear each other's wake-ups."""
    return f"{CHANNEL_PREFIX}:{redis.connection.parse_url(url).get('db', 0)}"


def announce(host_ids: Iterable[int]) -> None:
    """Tell every web process that these hosts were given work (call after the commit)."""
    ids = sorted(set(host_ids))
    url = _redis_url()
    if not ids or url is None:
        return
    try:
        _publisher(url).publish(channel(url), ",".join(map(str, ids)))
    except redis.RedisError as exc:  # the waiting calls still find the jobs within POLL_S
        log.warning("host wake-up not published (%s: %s)", type(exc).__name__, exc)


_publishers: dict[str, redis.Redis] = {}


def _publisher(url: str) -> redis.Redis:
    client = _publishers.get(url)
    if client is None:
        client = _publishers[url] = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    return client


class Wakeable(Protocol):
    """What a waiting call gives the listener to wake it: a thread's Event, or a LoopWaiter."""

    def set(self) -> None: ...


class LoopWaiter:
    """A call waiting on an event loop, woken from the listener's thread."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def set(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody to wake
            self.loop.call_soon_threadsafe(self.event.set)


class _Listener:
    """One subscription per process; hands wake-ups to the waiting calls of this process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.connected = threading.Event()
        self._lock = threading.Lock()
        self._waiting: dict[int, set[Wakeable]] = {}
        threading.Thread(target=self._run, name="host-work-listener", daemon=True).start()

    def add(self, host_id: int, event: Wakeable) -> None:
        with self._lock:
            self._waiting.setdefault(host_id, set()).add(event)

    def remove(self, host_id: int, event: Wakeable) -> None:
        with self._lock:
            events = self._waiting.get(host_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[host_id]

    def _wake(self, host_ids: Iterable[int] | None) -> None:
        with self._lock:
            if host_ids is None:
                events = [e for group in self._waiting.values() for e in group]
            else:
                events = [e for i in host_ids for e in self._waiting.get(i, ())]
        for event in events:
            event.set()

    def _run(self) -> None:
        while True:
            try:
                client = redis.Redis.from_url(self.url, socket_connect_timeout=1, health_check_interval=30)
                pubsub = client.pubsub()
                pubsub.subscribe(channel(self.url))
                while True:
                    message = pubsub.get_message(timeout=30)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        self.connected.set()
                        self._wake(None)  # anything published while we were away
                    elif message["type"] == "message":
                        self._wake(_ids(message["data"]))
            except Exception as exc:  # noqa: BLE001 - any failure: poll, then reconnect
                if self.connected.is_set():
                    log.warning("host wake-ups lost (%s: %s); waiting calls poll", type(exc).__name__, exc)
                self.connected.clear()
                self._wake(None)
                time.sleep(_RECONNECT_S)


def _ids(data: bytes) -> list[int]:
    out = []
    for part in data.split(b","):
        if part.strip().isdigit():
            out.append(int(part))
    return out


_listeners: dict[str, _Listener] = {}
_listeners_lock = threading.Lock()


def _listener() -> _Listener | None:
    url = _redis_url()
    if url is None:
        return None
    with _listeners_lock:
        listener = _listeners.get(url)
        if listener is None:
            listener = _listeners[url] = _Listener(url)
    return listener


_waiting_slots: dict[int, threading.BoundedSemaphore] = {}


def _slots(limit: int) -> threading.BoundedSemaphore:
    with _listeners_lock:
        slots = _waiting_slots.get(limit)
        if slots is None:
            slots = _waiting_slots[limit] = threading.BoundedSemaphore(limit)
    return slots


def wait(host_id: int, seconds: float, look: Callable[[], T | None], most: int) -> T | None:
    """Call `look` until it finds something or `seconds` have passed: once now, then whenever
    a pass announces work for this host (or every POLL_S while no announcement can come).

    At most `most` calls of this process wait at once; a call beyond them looks once and
    returns: under thread workers each waiting call holds a thread, and waiting calls must
    never take the threads every other call needs (the host then polls)."""
    slots = _slots(most)
    if not slots.acquire(blocking=False):
        return look()
    try:
        return _wait(host_id, seconds, look)
    finally:
        slots.release()


def _pause(deadline: float, listener: _Listener | None) -> float | None:
    """How long a waiting call waits before its next look (None: its wait is over): until its
    deadline, or POLL_S while no announcement can come."""
    left = deadline - time.monotonic()
    if left <= 0:
        return None
    live = listener is not None and listener.connected.is_set()
    return left if live else min(left, POLL_S)


def _wait(host_id: int, seconds: float, look: Callable[[], T | None]) -> T | None:
    deadline = time.monotonic() + seconds
    listener = _listener()
    event = threading.Event()
    if listener is not None:
        listener.add(host_id, event)  # before looking: an announcement after the look wakes us
    try:
        while True:
            found = look()
            if found is not None:
                return found
            if (pause := _pause(deadline, listener)) is None:
                return None
            event.wait(pause)
            event.clear()
    finally:
        if listener is not None:
            listener.remove(host_id, event)


async def wait_on_loop(host_id: int, seconds: float,
                       look: Callable[[], Awaitable[T | None]]) -> T | None:
    """`wait`'s looks and wake-ups for a caller on an event loop: `look` (awaited; it runs the
    query on a thread of the caller's) once now, then whenever a pass announces work for this
    host or every POLL_S while no announcement can come, until it finds something or
    `seconds` have passed. Between looks it holds no thread and no database connection; a
    caller cancelled while it waits leaves nothing behind. The caller keeps its own limit on
    calls waiting at once (`wait`'s `most`)."""
    deadline = time.monotonic() + seconds
    subscription = _listener()
    waiter = LoopWaiter()
    if subscription is not None:
        subscription.add(host_id, waiter)  # before looking: an announcement after the look wakes us
    try:
        while True:
            found = await look()
            if found is not None:
                return found
            if (pause := _pause(deadline, subscription)) is None:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.event.wait(), pause)
            waiter.event.clear()
    finally:
        if subscription is not None:
            subscription.remove(host_id, waiter)
