"""REST API for endpoints (DRF): create, read, update, delete, scan now, an endpoint's scans and
history, and pushed reports. Every view derives from TeamScopedViewSet, so each object is
reached through the team scoping layer; writes need a writing role."""

from __future__ import annotations

from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from accounts.tenancy import Access
from accounts.tenancy_api import TeamScopedViewSet
from accounts.validators import validate_one_line
from audit import record as audit
from common.errors import Unprocessable, try_again_later
from common.pagination import StrictCursorPagination
from scans.api.probes import LIVENESS_SCHEMA, ProbeCursor, ProbeSerializer, liveness_of
from scans.api.scans import TIME_PARAMS, ScanCursor, ScanSerializer, time_param
from scans.api.slo_windows import EndpointSloSerializer, endpoint_slo
from scans.endpoints import limits, profile, profile_fields, scheduling
from scans.endpoints import service as endpoints
from scans.grader import CHECKS, DatasetError, PlanError
from scans.history import state as endpoint_state
from scans.history.capacity_history import capacity_history, latest_capacity
from scans.history.check_results import check_history
from scans.models import (
    MAX_INTERVAL_MINUTES,
    MIN_INTERVAL_MINUTES,
    CapacityOutcome,
    Endpoint,
    ProbeResult,
    Scan,
    ScanStatus,
    ScanTrigger,
)
from scans.running import dispatch, pushes

DEFAULT_HISTORY_POINTS = 500
MAX_HISTORY_POINTS = 5000
MAX_POINTS_SCHEMA = {"type": "integer", "minimum": 1, "maximum": MAX_HISTORY_POINTS}
# The query parameters every history series takes (a time range and a point budget).
HISTORY_RANGE_PARAMETERS = [
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="from this time"),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="up to this time"),
    OpenApiParameter("max_points", MAX_POINTS_SCHEMA, description=(
        f"at most this many points (default {DEFAULT_HISTORY_POINTS}, at most "
        f"{MAX_HISTORY_POINTS}); longer ranges come back as time buckets")),
]


class ChannelIdsField(serializers.ListField):
    """An endpoint's picked channels as their public ids."""

    def to_representation(self, data: Any) -> list[str]:  # a related manager
        return [str(channel.public_id) for channel in data.all()]  # prefetched by the view


_IPV4 = (r"(?:0|25[0-5]|2[0-4][0-9]|1[0-9]?[0-9]?|[1-9][0-9]?)"
         r"(?:\.(?:0|25[0-5]|2[0-4][0-9]|1[0-9]?[0-9]?|[1-9][0-9]?)){3}")
_H16 = "[0-9A-Fa-f]{1,4}"
_IPV6 = "|".join([
    f"(?:{_H16}:){{7}}{_H16}", f"(?:{_H16}:){{1,7}}:", f"(?:{_H16}:){{1,6}}:{_H16}",
    *(f"(?:{_H16}:){{1,{n}}}(?::{_H16}){{1,{7 - n}}}" for n in range(5, 0, -1)),
    f":(?:(?::{_H16}){{1,7}}|:)"])
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,%d}[A-Za-z0-9])?"
# A name of at most 253 characters: a first label up to 63, up to four more of up to 40, and
# a top-level one.
_HOSTNAME = f"{_LABEL % 61}(?:\\.{_LABEL % 38}){{0,4}}\\.[A-Za-z]{{2,24}}"
_PORT = "(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_PATH_CHAR = '[!"$->@-~]'  # printable ASCII but space, "?" and "#"
# What endpoints.clean_base_url and the scan plan accept (Django's URLValidator, http or
# https; a port up to 65535, no query or fragment: scans/grader/plan.py), in a form a
# client can check before sending: every URL this matches is accepted. An IDN host or a
# non-ASCII path, which they also take, are left out.
BASE_URL_PATTERN = (f"^https?://(?:{_IPV4}|\\[(?:{_IPV6})\\]|localhost|{_HOSTNAME})"
                    f"(?::{_PORT})?(?:/{_PATH_CHAR}*)?$")


