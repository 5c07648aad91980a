"""A worker's probe batch: read the endpoints, probe them all at once from this location,
record the results (record.py)."""

from __future__ import annotations

import asyncio
import logging

from django.conf import settings
from django.utils import timezone

from accounts import encryption
from scans import outbound
from scans.grader import probe_many, probe_plan
from scans.liveness import record
from scans.models import Endpoint, EndpointMode

log = logging.getLogger(__name__)

__all__ = ["probe_batch"]


def probe_batch(endpoint_ids: list[int], location: str) -> int:
    """Probe the endpoints (those still enabled and scheduled) from `location`; returns how
    many were probed. Safe to run twice: a second run is one more probe of each."""
    # Task step: the ids came from our own beat; each row names its team.
    endpoints = list(Endpoint.dangerously_unscoped.filter(
        pk__in=endpoint_ids, enabled=True, mode=EndpointMode.SCHEDULED).only(
        "pk", "team_id", "base_url", "model", "api_key_encrypted", "timeout_s",
        "probe_interval_s", "confirm_after"))
    if not endpoints:
        return 0
    plans = [probe_plan(e.base_url, e.model, encryption.decrypt(e.api_key_encrypted) or None,
                        e.timeout_s) for e in endpoints]
    at = timezone.now()
    results = asyncio.run(probe_many(plans, connect_guard=outbound.guard,
                                     local_address=settings.SCAN_SOURCE_ADDRESS or None))
    record.record(location, [
        record.Probed(e.pk, e.probe_interval_s, e.confirm_after, at, result)
        for e, result in zip(endpoints, results, strict=True)])
    return len(endpoints)
