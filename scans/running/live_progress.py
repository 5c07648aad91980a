"""A running scan's live progress and its cancel request, kept in the shared cache.

The worker publishes the grader's progress snapshot (scans.grader.ScanProgress) at
most every PUBLISH_EVERY_S under a key made from the scan's UUID; the scan page's status.json
reads it. The cancel button leaves a flag under a second key that the worker looks at on the
same tick, so a cancelled scan stops within about a second.

Why the cache and not a column on Scan: the figures change every second for every running
scan and are worthless once it ends; a row update per second would churn the table the
heartbeat, the reaper and every page read, while a cache entry costs one SET and expires by
itself. Losing it (a cache outage) only hides the figures: the page falls back to "Running for
N s", and a cancel still lands at the worker's next heartbeat (the scan row's status is the
record; the flag only makes it prompt).

Tenancy: the keys are served only through the scan's tenant-scoped pages (scan_or_404 before
any read), never listed, and hold no secret; the UUID in the key is the scan's own.
"""

from __future__ import annotations

import logging
import uuid

from django.core.cache import cache

from common.cache_outage import CACHE_ERRORS

log = logging.getLogger(__name__)

#: How often the worker publishes progress and looks for a cancel request.
PUBLISH_EVERY_S = 1.0
#: A published snapshot outlives its scan by at most this (a dead worker leaves one behind).
PROGRESS_TTL_S = 120
#: A cancel request waits this long for its worker (longer than a scan's heartbeat interval).
CANCEL_TTL_S = 3600


def _progress_key(scan_uuid: uuid.UUID | str) -> str:
    return f"scan-progress:{scan_uuid}"


def _cancel_key(scan_uuid: uuid.UUID | str) -> str:
    return f"scan-cancel:{scan_uuid}"


def publish(scan_uuid: uuid.UUID | str, snapshot: dict) -> bool:
    """Store the scan's latest progress; False (logged) when the cache is unreachable."""
    try:
        cache.set(_progress_key(scan_uuid), snapshot, PROGRESS_TTL_S)
        return True
    except CACHE_ERRORS as exc:
        log.warning("scan %s: progress not published (cache unavailable: %s)", scan_uuid, type(exc).__name__)
        return False


def read(scan_uuid: uuid.UUID | str) -> dict | None:
    """The latest published progress of a scan the caller may already see; None if none."""
    try:
        value = cache.get(_progress_key(scan_uuid))
    except CACHE_ERRORS as exc:
        log.warning("scan %s: progress not read (cache unavailable: %s)", scan_uuid, type(exc).__name__)
        return None
    return value if isinstance(value, dict) else None


def clear(scan_uuid: uuid.UUID | str) -> None:
    try:
        cache.delete_many([_progress_key(scan_uuid), _cancel_key(scan_uuid)])
    except CACHE_ERRORS:
        pass  # both expire by themselves


def ask_to_cancel(scan_uuid: uuid.UUID | str) -> None:
    """Tell the scan's worker at once (the row already says cancelled; see worker.cancel)."""
    try:
        cache.set(_cancel_key(scan_uuid), True, CANCEL_TTL_S)
    except CACHE_ERRORS as exc:
        log.warning(
            "scan %s: cancel flag not set (cache unavailable: %s); the worker stops at its next heartbeat",
            scan_uuid,
            type(exc).__name__,
        )


def cancel_asked(scan_uuid: uuid.UUID | str) -> bool:
    try:
        return bool(cache.get(_cancel_key(scan_uuid)))
    except CACHE_ERRORS:
        return False  # the heartbeat's conditional update still notices