_MINIMUM_IN_FIELD = tuple(
    row for row in (*profile_fields.group("workload", "number"),
                    *profile_fields.group("capacity", "number"))
    if row.minimum is not None)


class EndpointSerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="public_id", read_only=True)
    # Resolved in the view through the scoping layer: an unknown or foreign slug is a 404.
    team = serializers.SlugField(source="team.slug", required=False)
    # Checked in validate_base_url (scans/endpoints/service.py), which names a missing scheme's fix.
    base_url = serializers.CharField(max_length=500)
    # Secrets are write-only: accepted, stored encrypted, never returned.
    # An empty string removes a stored secret.
    api_key = serializers.CharField(write_only=True, required=False, allow_blank=True,
                                    trim_whitespace=True, max_length=4000)
    # Where its alerts go: every channel of the team (all_channels), or these (their ids, as
    # the channels page names them); an id of no channel of the endpoint's team is a 422.
    channels = ChannelIdsField(child=serializers.UUIDField(), required=False, max_length=100)
    has_api_key = serializers.BooleanField(read_only=True)
    has_prompt_sample = serializers.BooleanField(read_only=True)
    # The workload's load dataset (JSONL text, as `tokvera scan --dataset` reads it): a secret
    # like the others, write-only and stored encrypted; "" removes it.
    load_dataset = serializers.CharField(write_only=True, required=False, allow_blank=True,
                                         trim_whitespace=False,
                                         max_length=limits.SITE_MAX_DATASET_BYTES)
    has_load_dataset = serializers.BooleanField(read_only=True)
    levels = serializers.ListField(child=serializers.IntegerField(min_value=1), required=False)
    interval_minutes = serializers.IntegerField(min_value=MIN_INTERVAL_MINUTES,
                                                max_value=MAX_INTERVAL_MINUTES, required=False)
    # Where the site scans it from (SCAN_LOCATIONS); empty: the site's own location.
    locations = serializers.ListField(child=serializers.CharField(max_length=40), required=False)
    latest_scan = serializers.SerializerMethodField()
    state = serializers.SerializerMethodField()
    liveness = serializers.SerializerMethodField()

    # Limits the endpoint service enforces (answered as `scan_profile`) and the validate_<field>
    # methods below, stated for the API schema only (tokvera_site/api_schema.py); each profile
    # field's bounds are its row in scans/endpoints/profile_fields.py.
    schema_limits = {
        "base_url": {"pattern": BASE_URL_PATTERN},
        "levels": {"maxItems": limits.SITE_MAX_LEVELS,
                   "items": {"minimum": 1, "maximum": limits.SITE_MAX_LEVEL}},
        **{row.name: row.schema_bounds() for row in profile_fields.FIELDS if row.schema_bounds()},
        "slo_error_rate": {"minimum": 0, "maximum": 1},
        "slo_objective": {"exclusiveMinimum": 0, "maximum": 1},
    }

    class Meta:
        model = Endpoint
        fields = [
            "id", "team", "name", "base_url", "model", "mode", "api_key", "has_api_key",
            "levels", "interval_minutes", "enabled", "has_prompt_sample",
            *(row.name for row in profile_fields.FIELDS), "has_load_dataset",
            "slo_grade_floor", "slo_ttft_p95_ms", "slo_error_rate", "slo_objective",
            "all_channels", "channels", "alert_after_errors",
            "probe_interval_s", "confirm_after", "renotify_minutes",
            "locations", "accepts_pushes", "next_scan_at", "created_at", "latest_scan",
            "state", "liveness",
        ]
        read_only_fields = ["next_scan_at", "created_at"]
        extra_kwargs = {
            "name": {"validators": [validate_one_line]},
            # A workload or capacity value below its minimum is malformed (a 400); the plan's
            # own fields go to the grader, which answers as the profile (a 422).
            **{row.name: {"min_value": row.minimum} for row in _MINIMUM_IN_FIELD},
            # Prices as JSON numbers, not the strings DRF gives decimals by default.
            "price_input_per_mtok": {"coerce_to_string": False},
            "price_output_per_mtok": {"coerce_to_string": False},
        }

    @extend_schema_field({"type": "object", "properties": {
        "state": {"type": "string", "enum": list(endpoint_state.LABELS)},
        "label": {"type": "string"}, "cause": {"type": "string"},
        "scan": {"type": ["string", "null"], "format": "uuid"}},
        "required": ["state", "label", "cause", "scan"]})
    def get_state(self, endpoint: Endpoint) -> dict:
        """The endpoint's state and its cause (README, "Endpoint states")."""
        states = self.context.get("states")
        current = (states[endpoint.pk] if states is not None and endpoint.pk in states
                   else endpoint_state.states_for([endpoint])[endpoint.pk])
        return {"state": current.state, "label": current.label, "cause": current.cause,
                "scan": str(current.scan_id) if current.scan_id else None}

    @extend_schema_field(LIVENESS_SCHEMA)
    def get_liveness(self, endpoint: Endpoint) -> dict:
        """The liveness probes' verdict and each location's standing (docs/liveness.md)."""
        return liveness_of(endpoint)

    def get_latest_scan(self, endpoint: Endpoint) -> dict | None:
        latest = self.context.get("latest_scans")
        if latest is not None:  # a list page: fetched and serialized for the whole page at once
            return latest.get(endpoint.pk)
        scan = (endpoint.scans.exclude(status__in=[ScanStatus.QUEUED, ScanStatus.RUNNING])
                .defer("report").first())
        return ScanSerializer(scan).data if scan else None

    def validate_slo_objective(self, value: float) -> float:
        if not 0 < value <= 1:
            raise serializers.ValidationError("expected a share between 0 and 1, e.g. 0.95")
        return value

    def validate_slo_error_rate(self, value: float | None) -> float | None:
        if value is not None and not 0 <= value <= 1:
            raise serializers.ValidationError("expected a share between 0 and 1")
        return value

    def validate_locations(self, value: list[str]) -> list[str]:
        try:
            return scheduling.clean_locations(value)
        except scheduling.UnknownLocation as exc:  # the site's settings say which (a 422)
            raise Unprocessable({"locations": [str(exc)]}) from None

    def validate_base_url(self, value: str) -> str:
        try:
            return endpoints.clean_base_url(value)
        except endpoints.InvalidURL as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate_load_dataset(self, value: str) -> str:
        if value:
            try:
                profile.parse_load_dataset(value)
            except DatasetError as exc:  # text the schema takes, not JSONL a scan can use
                raise Unprocessable({"load_dataset": [str(exc)]}) from None
        return value

    def create(self, validated: dict[str, Any]) -> Endpoint:
        data = dict(validated)
        team = data.pop("team")  # resolved by the view (EndpointViewSet.perform_create)
        try:
            return endpoints.create(team, data, self._by()).endpoint
        except endpoints.REFUSALS as exc:
            raise _refusal(exc) from None

    def update(self, instance: Endpoint, validated: dict[str, Any]) -> Endpoint:
        try:
            return endpoints.update(instance, validated, self._by()).endpoint
        except endpoints.REFUSALS as exc:
            raise _refusal(exc) from None

    def _by(self) -> Access:
        return Access.for_request(self.context["request"])


