"""The buyer's calls (a team API token or a session, through the scoping layer, accounts.tenancy):
    POST /v1/jobs   (202 with the job id; 429 over the team's limits)
    POST /v1/jobs/batch   ({"jobs": [...]}: up to NETWORK_SUBMIT_BATCH_MAX jobs, all or none;
        each counts one against the team's submission rate)
    GET /v1/jobs/{id}   (own team only: else 404)

Views only parse, call the flow's service (benchmarks/network/services.py) and shape the answer.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.response import Response

from accounts.models import Team
from accounts.tenancy import Access
from accounts.tenancy_api import TeamScopedViewSet
from benchmarks import policy
from benchmarks.models import Job, JobStatus
from benchmarks.network import jobs, services
from benchmarks.network.api_shared import StrictIntegerField, too_many
from common import ratelimit
from common.errors import Unprocessable

MAX_MESSAGES = 256


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
    return too_many(f"Too many job submissions from this team: at most {limit} per {window} s.",
                     "rate_limited", retry_after, limit=limit, window_s=window)


def _submission_refused(exc: jobs.TooManyUnsettledJobs | jobs.NoHostOnline) -> Response:
    if isinstance(exc, jobs.TooManyUnsettledJobs):
        return too_many(str(exc), "too_many_unsettled_jobs",
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
