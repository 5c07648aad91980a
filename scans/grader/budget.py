"""A stream budget shared by the scans of one process: at most `streams` requests in flight.

Why: the site's worker runs many scans at once, one per thread, each on its own event loop
(DECISIONS.md). Scans that start together stay in step, so their top levels (16 streams each
by default) arrive together; sixteen of them are 256 streams decoded by one process, more than
one core's worth of work, and every level running then is marked client-bound. A level takes
its concurrency from the budget before it starts and gives it back when it ends, so top levels
of different scans take turns instead of colliding. A level waits *before* its measurement
starts: the wait never shows in its latencies.

Waiters are served first come, first served (a level of 16 is never starved by a stream of
small levels); a level larger than the budget waits for the whole budget and runs alone.
Thread-safe and loop-agnostic: each waiter is woken on its own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Waiter:
    streams: int
    loop: asyncio.AbstractEventLoop
    granted: asyncio.Future = field(repr=False)


class StreamBudget:
    def __init__(self, streams: int) -> None:
        if streams < 1:
            raise ValueError("a stream budget needs at least one stream")
        self.streams = streams
        self._free = streams
        self._lock = threading.Lock()
        self._waiting: deque[_Waiter] = deque()

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self.streams - self._free

    @contextlib.asynccontextmanager
    async def level(self, concurrency: int) -> AsyncIterator[None]:
        """Hold `concurrency` streams (at most the whole budget) for the body of the block."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(min(max(1, concurrency), self.streams), loop, loop.create_future())
        with self._lock:
            self._waiting.append(waiter)
            self._grant()
        try:
            await waiter.granted
        except asyncio.CancelledError:
            with self._lock:
                if waiter in self._waiting:
                    self._waiting.remove(waiter)  # never granted
                else:
                    self._free += waiter.streams  # granted as it was cancelled
                self._grant()
            raise
        try:
            yield
        finally:
            with self._lock:
                self._free += waiter.streams
                self._grant()

    def _grant(self) -> None:
        """Wake waiters in arrival order while the first one fits (called under the lock)."""
        while self._waiting and self._waiting[0].streams <= self._free:
            waiter = self._waiting.popleft()
            self._free -= waiter.streams
            waiter.loop.call_soon_threadsafe(_resolve, waiter.granted)


def _resolve(granted: asyncio.Future) -> None:
    if not granted.done():  # a cancelled waiter gives its streams back itself
        granted.set_result(None)