def _refusal(exc: Exception) -> exceptions.APIException:
    """A refusal of the endpoint service as the API answers it."""
    if isinstance(exc, endpoints.URLChangeRefused):  # stored secrets follow their URL's origin
        name, message = next(iter(exc.refused.items()))
        return exceptions.PermissionDenied(f"{name}: {message}")
    if isinstance(exc, PlanError):  # a combination no schema states (a 422, not a 400)
        return Unprocessable({"scan_profile": [str(exc)]})
    if isinstance(exc, limits.TooManyEndpoints):
        return exceptions.ValidationError({"team": [str(exc)]})
    if isinstance(exc, endpoints.IntervalTooShort):  # judged by the endpoint's own scans
        return Unprocessable({"interval_minutes": [str(exc)]})
    return Unprocessable({"channels": [str(exc)]})  # endpoints.UnknownChannels


class CapacityPointSerializer(serializers.Serializer):
    """scans.history.capacity_history.CapacityPoint: one scan's capacity search, or a time bucket of them."""

    at = serializers.DateTimeField()
    last_at = serializers.DateTimeField()
    scans = serializers.IntegerField(min_value=1)
    streams = serializers.FloatField(
        min_value=0, help_text="streams served within the SLO: the capacity, 0 when no level "
                               "met it (a bucket's mean)")
    streams_min = serializers.FloatField(min_value=0)
    streams_max = serializers.FloatField(min_value=0)
    concurrency = serializers.IntegerField(
        allow_null=True, min_value=1,
        help_text="the capacity as report.json has it; null when no level met the SLO, and "
                  "for a bucket")
    outcome = serializers.ChoiceField(
        choices=[*CapacityOutcome.choices, ("", "a bucket")],
        help_text="met; none_met (no level met the SLO); met_at_highest (the highest level "
                  "tried met it: the capacity may be higher); \"\" for a bucket")
    none_met = serializers.IntegerField(min_value=0)
    met_at_highest = serializers.IntegerField(min_value=0)
    requests_per_s = serializers.FloatField(allow_null=True, help_text="goodput at the capacity")
    output_tokens_per_s = serializers.FloatField(allow_null=True)
    output_unit = serializers.CharField(allow_blank=True, help_text="tokens/s or chunks/s")
    slo = serializers.DictField(allow_null=True, help_text="the objective searched against")
    pushed = serializers.IntegerField(min_value=0)
    scan_id = serializers.UUIDField(allow_null=True)


