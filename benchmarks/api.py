"""The network's HTTP API (JSON).

Host calls (`Authorization: Bearer tkh_…`, benchmarks.authentication):
    POST /v1/hosts/heartbeat, POST /v1/hosts/lease,
    POST /v1/jobs/{id}/start, /complete, /fail   (only the host the job is leased to: else 404)
Buyer calls (a team API token or a session, through the foundation's scoping layer):
    POST /v1/jobs   (202 with the job id; 429 over the team's limits)
    GET /v1/jobs/{id}   (own team only: else 404)

Views only parse, call a service (benchmarks.hosts / jobs / routing) and shape the answer.
"""

from __future__ import annotations

import math

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import Team
from accounts.tenancy import Access
from accounts.tenancy_api import TeamScopedViewSet
from benchmarks import hosts, jobs, policy, ratelimit, routing
from benchmarks.authentication import HostTokenAuthentication, IsHost
from benchmarks.models import Job, JobStatus

MAX_MESSAGES = 256
MAX_RESULT_BYTES = 1_000_000


# --- strict fields: a number is a JSON number, never a string or a boolean --------------------


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        if isinstance(data, float) and not data.is_integer():
            self.fail("invalid")
        return super().to_internal_value(int(data))


class StrictFloatField(serializers.FloatField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        if not math.isfinite(data):
            self.fail("invalid")
        return super().to_internal_value(data)


# --- host calls ------------------------------------------------------------------------------


class HardwareSerializer(serializers.Serializer):
    gpu_model = serializers.CharField(max_length=100, required=False, allow_blank=True)
    vram_mb = StrictIntegerField(min_value=0, max_value=2**31 - 1, required=False)
    cpu_model = serializers.CharField(max_length=100, required=False, allow_blank=True)
    ram_mb = StrictIntegerField(min_value=0, max_value=2**31 - 1, required=False)


class HeartbeatSerializer(serializers.Serializer):
    models = serializers.ListField(child=serializers.CharField(max_length=64), max_length=64)
    hardware = HardwareSerializer(required=False)
    slots = StrictIntegerField(min_value=1, required=False, default=1)

    def validate_slots(self, value):
        limit = policy.value("NETWORK_MAX_SLOTS")
        if value > limit:
            raise serializers.ValidationError(f"at most {limit} slots")
        return value


class CompleteSerializer(serializers.Serializer):
    ttft_ms = StrictFloatField(min_value=0, allow_null=True)
    completion_tokens = StrictIntegerField(min_value=0)
    elapsed_ms = StrictFloatField(min_value=0)
    result = serializers.JSONField(required=False, allow_null=True)

    def validate_result(self, value):
        import json

        if len(json.dumps(value)) > MAX_RESULT_BYTES:
            raise serializers.ValidationError(f"at most {MAX_RESULT_BYTES} bytes")
        return value


class FailSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=190)


def _too_many(detail: str, code: str, retry_after: int, **extra) -> Response:
    return Response({"detail": detail, "code": code, **extra},
                    status=status.HTTP_429_TOO_MANY_REQUESTS,
                    headers={"Retry-After": str(retry_after)})


def _rate_limited(host, scope: str) -> Response | None:
    limit = policy.value(f"NETWORK_{scope.upper()}_LIMIT")
    window = policy.value(f"NETWORK_{scope.upper()}_WINDOW_S")
    allowed, retry_after = ratelimit.allow(scope, str(host.pk), limit, window)
    if allowed:
        return None
    return _too_many(f"Too many {scope} calls from this host: at most {limit} per {window} s.",
                     "rate_limited", retry_after)


class HostView(APIView):
    authentication_classes = [HostTokenAuthentication]
    permission_classes = [IsHost]

    @property
    def host(self):
        return self.request.auth


class HeartbeatView(HostView):
    @extend_schema(request=HeartbeatSerializer, responses={200: OpenApiResponse(description="recorded")})
    def post(self, request):
        """Record a heartbeat: the catalog ids the host serves, its hardware and free slots."""
        limited = _rate_limited(self.host, "heartbeat")
        if limited is not None:
            return limited
        body = HeartbeatSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            online = hosts.record_heartbeat(
                self.host, data["models"], data.get("hardware", {}), data["slots"]
            )
        except hosts.UnknownModels as exc:
            return Response({"detail": str(exc), "unknown_models": exc.ids}, status=400)
        routing.assignment_pass()
        return Response({
            "online": online,
            "heartbeat_interval_s": policy.value("NETWORK_HEARTBEAT_INTERVAL_S"),
            "models": self.host.advertised,
            "slots": self.host.slots,
            "trust_level": self.host.trust_level,
            "suspended": self.host.suspended,
        })


def _job_for_host(job: Job) -> dict:
    return {
        "id": str(job.id),
        "model": job.model_id,
        "messages": job.request_json.get("messages", []),
        "max_tokens": job.max_tokens,
        "attempt": job.attempts,
        "lease_expires_at": job.lease_expires_at,
    }


class LeaseView(HostView):
    @extend_schema(request=None, responses={200: OpenApiResponse(description="a job"),
                                            204: OpenApiResponse(description="no job for you")})
    def post(self, request):
        """The next job assigned to this host (after an assignment pass), or 204."""
        limited = _rate_limited(self.host, "lease")
        if limited is not None:
            return limited
        job = jobs.lease(self.host)
        if job is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(_job_for_host(job))


def _job_state(job: Job) -> dict:
    return {
        "id": str(job.id),
        "status": job.status,
        "started_at": job.started_at,
        "settled_at": job.settled_at,
        "lease_expires_at": job.lease_expires_at,
        "failure_reason": job.failure_reason or None,
    }


