"""The network's HTTP API (JSON).

Host calls (`Authorization: Bearer tkh_…`, benchmarks.authentication):
    POST /v1/hosts/heartbeat   (a plain Django view: the hottest call does no DRF work)
    POST /v1/hosts/lease   ({"start": true}: the job comes back already running; {"wait_s": 25}:
        waits up to 25 s for a job to be assigned to this host before answering 204)
    POST /v1/jobs/{id}/start, /complete, /fail   (only the host the job is leased to: else 404;
        complete with {"lease_next": true} also answers the host's next job, started, as "next")
    POST /v1/jobs/complete   (several of the host's jobs in one call: {"jobs": [{id, figures}…],
        "lease_next": true}; each report answered in its place, and as many next jobs)
Buyer calls (a team API token or a session, through the foundation's scoping layer):
    POST /v1/jobs   (202 with the job id; 429 over the team's limits)
    POST /v1/jobs/batch   ({"jobs": [...]}: up to NETWORK_SUBMIT_BATCH_MAX jobs, all or none;
        each counts one against the team's submission rate)
    GET /v1/jobs/{id}   (own team only: else 404)

Views only parse, call the flow's service (benchmarks/services.py) and shape the answer.
"""

from __future__ import annotations

import json
import math

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import credentials
from accounts.models import Team
from accounts.tenancy import Access
from accounts.tenancy_api import TeamScopedViewSet
from benchmarks import host_calls, hosts, jobs, policy, services
from benchmarks.authentication import HostTokenAuthentication, IsHost
from benchmarks.heartbeat import answer_heartbeat
from benchmarks.models import Job, JobStatus
from common import client_address, ratelimit
from common.errors import Unprocessable

MAX_MESSAGES = 256


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
        try:
            finite = math.isfinite(data)
        except OverflowError:  # an integer too large for a float
            finite = False
        if not finite:
            self.fail("invalid")
        return super().to_internal_value(data)


class FiguresSerializer(serializers.Serializer):
    ttft_ms = StrictFloatField(min_value=0, allow_null=True)
    completion_tokens = StrictIntegerField(min_value=0)
    elapsed_ms = StrictFloatField(min_value=0)
    result = serializers.JSONField(required=False, allow_null=True)

    def validate_result(self, value):
        if len(json.dumps(value)) > host_calls.MAX_RESULT_BYTES:
            raise serializers.ValidationError(f"at most {host_calls.MAX_RESULT_BYTES} bytes")
        return value


class CompleteSerializer(FiguresSerializer):
    lease_next = serializers.BooleanField(required=False, default=False,
                                          help_text="Also lease the next job, already started.")
    wait_s = StrictFloatField(required=False, default=0.0, min_value=0,
                              max_value=policy.DEFAULTS["NETWORK_LEASE_WAIT_MAX_S"],
                              help_text="With lease_next: wait for the next job as a lease "
                                        "does (0: do not wait).")


class CompletionSerializer(FiguresSerializer):
    id = serializers.UUIDField(help_text="The job this report completes.")


class CompleteManySerializer(serializers.Serializer):
    # DRF hands max_length to the ListSerializer (many=True); djangorestframework-stubs lack it.
    jobs = CompletionSerializer(many=True, allow_empty=False,  # type: ignore[call-arg]
                                max_length=policy.DEFAULTS["NETWORK_MAX_SLOTS"])
    lease_next = serializers.BooleanField(required=False, default=False, help_text=(
        "Also lease up to one next job, already started, per job completed in this call."))


class FailSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=190)


class JobMessageSerializer(serializers.Serializer):
    role = serializers.CharField()
    content = serializers.CharField()


class JobForHostSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=JobStatus.choices)
    model = serializers.CharField()
    messages = JobMessageSerializer(many=True)
    max_tokens = serializers.IntegerField()
    attempt = serializers.IntegerField()
    lease_expires_at = serializers.DateTimeField(allow_null=True)


class JobStateSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=JobStatus.choices)
    started_at = serializers.DateTimeField(allow_null=True)
    settled_at = serializers.DateTimeField(allow_null=True)
    lease_expires_at = serializers.DateTimeField(allow_null=True)
    failure_reason = serializers.CharField(allow_null=True)