class CapacityLatestSerializer(serializers.Serializer):
    """The latest scan that searched: what the endpoint page says."""

    scan = serializers.UUIDField()
    at = serializers.DateTimeField()
    outcome = serializers.ChoiceField(choices=CapacityOutcome.choices)
    concurrency = serializers.IntegerField(allow_null=True, min_value=1)
    requests_per_s = serializers.FloatField(allow_null=True)
    output_tokens_per_s = serializers.FloatField(allow_null=True)
    output_unit = serializers.CharField(allow_blank=True)
    pushed = serializers.BooleanField()
    reason = serializers.CharField(allow_blank=True)
    levels_tried = serializers.ListField(child=serializers.IntegerField())
    slo = serializers.DictField(allow_null=True)


def _latest_capacity(endpoint: Endpoint) -> dict | None:
    scan = latest_capacity(endpoint)
    if scan is None:
        return None
    found = scan.capacity_found or {}
    tried = found.get("levels_tried")
    return {"scan": scan.public_id, "at": scan.queued_at, "outcome": scan.capacity_outcome,
            "concurrency": scan.capacity_concurrency,
            "requests_per_s": scan.capacity_requests_per_s,
            "output_tokens_per_s": scan.capacity_output_tokens_per_s,
            "output_unit": scan.capacity_output_unit, "pushed": scan.pushed,
            "reason": str(found.get("reason") or ""),
            "levels_tried": [c for c in tried if isinstance(c, int)]
            if isinstance(tried, list) else [],
            "slo": found.get("slo") if isinstance(found.get("slo"), dict) else None}


def _account_of(request: Request) -> int | None:
    """The account a push is charged to: the signed-in user, or the account that made the team
    token (None for a token an operator made, which has none: its team's budget applies)."""
    token = Access.for_request(request).token
    if token is not None:
        return getattr(token, "created_by_id", None)
    return request.user.pk