def _job_error(exc: jobs.JobError) -> Response:
    if isinstance(exc, jobs.NotYourJob):
        return Response({"detail": "Not found."}, status=404)
    if isinstance(exc, jobs.JobConflict):
        return Response({"detail": str(exc)}, status=409)
    return Response({"detail": str(exc)}, status=400)


class JobStartView(HostView):
    @extend_schema(request=None, responses={200: OpenApiResponse(description="running")})
    def post(self, request, job_id):
        try:
            job = jobs.start(self.host, job_id)
        except jobs.JobError as exc:
            return _job_error(exc)
        return Response(_job_state(job))


class JobCompleteView(HostView):
    @extend_schema(request=CompleteSerializer, responses={200: OpenApiResponse(description="completed")})
    def post(self, request, job_id):
        body = CompleteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        figures = jobs.Figures(
            ttft_ms=data["ttft_ms"], completion_tokens=data["completion_tokens"],
            elapsed_ms=data["elapsed_ms"],
        )
        try:
            job = jobs.complete(self.host, job_id, figures, data.get("result"))
        except jobs.JobError as exc:
            return _job_error(exc)
        return Response(_job_state(job))


class JobFailView(HostView):
    @extend_schema(request=FailSerializer, responses={200: OpenApiResponse(description="failed")})
    def post(self, request, job_id):
        body = FailSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            job = jobs.fail(self.host, job_id, body.validated_data["reason"])
        except jobs.JobError as exc:
            return _job_error(exc)
        return Response(_job_state(job))


# --- buyer calls -----------------------------------------------------------------------------


class MessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["system", "user", "assistant"])
    content = serializers.CharField(max_length=200_000, allow_blank=True, trim_whitespace=False)


class JobSubmitSerializer(serializers.Serializer):
    team = serializers.SlugField(required=False, help_text="Needed for a user in several teams.")
    model = serializers.CharField(max_length=64)
    messages = MessageSerializer(many=True, allow_empty=False, max_length=MAX_MESSAGES)
    max_tokens = StrictIntegerField(min_value=1)


class JobSerializer(serializers.ModelSerializer):
    model = serializers.CharField(source="model_id")
    result = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id", "model", "status", "max_tokens", "created_at", "started_at", "completed_at",
            "settled_at", "failure_reason", "ttft_ms", "completion_tokens", "elapsed_ms", "result",
        ]

    def get_result(self, job) -> dict | None:
        return job.result_json if job.status == JobStatus.COMPLETED else None


class JobViewSet(mixins.RetrieveModelMixin, TeamScopedViewSet):
    """Buyer jobs: submit one (POST /v1/jobs), read your team's (GET /v1/jobs/{id})."""

    scoped_model = Job
    serializer_class = JobSerializer
    lookup_field = "id"
    lookup_url_kwarg = "job_id"

    def narrow_queryset(self, queryset):
        return queryset.select_related("model")

    def _team_for_submit(self, slug: str | None) -> Team:
        access = Access.for_request(self.request)
        if access.token is not None:
            team_id = access.token.team_id
            if slug and not Team.objects.visible_to(access).filter(slug=slug).exists():
                raise exceptions.NotFound()
        elif slug:
            team = Team.objects.visible_to(access).filter(slug=slug).first()
            if team is None:
                raise exceptions.NotFound()
            team_id = team.pk
        elif len(access.team_ids) == 1:
            team_id = access.team_ids[0]
        else:
            raise exceptions.ValidationError({"team": "Say which team submits this job."})
        if not access.can_write(team_id):
            raise exceptions.PermissionDenied("Your role in this team is read-only.")
        return Team.dangerously_unscoped.get(pk=team_id)

    @extend_schema(request=JobSubmitSerializer, responses={
        202: JobSerializer,
        429: OpenApiResponse(description="Over the team's submission rate or its cap on unsettled "
                                         "jobs (code rate_limited / too_many_unsettled_jobs); "
                                         "see Retry-After. No job is created."),
    })
    def create(self, request):
        raw_team = request.data.get("team") if isinstance(request.data, dict) else None
        team = self._team_for_submit(raw_team if isinstance(raw_team, str) else None)
        # Abuse limits (docs/routing.md): a submission rate per team, counted before any work,
        # and a cap on the team's unsettled jobs, checked as the job is created. A refused job
        # is never created, so it never counts in the public figures.
        limit = policy.value("NETWORK_SUBMIT_LIMIT")
        window = policy.value("NETWORK_SUBMIT_WINDOW_S")
        allowed, retry_after = ratelimit.allow("submit", str(team.pk), limit, window)
        if not allowed:
            return _too_many(f"Too many job submissions from this team: at most {limit} per "
                             f"{window} s.", "rate_limited", retry_after, limit=limit, window_s=window)
        body = JobSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            job = jobs.submit(team, data["model"], [dict(m) for m in data["messages"]],
                              data["max_tokens"])
        except jobs.UnknownCatalogModel as exc:
            raise exceptions.ValidationError({"model": str(exc)}) from exc
        except jobs.TooManyUnsettledJobs as exc:
            return _too_many(str(exc), "too_many_unsettled_jobs",
                             policy.value("NETWORK_UNSETTLED_RETRY_AFTER_S"), limit=exc.limit)
        # The pass may have assigned it already: report the status it has now.
        job.status = Job.dangerously_unscoped.filter(pk=job.pk).values_list("status", flat=True).get()
        return Response(self.get_serializer(job).data, status=status.HTTP_202_ACCEPTED)
