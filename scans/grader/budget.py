"""A stream budget shared by the scans of one process: about `streams` requests in flight.

Why: the site's worker runs many scans at once, one per thread, each on its own event loop
(DECISIONS.md). Scans that start together stay in step, so their top levels (16 streams each
by default) arrive together; sixteen of them are 256 streams decoded by one process, more than
one core's worth of work, and every level running then is marked client-bound. A level takes
its concurrency from the budget before it starts and gives it back when it ends, so top levels
of different scans take turns instead of colliding. A level waits *before* its measurement
starts: the wait never shows in its latencies.

Waiters are served first come, first served (a level of 16 is never starved by a stream of
small levels); a level larger than the budget waits for the whole budget and runs alone (with
its full concurrency). A scan's waits are bounded (`scan_wait_s`): a level that runs out of it starts
without a share, so a neighbour's long level (say, 256 streams against a server that hangs)
can delay a scan but never hold it past its deadline; the loop-lag rule then judges it.
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
    """`streams`: the budget. `scan_wait_s`: the most one scan waits for it, over all its
    levels (the runner keeps count); None: no bound."""

    def __init__(self, streams: int, scan_wait_s: float | None = None) -> None:
        if streams < 1:
            raise ValueError("a stream budget needs at least one stream")
        self.streams = streams
        self.scan_wait_s = scan_wait_s
        self._free = streams
        self._lock = threading.Lock()
        self._waiting: deque[_Waiter] = deque()

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self.streams - self._free

    @contextlib.asynccontextmanager
    async def level(self, concurrency: int, max_wait_s: float | None = None) -> AsyncIterator[bool]:
        """Hold `concurrency` streams (at most the whole budget) for the body of the block,
        after waiting at most `max_wait_s`. Yields whether the streams were granted (False:
        the wait ran out and the level runs without a share)."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(min(max(1, concurrency), self.streams), loop, loop.create_future())
        with self._lock:
            self._waiting.append(waiter)
            self._grant()
        try:
            await asyncio.wait_for(waiter.granted, max_wait_s)
            granted = True
        except (asyncio.CancelledError, TimeoutError) as exc:
            with self._lock:
                if waiter in self._waiting:
                    self._waiting.remove(waiter)  # never granted
                    granted = False
                    self._grant()  # the next in line may fit now
                else:
                    granted = True  # granted as the wait ended: ours to give back
            if isinstance(exc, asyncio.CancelledError):
                if granted:
                    self._give_back(waiter.streams)
                raise
        try:
            yield granted
        finally:
            if granted:
                self._give_back(waiter.streams)

    def _give_back(self, streams: int) -> None:
        with self._lock:
            self._free += streams
            self._grant()

    def _grant(self) -> None:
        """Wake waiters in arrival order while the first one fits (called under the lock)."""
        while self._waiting and self._waiting[0].streams <= self._free:
            waiter = self._waiting.popleft()
            try:
                waiter.loop.call_soon_threadsafe(_resolve, waiter.granted)
            except RuntimeError:  # its loop is closed: nobody will use or return these
                continue
            self._free -= waiter.streams


def _resolve(granted: asyncio.Future) -> None:
    if not granted.done():  # a cancelled waiter gives its streams back itself
        granted.set_result(None)