class EndpointPages(StrictCursorPagination):
    ordering = "created_at"
    page_size = 100
    max_page_size = 500


PROFILE_UNUSABLE = OpenApiResponse(description=(
    'Refused, nothing saved: the scan profile as a whole cannot run (`{"scan_profile": '
    '["…"]}`: levels not ascending from 1, a capacity alert without the capacity search, a '
    "workload over the site's limits, and the like), a load dataset that is not JSONL a scan "
    "can use, a location this site does not scan from, a channel id of no channel of the "
    "endpoint's team, or a new interval shorter than the endpoint's last scans took "
    '(`{"interval_minutes": ["…"]}`).'))


@extend_schema_view(
    create=extend_schema(responses={201: EndpointSerializer, 422: PROFILE_UNUSABLE}),
    update=extend_schema(responses={200: EndpointSerializer, 422: PROFILE_UNUSABLE}),
    partial_update=extend_schema(responses={200: EndpointSerializer, 422: PROFILE_UNUSABLE}),
)
class EndpointViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    mixins.UpdateModelMixin, mixins.DestroyModelMixin, TeamScopedViewSet,
):
    """Endpoints of the caller's teams. Creating one needs a writing role in its team (a
    team token's own team, or `team` by slug for a logged-in user)."""

    scoped_model = Endpoint
    serializer_class = EndpointSerializer
    pagination_class = EndpointPages

    def narrow_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.select_related("team").prefetch_related("channels", "liveness_states")

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        latest = self._latest_scans(page)
        # One serializer for the whole page's scans: a ScanSerializer per endpoint built its
        # fields again for each (most of the list's time).
        shown = dict(zip(latest, ScanSerializer(list(latest.values()), many=True).data,
                         strict=True))
        serializer = self.get_serializer(page, many=True, context={
            **self.get_serializer_context(), "latest_scans": shown,
            "states": endpoint_state.states_for(page or [])})
        return self.get_paginated_response(serializer.data)

    def _latest_scans(self, endpoints: Any) -> dict:  # the page: paginate_queryset's list
        """Each endpoint's latest finished scan, for a whole page in two queries."""
        access = Access.for_request(self.request)
        latest = (Scan.objects.visible_to(access).filter(endpoint=OuterRef("pk"))
                  .exclude(status__in=["queued", "running"]).order_by("-queued_at")
                  .values("pk")[:1])
        pairs = (Endpoint.objects.visible_to(access).filter(pk__in=[e.pk for e in endpoints])
                 .annotate(latest=Subquery(latest)).values_list("pk", "latest"))
        pairs = [(endpoint_id, scan_id) for endpoint_id, scan_id in pairs if scan_id]
        # A list never needs report.json (megabytes per scan): its summary is in columns.
        scans = (Scan.objects.visible_to(access).select_related("endpoint").defer("report")
                 .in_bulk([scan_id for _, scan_id in pairs]))
        return {endpoint_id: scans[scan_id] for endpoint_id, scan_id in pairs}

    def perform_create(self, serializer: BaseSerializer[Any]) -> None:
        serializer.save(team=self.team_to_create_in(serializer))

    def perform_destroy(self, instance: Endpoint) -> None:
        with audit.track(instance):
            instance.delete()

    @extend_schema(parameters=TIME_PARAMS, responses=ScanSerializer(many=True))
    @action(detail=True, methods=["get"], url_path="scans")
    def scans(self, request: Request, public_id: str | None = None) -> Response:
        """The endpoint's scans, newest first (cursor-paginated; filter with since/until)."""
        endpoint = self.get_object()
        queryset = endpoint.scans.select_related("endpoint").defer("report")
        if (since := time_param(request, "since")) is not None:
            queryset = queryset.filter(queued_at__gte=since)
        if (until := time_param(request, "until")) is not None:
            queryset = queryset.filter(queued_at__lt=until)
        paginator = ScanCursor()
        page: list[Scan] | None = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(ScanSerializer(page, many=True).data)

    @extend_schema(parameters=[*TIME_PARAMS, OpenApiParameter(
        "location", str, description="only the probes from this location")],
        responses=ProbeSerializer(many=True))
    @action(detail=True, methods=["get"], url_path="probes")
    def probes(self, request: Request, public_id: str | None = None) -> Response:
        """The endpoint's liveness probes, newest first (cursor-paginated; filter with
        since/until and location). Each probe's own row is kept PROBE_RETENTION_DAYS."""
        endpoint = self.get_object()
        queryset = ProbeResult.objects.for_team(endpoint.team_id).filter(endpoint=endpoint)
        if (since := time_param(request, "since")) is not None:
            queryset = queryset.filter(at__gte=since)
        if (until := time_param(request, "until")) is not None:
            queryset = queryset.filter(at__lt=until)
        if location := request.query_params.get("location"):
            queryset = queryset.filter(location=location)
        paginator = ProbeCursor()
        page: list[ProbeResult] | None = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(ProbeSerializer(page, many=True).data)

    @extend_schema(request=None, responses={202: ScanSerializer, 409: OpenApiResponse(
        description="The endpoint is pushed: its scans are uploaded, not started here.")})
    @scans.mapping.post
    def trigger_scan(self, request: Request, public_id: str | None = None) -> Response:
        """Start a scan now (rate-limited per endpoint; 429 with Retry-After when too soon;
        503 with Retry-After, and nothing saved, when the task queue is unreachable)."""
        endpoint = self.get_object()
        try:
            scan = dispatch.scan_now(endpoint, ScanTrigger.API)
        except dispatch.NotScannable as exc:  # the endpoint's mode, not the request: 409
            return Response({"detail": str(exc), "code": "pushed"},
                            status=status.HTTP_409_CONFLICT)
        except dispatch.ScanRateLimited as exc:
            return try_again_later(exc, status.HTTP_429_TOO_MANY_REQUESTS, exc.retry_after_s)
        except dispatch.ScanNotQueued as exc:
            return try_again_later(exc, status.HTTP_503_SERVICE_UNAVAILABLE, exc.retry_after_s)
        return Response(ScanSerializer(scan).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        parameters=[
            OpenApiParameter("check", str, required=True, enum=[c.id for c in CHECKS],
                             description="a check id, e.g. ttft_p95_at_concurrency_1"),
            *HISTORY_RANGE_PARAMETERS,
        ],
        responses=inline_serializer("CheckHistory", {
            "endpoint": serializers.UUIDField(),
            "check": serializers.CharField(),
            "points": serializers.ListField(child=serializers.DictField()),
        }),
    )
    @action(detail=True, methods=["get"], url_path="history")
    def history(self, request: Request, public_id: str | None = None) -> Response:
        """One check's values over time, oldest first. Each point is one scan, or a time
        bucket (mean, min, max, status counts) when the range holds more than max_points,
        downsampled in the database. Every point carries its scoring_version: values of
        different versions are never merged."""
        endpoint = self.get_object()
        check = request.query_params.get("check", "")
        max_points = self._max_points(request)
        try:
            points = check_history(endpoint, check, since=time_param(request, "since"),
                                   until=time_param(request, "until"), max_points=max_points)
        except ValueError as exc:
            raise exceptions.ValidationError({"check": [str(exc)]}) from None
        return Response({"endpoint": endpoint.public_id, "check": check,
                         "points": [p.as_dict() for p in points]})

    @extend_schema(
        parameters=HISTORY_RANGE_PARAMETERS,
        responses=inline_serializer("CapacityHistory", {
            "endpoint": serializers.UUIDField(),
            "latest": CapacityLatestSerializer(allow_null=True),
            "points": CapacityPointSerializer(many=True),
        }),
    )
    @action(detail=True, methods=["get"], url_path="capacity")
    def capacity(self, request: Request, public_id: str | None = None) -> Response:
        """Capacity within the SLO over time, oldest first: one point per scan that
        searched (the capacity search of the endpoint's profile), or time buckets when the
        range holds more than max_points; `latest` is the latest scan that searched (null when
        none did)."""
        endpoint = self.get_object()
        max_points = self._max_points(request)
        points = capacity_history(endpoint, since=time_param(request, "since"),
                                  until=time_param(request, "until"), max_points=max_points)
        return Response({"endpoint": endpoint.public_id,
                         "latest": _latest_capacity(endpoint),
                         "points": CapacityPointSerializer(points, many=True).data})

    @staticmethod
    def _max_points(request: Request) -> int:
        try:
            max_points = int(request.query_params.get("max_points", DEFAULT_HISTORY_POINTS))
        except ValueError:
            raise exceptions.ValidationError({"max_points": ["expected a whole number"]}) from None
        if not 1 <= max_points <= MAX_HISTORY_POINTS:
            raise exceptions.ValidationError(
                {"max_points": [f"expected 1 to {MAX_HISTORY_POINTS}"]})
        return max_points

    @extend_schema(responses=EndpointSloSerializer)
    @action(detail=True, methods=["get"], url_path="slo")
    def slo(self, request: Request, public_id: str | None = None) -> Response:
        """The endpoint's SLO over the last 7 and 30 days: per window its status
        (breaching / at risk / meeting / no data, by burn rate and the good share of the
        covered time; uncovered time is never counted as good), covered and uncovered time,
        the error budget in time, the burn rate over each span and the burn-rate alert pairs
        (docs/slo.md)."""
        return Response(endpoint_slo(self.get_object()))

    @extend_schema(request=OpenApiTypes.OBJECT,
                   responses={200: ScanSerializer, 202: ScanSerializer, 409: OpenApiTypes.OBJECT,
                              413: OpenApiTypes.OBJECT, 429: OpenApiTypes.OBJECT,
                              503: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"], url_path="reports")
    def reports(self, request: Request, public_id: str | None = None) -> Response:
        """Upload a report made by `tokvera scan --publish` inside a private network. 202: taken;
        the proof workers recompute every check from the report's own samples, and the scan at
        `Location` (`GET /api/v1/scans/{id}`) becomes `succeeded` with the site's grade or
        `refused` with the reasons in `error_reason`, one per line. 200: this exact report was
        already received (its scan, whatever its status). 409: a scheduled endpoint without
        `accepts_pushes`. 413: over the size limit. 429: too many reports for this endpoint,
        too many replays, or the team's or the account's bytes per hour spent (Retry-After; the
        account is the user, or the one that made the token). 503: the task
        queue is unreachable; nothing was kept (Retry-After)."""
        endpoint = self.get_object()
        try:
            pushes.refuse_oversized(request.META.get("CONTENT_LENGTH"))  # before reading it
            pushes.refuse_unwanted(endpoint)  # before reading it
            received = pushes.receive_report(endpoint, request.body, _account_of(request))
        except pushes.ReportTooLarge as exc:
            return Response({"report": [str(exc)]},
                            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
        except pushes.PushesNotAccepted as exc:
            return Response({"report": [str(exc)]}, status=status.HTTP_409_CONFLICT)
        except pushes.PushRateLimited as exc:
            return try_again_later(exc, status.HTTP_429_TOO_MANY_REQUESTS, exc.retry_after_s)
        except pushes.PushNotQueued as exc:
            return try_again_later(exc, status.HTTP_503_SERVICE_UNAVAILABLE, exc.retry_after_s)
        url = request.build_absolute_uri(
            reverse("api-scan-detail", kwargs={"public_id": received.scan.public_id}))
        return Response({**ScanSerializer(received.scan).data, "url": url},
                        status=status.HTTP_202_ACCEPTED if received.created else status.HTTP_200_OK,
                        headers={"Location": url})
