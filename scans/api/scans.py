"""REST API for scans (DRF): one scan and its report.json, and what lists of scans share (the
serializer, the cursor, the time filters)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
)
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import ApiToken
from accounts.tenancy_api import TeamScopedViewSet
from common.pagination import StrictCursorPagination
from scans.history import retention
from scans.models import (
    CapacityOutcome,
    Scan,
    ScanStatus,
)
from scans.running import dispatch

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# What a scan's capacity search found, denormalized from report.json's capacity:
# outcome "" when the scan did not search; concurrency null when no level met the SLO.
CAPACITY_COLUMNS = ("capacity_outcome", "capacity_concurrency", "capacity_requests_per_s",
                    "capacity_output_tokens_per_s", "capacity_output_unit")


class ScanSerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="public_id", read_only=True)
    endpoint = serializers.UUIDField(source="endpoint.public_id", read_only=True)
    # A number in JSON (100.0), not the string "100.0" a DecimalField gives.
    points = serializers.FloatField(read_only=True, allow_null=True, help_text=(
        "null when the scan has no points, and always when `down`"))
    grade = serializers.CharField(read_only=True, allow_null=True, help_text=(
        "A-F, insufficient_evidence, \"\" before the scan finished; null when `down`"))
    capacity_outcome = serializers.ChoiceField(
        choices=[("", "not searched"), *CapacityOutcome.choices], read_only=True, help_text=(
            "what the scan's capacity search found: met; none_met (no level met the "
            "SLO, capacity_concurrency null); met_at_highest (the highest level tried met it: "
            "the capacity may be higher); \"\" when the scan did not search"))
    report_pruned_at = serializers.DateTimeField(read_only=True, allow_null=True, help_text=(
        "when the full report.json was removed (REPORT_RETENTION_DAYS after the scan "
        "finished); the grade, points, checks and figures stay. null while it is kept"))
    down = serializers.BooleanField(read_only=True, help_text=(
        "the endpoint never answered (the preflight stopped the scan, or no request "
        "succeeded): down is a state, not a grade, so `grade` and `points` are null; the "
        "scan's report.json keeps the F the scoring spec gives"))
    server = serializers.JSONField(source="server_identity", read_only=True, help_text=(
        "what the server said of itself (report.json's server: engine, engine_version, "
        "model, hardware; null for each fact it did not state); null when the report has none"))
    server_label = serializers.CharField(read_only=True, help_text=(
        "the same in one line, e.g. \"vLLM 0.11.0 · Qwen3-8B · ctx 32,768\"; \"\" when none"))
    agent = serializers.JSONField(source="agent_figures", read_only=True, help_text=(
        "an agent-shaped load's figures per level, as report.json's levels have them: "
        "concurrency, turns (per turn: requests, succeeded, ttft_ms p50/p95, cached_share), "
        "tool_calls (requests, replies_with_calls, called, parsed_share, named_share, "
        "valid_share) and structured_output (requests, parsed_share, valid_share), each only "
        "where the load sent it; measured, not graded. null when the scan sent no such load"))
    tool_calls_valid_share = serializers.FloatField(read_only=True, allow_null=True, help_text=(
        "at the top level, the share of tool calls that parsed, named a declared tool and fit "
        "its schema (0 to 1); null when no tools were sent"))
    json_valid_share = serializers.FloatField(read_only=True, allow_null=True, help_text=(
        "at the top level, the share of structured-output replies that validated against the "
        "schema (0 to 1); null when no schema was sent"))

    class Meta:
        model = Scan
        fields = [
            "id", "endpoint", "trigger", "status", "error_reason", "queued_at", "started_at",
            "finished_at", "grade", "points", "down", "uncapped_grade", "scoring_version",
            "provisional", "pushed", "tool_version", "location", *CAPACITY_COLUMNS,
            "report_pruned_at", "server", "server_label", "agent", "tool_calls_valid_share",
            "json_valid_share",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Scan) -> dict[str, Any]:
        data = super().to_representation(instance)
        if data.get("down"):
            data["grade"] = data["points"] = None
        return data


class ScanCursor(StrictCursorPagination):
    ordering = "-queued_at"
    page_size = 50
    max_page_size = 500


EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)


def time_param(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = parse_datetime(raw)
    except ValueError:  # well-formed but impossible, e.g. month 13
        value = None
    if value is None:
        raise exceptions.ValidationError(
            {name: ["expected an ISO 8601 time, e.g. 2026-11-01T00:00:00Z"]})
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)  # the API speaks UTC
    # A time such as 0180-04-27T14:43:30+23:19 parses, but the database cannot compare with
    # it (a 500). No scan is older than 1970 or newer than 9998, so a bound beyond those
    # selects what the nearest one does: any time the schema allows is answered.
    try:
        value = value.astimezone(UTC)
    except OverflowError:  # past either end of the calendar once in UTC
        return EARLIEST if value.year < 5000 else LATEST
    return min(max(value, EARLIEST), LATEST)


TIME_PARAMS = [
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="only scans queued at or after"),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="only scans queued before"),
]


class ScanViewSet(mixins.RetrieveModelMixin, TeamScopedViewSet):
    """A scan's summary, and its stored report.json."""

    scoped_model = Scan
    serializer_class = ScanSerializer

    def narrow_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.select_related("endpoint")

    @extend_schema(responses={200: OpenApiTypes.OBJECT, 410: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"], url_path="report.json")
    def report(self, request: Request, public_id: str | None = None) -> Response:
        scan = self.get_object()
        if scan.report is None:
            raise exceptions.NotFound("This scan has no report (it has not finished, or errored).")
        if scan.report_pruned_at:
            return Response({"detail": retention.pruned_sentence(),
                             "report_pruned_at": scan.report_pruned_at.isoformat()},
                            status=status.HTTP_410_GONE)
        return Response(scan.report)

    @extend_schema(request=None, responses={200: ScanSerializer, 409: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"], url_path="cancel")
    def cancel(self, request: Request, public_id: str | None = None) -> Response:
        """Cancel a queued or running manual or API scan.

        As the scan page's Cancel button: the scan ends `cancelled` at once (no grade, no
        alert, in no SLO window) and its worker stops within about a second. 200 with the
        scan, also when it was already cancelled (a retry changes nothing); 409 for a
        scheduled scan (the SLO's evidence) or one that already ended otherwise; 403 for a
        read-only token or role."""
        scan = self.get_object()
        if scan.status != ScanStatus.CANCELLED:
            try:
                dispatch.cancel(scan, by=_canceller(request))
            except dispatch.NotCancellable as exc:
                scan.refresh_from_db()
                if scan.status != ScanStatus.CANCELLED:  # not someone else's cancel just now
                    return Response({"detail": str(exc), "status": scan.status},
                                    status=status.HTTP_409_CONFLICT)
            scan.refresh_from_db()
        return Response(ScanSerializer(scan).data)


def _canceller(request: Request) -> str:
    """Who cancelled, for the scan's error_reason: the token by its name and prefix, or the
    user by email."""
    token = request.auth
    if isinstance(token, ApiToken):
        return f"API token {token.name!r} ({token.prefix}…)"
    user = cast("User", request.user)  # IsAuthenticated: an account, when not a token
    return user.email or user.get_username()