class CompletedJobSerializer(JobStateSerializer):
    next = JobForHostSerializer(allow_null=True, required=False, help_text=(
        "Only when lease_next was asked for: the host's next job, already started, or null."))


JOB_CONFLICT = OpenApiResponse(description="The job is not in a state this call can change "
                                           "(e.g. already settled).")


NOT_YOUR_JOB = OpenApiResponse(description="No such job, or it is not leased to this host.")


def _too_many(detail: str, code: str, retry_after: int, **extra) -> Response:
    return Response({"detail": detail, "code": code, **extra},
                    status=status.HTTP_429_TOO_MANY_REQUESTS,
                    headers={"Retry-After": str(retry_after)})


def _lease_rate_limited(request) -> Response | None:
    """The lease's rate limit, counted under the key the fast path counts it under
    (host_calls.lease_limit_key), so both paths spend one allowance."""
    limit, window = policy.value("NETWORK_LEASE_LIMIT"), policy.value("NETWORK_LEASE_WINDOW_S")
    token = credentials.split_bearer(request.META.get("HTTP_AUTHORIZATION", ""), hosts.TOKEN_KIND)
    allowed, retry_after = ratelimit.allow("lease", host_calls.lease_limit_key(token or ""),
                                           limit, window)
    if allowed:
        return None
    return _too_many(host_calls.lease_limited_detail(), "rate_limited", retry_after)


class HostView(APIView):
    authentication_classes = [HostTokenAuthentication]
    permission_classes = [IsHost]
    renderer_classes = [JSONRenderer]  # a host reads JSON; no browsable pages for host tokens

    @property
    def host(self):
        return self.request.auth


@csrf_exempt
@require_POST
def heartbeat(request):
    """Record a heartbeat: the catalog ids the host serves, its hardware and free slots.

    Under gunicorn the heartbeat never reaches this view: tokvera_site/wsgi.py answers it
    before Django's middleware (benchmarks/host_wsgi.py). Both call `answer_heartbeat`.
    """
    def body(limit: int) -> bytes | None:
        if int(request.META.get("CONTENT_LENGTH") or 0) > limit:
            return None
        return request.body if len(request.body) <= limit else None

    status_code, payload, headers = answer_heartbeat(request.META.get("HTTP_AUTHORIZATION", ""),
                                                     body, client_address.of_request(request))
    answer = JsonResponse(payload, status=status_code)
    for name, value in headers.items():
        answer[name] = value
    return answer


class HeartbeatHardwareSerializer(serializers.Serializer):
    gpu_model = serializers.CharField(required=False, max_length=100, allow_blank=True)
    vram_mb = StrictIntegerField(required=False, min_value=0, max_value=2**31 - 1)
    cpu_model = serializers.CharField(required=False, max_length=100, allow_blank=True)
    ram_mb = StrictIntegerField(required=False, min_value=0, max_value=2**31 - 1)


class HeartbeatSerializer(serializers.Serializer):
    models = serializers.ListField(
        child=serializers.RegexField(r"^[^\u0000]*\S[^\u0000]*$", max_length=64),
        max_length=64, help_text="The catalog ids this host serves (at most 64).")
    hardware = HeartbeatHardwareSerializer(required=False)
    slots = StrictIntegerField(required=False, default=1, min_value=1,
                               max_value=policy.DEFAULTS["NETWORK_MAX_SLOTS"],
                               help_text="Jobs it can run at once (at most NETWORK_MAX_SLOTS).")


class HeartbeatAnswerSerializer(serializers.Serializer):
    online = serializers.BooleanField()
    heartbeat_interval_s = serializers.IntegerField(help_text="Send the next one within this.")
    models = serializers.ListField(child=serializers.CharField())
    slots = serializers.IntegerField()
    trust_level = serializers.CharField()
    suspended = serializers.BooleanField()


