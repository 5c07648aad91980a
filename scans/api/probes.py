"""The liveness probes of an endpoint in the API: each probe (GET …/endpoints/{id}/probes/,
newest first) and the verdict with each location's standing (the endpoint's `liveness`)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.pagination import StrictCursorPagination
from scans.models import Endpoint, ProbeResult

__all__ = ["LIVENESS_SCHEMA", "ProbeCursor", "ProbeSerializer", "liveness_of"]


class ProbeCursor(StrictCursorPagination):
    ordering = "-at"
    page_size = 100
    max_page_size = 1000


class ProbeSerializer(serializers.ModelSerializer):
    class Meta:
        model = ProbeResult
        fields = ["location", "at", "ok", "counted", "status_code", "ttft_ms", "kind", "cause"]
        read_only_fields = fields


_LOCATION = {"type": "object", "properties": {
    "location": {"type": "string"},
    "down": {"type": "boolean", "description": "confirmed down from this location"},
    "failures": {"type": "integer", "description": "failed probes in a row"},
    "successes": {"type": "integer", "description": "good probes in a row"},
    "since": {"type": ["string", "null"], "format": "date-time"},
    "last_at": {"type": ["string", "null"], "format": "date-time"},
    "last_ok": {"type": ["boolean", "null"]},
    "last_ttft_ms": {"type": ["number", "null"]},
    "cause": {"type": "string"}}}
LIVENESS_SCHEMA = {"type": "object", "properties": {
    "state": {"type": "string", "enum": ["", "up", "down", "degraded"],
              "description": "the quorum of the locations' confirmed standings; '' before "
                             "the first probe"},
    "since": {"type": ["string", "null"], "format": "date-time"},
    "cause": {"type": "string"},
    "locations": {"type": "array", "items": _LOCATION}}}


@extend_schema_field(LIVENESS_SCHEMA)
def liveness_of(endpoint: Endpoint) -> dict[str, Any]:
    """The verdict and each location's standing (liveness_states prefetched on lists)."""
    return {
        "state": endpoint.liveness,
        "since": endpoint.liveness_since.isoformat() if endpoint.liveness_since else None,
        "cause": endpoint.liveness_cause,
        "locations": [
            {"location": s.location, "down": s.down, "failures": s.failures,
             "successes": s.successes, "since": s.since.isoformat() if s.since else None,
             "last_at": s.last_at.isoformat() if s.last_at else None, "last_ok": s.last_ok,
             "last_ttft_ms": s.last_ttft_ms, "cause": s.last_cause}
            for s in sorted(endpoint.liveness_states.all(), key=lambda s: s.location)],
    }
