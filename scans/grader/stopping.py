"""Stopping a running scan from another thread: the site's cancel button (scans/running/worker.py sets
the event; the runner's `run_scan(stop=…)` watches it). No Django here."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: How often a scan looks at its stop event: a cancelled scan stops within this.
STOP_POLL_S = 0.2


class ScanStopped(Exception):
    """The scan was stopped (its stop event was set) before it finished; nothing it measured
    is kept."""


async def until_stopped(
    coro: Coroutine[Any, Any, T], stop: threading.Event, poll_s: float = STOP_POLL_S
) -> T:
    """Run `coro` as a task; once `stop` is set, cancel it (its requests are abandoned, its
    client closed by its own `async with`) and raise ScanStopped."""
    task = asyncio.ensure_future(coro)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=poll_s)
            if stop.is_set() and not task.done():
                task.cancel()
                break
        return await task
    except asyncio.CancelledError:
        if stop.is_set():
            raise ScanStopped("the scan was stopped before it finished") from None
        raise
    finally:
        if not task.done():  # we were cancelled ourselves
            task.cancel()