class HeartbeatSchemaView(APIView):
    """Describes POST /v1/hosts/heartbeat to the API schema only (tokvera_site/api_schema.py
    add_plain_views): the call itself is the plain view `heartbeat` above, or under gunicorn
    benchmarks/host_wsgi.py, never DRF."""

    authentication_classes = [HostTokenAuthentication]
    permission_classes = [IsHost]

    @extend_schema(
        operation_id="hosts_heartbeat",
        request=HeartbeatSerializer,
        responses={200: HeartbeatAnswerSerializer, 400: OpenApiResponse(description=(
            "Refused: `detail` says why (not JSON, over 64 KiB, a field out of range).")),
            422: OpenApiResponse(description=(
                "Refused, nothing recorded: `unknown_models` lists the ids the catalog does "
                "not have."))},
        description="Record a heartbeat: the catalog ids the host serves, its hardware and "
                    "free slots. Rate-limited per host token (429 with Retry-After).")
    def post(self, request):
        raise exceptions.MethodNotAllowed("POST")  # never routed: see `heartbeat`


heartbeat.openapi_view = HeartbeatSchemaView.as_view()  # type: ignore[attr-defined]


WAIT_HELP = ("Wait up to this many seconds (at most NETWORK_LEASE_WAIT_MAX_S, 30) for a job "
             "to be assigned to this host before answering without one; 0: answer at once.")


class LeaseSerializer(serializers.Serializer):
    start = serializers.BooleanField(required=False, default=False,
                                     help_text="Start the job too: it comes back running.")
    wait_s = StrictFloatField(required=False, default=0.0, min_value=0,
                              max_value=policy.DEFAULTS["NETWORK_LEASE_WAIT_MAX_S"],
                              help_text=WAIT_HELP)


class LeaseView(HostView):
    @extend_schema(request=LeaseSerializer, responses={
        200: OpenApiResponse(JobForHostSerializer, description="the next job for this host"),
        204: OpenApiResponse(description="no job for you")})
    def post(self, request):
        """The next job assigned to this host, or 204 (at once, or after waiting `wait_s`)."""
        limited = _lease_rate_limited(request)
        if limited is not None:
            return limited
        # A bare POST (what older agents send, whatever its content type) asks for nothing more.
        sent = request.data if request.content_type.startswith("application/json") else {}
        body = LeaseSerializer(data=sent if isinstance(sent, dict) else {})
        body.is_valid(raise_exception=True)
        job = services.lease(self.host, start=body.validated_data["start"],
                             wait_s=min(body.validated_data["wait_s"],
                                        policy.value("NETWORK_LEASE_WAIT_MAX_S")))
        if job is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(host_calls.job_for_host(job))


def _job_error(exc: jobs.JobError) -> Response:
    status_code, body = host_calls.job_error(exc)
    return Response(body, status=status_code)


class JobStartView(HostView):
    @extend_schema(request=None, responses={
        200: OpenApiResponse(JobStateSerializer, description="running"),
        404: NOT_YOUR_JOB, 409: JOB_CONFLICT})
    def post(self, request, job_id):
        try:
            job = services.start(self.host, job_id)
        except jobs.JobError as exc:
            return _job_error(exc)
        return Response(host_calls.job_state(job))


class JobCompleteView(HostView):
    @extend_schema(request=CompleteSerializer, responses={
        200: OpenApiResponse(CompletedJobSerializer, description="completed"),
        404: NOT_YOUR_JOB, 409: JOB_CONFLICT})
    def post(self, request, job_id):
        body = CompleteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        figures = jobs.Figures(
            ttft_ms=data["ttft_ms"], completion_tokens=data["completion_tokens"],
            elapsed_ms=data["elapsed_ms"],
        )
        try:
            job, following = services.complete(
                self.host, job_id, figures, data.get("result"), lease_next=data["lease_next"],
                wait_s=min(data["wait_s"], policy.value("NETWORK_LEASE_WAIT_MAX_S")))
        except jobs.JobError as exc:
            return _job_error(exc)
        return Response(host_calls.completed(job, following, data["lease_next"]))


class JobCompleteManyView(HostView):
    # Its own id: drf-spectacular names both complete calls "jobs_complete_create".
    @extend_schema(operation_id="jobs_complete_many", request=CompleteManySerializer,
                   responses={200: OpenApiResponse(description=(
        "`jobs`: for each report, in order, the job's state as /complete answers it, or "
        "{id, error: {status, detail}} with the status /complete would have answered "
        "(404, 409, 400); `next` (with lease_next): the next jobs, started."))})
    def post(self, request):
        """Complete several jobs of this host in one call (a host with several slots)."""
        body = CompleteManySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reports = [(item["id"], jobs.Figures(ttft_ms=item["ttft_ms"],
                                             completion_tokens=item["completion_tokens"],
                                             elapsed_ms=item["elapsed_ms"]), item.get("result"))
                   for item in body.validated_data["jobs"]]
        settled, following = services.complete_many(
            self.host, reports, lease_next=body.validated_data["lease_next"])
        return Response(host_calls.completed_many([job_id for job_id, _, _ in reports], settled,
                                                  following, body.validated_data["lease_next"]))


class JobFailView(HostView):
    @extend_schema(request=FailSerializer, responses={
        200: OpenApiResponse(JobStateSerializer, description="failed"),
        404: NOT_YOUR_JOB, 409: JOB_CONFLICT})
    def post(self, request, job_id):
        body = FailSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            job = services.fail(self.host, job_id, body.validated_data["reason"])
        except jobs.JobError as exc:
            return _job_error(exc)
        return Response(host_calls.job_state(job))


class MessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["system", "user", "assistant"])
    content = serializers.CharField(max_length=200_000, allow_blank=True, trim_whitespace=False)


TEAM_HELP = "Needed for a user in several teams."


class JobItemSerializer(serializers.Serializer):
    model = serializers.CharField(max_length=64)
    # DRF hands max_length to the ListSerializer (many=True); djangorestframework-stubs lack it.
    messages = MessageSerializer(many=True, allow_empty=False, max_length=MAX_MESSAGES)  # type: ignore[call-arg]
    max_tokens = StrictIntegerField(min_value=1)


class JobSubmitSerializer(JobItemSerializer):
    team = serializers.SlugField(required=False, help_text=TEAM_HELP)


class JobBatchSubmitSerializer(serializers.Serializer):
    team = serializers.SlugField(required=False, help_text=TEAM_HELP)
    jobs = JobItemSerializer(many=True, allow_empty=False, help_text=(
        "1 to NETWORK_SUBMIT_BATCH_MAX jobs (default 100), all created or none."))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The limit in force (settings can change it), checked before any item is; the
        # schema states it too (maxItems).
        self.fields["jobs"].max_length = policy.value("NETWORK_SUBMIT_BATCH_MAX")  # type: ignore[attr-defined]


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


class JobBatchSerializer(serializers.Serializer):
    jobs = JobSerializer(many=True, help_text="The jobs created, in the order given.")


SUBMIT_REFUSED = {
    429: OpenApiResponse(description="Over the team's submission rate or its cap on unsettled "
                                     "jobs (code rate_limited / too_many_unsettled_jobs); "
                                     "see Retry-After. No job is created."),
    503: OpenApiResponse(description="No online host serves the model (code no_host_online), "
                                     "or the database is unreachable (database_unavailable); "
                                     "see Retry-After. No job is created."),
}


def _submission_rate(team, jobs_asked: int) -> Response | None:
    """Count the jobs against the team's submission rate (one budget for single and batched
    submissions, counted before the body is validated); a 429 when over it, else None."""
    limit = policy.value("NETWORK_SUBMIT_LIMIT")
    window = policy.value("NETWORK_SUBMIT_WINDOW_S")
    allowed, retry_after = ratelimit.allow_weighted("submit", str(team.pk), jobs_asked, limit,
                                                    window)
    if allowed:
        return None
    return _too_many(f"Too many job submissions from this team: at most {limit} per {window} s.",
                     "rate_limited", retry_after, limit=limit, window_s=window)


def _submission_refused(exc: jobs.TooManyUnsettledJobs | jobs.NoHostOnline) -> Response:
    if isinstance(exc, jobs.TooManyUnsettledJobs):
        return _too_many(str(exc), "too_many_unsettled_jobs",
                         policy.value("NETWORK_UNSETTLED_RETRY_AFTER_S"), limit=exc.limit)
    return Response({"detail": str(exc), "code": "no_host_online", "model": exc.model_id},
                    status=status.HTTP_503_SERVICE_UNAVAILABLE,
                    headers={"Retry-After": str(policy.value("NETWORK_NO_HOST_RETRY_AFTER_S"))})


class JobViewSet(mixins.RetrieveModelMixin, TeamScopedViewSet):
    """Buyer jobs: submit one (POST /v1/jobs) or several (POST /v1/jobs/batch), read your
    team's (GET /v1/jobs/{id})."""

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
        return Team.objects.visible_to(access).get(pk=team_id)

    @extend_schema(request=JobSubmitSerializer, responses={
        202: JobSerializer, 422: OpenApiResponse(description=(
            "A catalog id the catalog does not have (or not active), or max_tokens over its "
            'context length: `{"model": "unknown or inactive catalog id: x"}`. No job is '
            "created.")),
        **SUBMIT_REFUSED})
    def create(self, request):
        raw_team = request.data.get("team") if isinstance(request.data, dict) else None
        team = self._team_for_submit(raw_team if isinstance(raw_team, str) else None)
        # Abuse limits (docs/routing.md): a submission rate per team, counted before any work,
        # and a cap on the team's unsettled jobs, checked as the job is created. A refused job
        # is never created, so it never counts in the public figures.
        limited = _submission_rate(team, 1)
        if limited is not None:
            return limited
        body = JobSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            job = services.submit(team, data["model"], [dict(m) for m in data["messages"]],
                                  data["max_tokens"])
        except jobs.UnknownCatalogModel as exc:
            raise Unprocessable({"model": str(exc)}) from exc
        except (jobs.TooManyUnsettledJobs, jobs.NoHostOnline) as exc:
            return _submission_refused(exc)
        # Answered as recorded (queued): the pass runs in a worker, GET /v1/jobs/{id} follows it.
        return Response(self.get_serializer(job).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(operation_id="jobs_submit_batch", request=JobBatchSubmitSerializer, responses={
        202: OpenApiResponse(JobBatchSerializer, description="All the jobs, queued, in the "
                                                             "order given."),
        400: OpenApiResponse(description=(
            "Refused, and no job created: each malformed item's errors under its index, or "
            "more items than NETWORK_SUBMIT_BATCH_MAX.")),
        422: OpenApiResponse(description=(
            "Refused, and no job created: an item names a catalog id the catalog does not "
            "have (or not active), or max_tokens over its context length; each such item "
            'under its index: `{"jobs": {"1": {"model": ["unknown or inactive catalog id: '
            'x"]}}}`.')),
        **SUBMIT_REFUSED,
    })
    def submit_batch(self, request):
        """Submit several jobs in one call: all of them are created, or none.

        Each job counts one against the team's submission rate (the budget POST /v1/jobs
        uses), and all of them against its cap on unsettled jobs. One assignment pass is
        queued for the batch; the answer lists the jobs in the order given.
        """
        sent = request.data if isinstance(request.data, dict) else {}
        raw_team, raw_jobs = sent.get("team"), sent.get("jobs")
        team = self._team_for_submit(raw_team if isinstance(raw_team, str) else None)
        # Counted before any work, as a single submission is: each job asked for counts one
        # (at most NETWORK_SUBMIT_BATCH_MAX, at least one for a call without a list).
        asked = len(raw_jobs) if isinstance(raw_jobs, list) else 1
        limited = _submission_rate(
            team, min(max(asked, 1), policy.value("NETWORK_SUBMIT_BATCH_MAX")))
        if limited is not None:
            return limited
        body = JobBatchSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        items = [jobs.Submission(item["model"], [dict(m) for m in item["messages"]],
                                 item["max_tokens"])
                 for item in body.validated_data["jobs"]]
        try:
            created = services.submit_many(team, items)
        except jobs.UnknownCatalogModel as exc:
            # The shape of the serializer's own item errors: each refused item under its index.
            raise Unprocessable({"jobs": {
                str(index): {field: [why] for field, why in problem.items()}
                for index, problem in exc.problems.items()}}) from exc
        except (jobs.TooManyUnsettledJobs, jobs.NoHostOnline) as exc:
            return _submission_refused(exc)
        return Response({"jobs": self.get_serializer(created, many=True).data},
                        status=status.HTTP_202_ACCEPTED)
