"""The host calls' Django views (`Authorization: Bearer tkh_…`, authentication.py): the Django
adapter of the host protocol (host_protocol.py): DRF authenticates, negotiates and parses the
JSON, and the views return the protocol's answer, a malformed body's included. The serializers
describe the calls to the API schema only.

    POST /v1/hosts/heartbeat   (a plain Django view: the hottest call does no DRF work)
    POST /v1/hosts/lease   ({"start": true}: the job comes back already running; {"wait_s": 25}:
        waits up to 25 s for a job to be assigned to this host before answering 204)
    POST /v1/jobs/{id}/start, /complete, /fail   (only the host the job is leased to: else 404;
        complete with {"lease_next": true} also answers the host's next job, started, as "next")
    POST /v1/jobs/complete   (several of the host's jobs in one call: {"jobs": [{id, figures}…],
        "lease_next": true}; each report answered in its place, and as many next jobs)

The buyer's calls are benchmarks/network/buyer_api.py.
"""

from __future__ import annotations

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from benchmarks import policy
from benchmarks.models import JobStatus
from benchmarks.network import host_bodies
from benchmarks.network import host_protocol as protocol
from benchmarks.network.api_shared import StrictFloatField, StrictIntegerField
from benchmarks.network.authentication import HostTokenAuthentication, IsHost
from common import client_address

# The request bodies' serializers describe the calls to the API schema only: the protocol
# reads the bodies (host_bodies.py: the same fields and limits, refused in DRF's words).


class FiguresSerializer(serializers.Serializer):
    ttft_ms = StrictFloatField(min_value=0, allow_null=True)
    completion_tokens = StrictIntegerField(min_value=0)
    elapsed_ms = StrictFloatField(min_value=0)
    result = serializers.JSONField(required=False, allow_null=True)  # size: host_bodies.result


class CompleteSerializer(FiguresSerializer):
    lease_next = serializers.BooleanField(required=False, default=False,
                                          help_text="Also lease the next job, already started.")
    wait_s = StrictFloatField(required=False, default=0.0, min_value=0,
                              max_value=host_bodies.WAIT_MAX_S,
                              help_text="With lease_next: wait for the next job as a lease "
                                        "does (0: do not wait).")


class CompletionSerializer(FiguresSerializer):
    id = serializers.UUIDField(help_text="The job this report completes.")


class CompleteManySerializer(serializers.Serializer):
    # DRF hands max_length to the ListSerializer (many=True); djangorestframework-stubs lack it.
    jobs = CompletionSerializer(many=True, allow_empty=False,  # type: ignore[call-arg]
                                max_length=host_bodies.MAX_REPORTS)
    lease_next = serializers.BooleanField(required=False, default=False, help_text=(
        "Also lease up to one next job, already started, per job completed in this call."))


class FailSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=host_bodies.REASON_MAX_LENGTH)


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
    before Django's middleware (benchmarks/network/host_wsgi.py). Both call `answer_heartbeat`.
    """
    def body(limit: int) -> bytes | None:
        if int(request.META.get("CONTENT_LENGTH") or 0) > limit:
            return None
        return request.body if len(request.body) <= limit else None

    status_code, payload, headers = protocol.answer_heartbeat(
        request.META.get("HTTP_AUTHORIZATION", ""), body, client_address.of_request(request))
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
    benchmarks/network/host_wsgi.py, never DRF."""

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
                              max_value=host_bodies.WAIT_MAX_S, help_text=WAIT_HELP)


class LeaseView(HostView):
    @extend_schema(request=LeaseSerializer, responses={
        200: OpenApiResponse(JobForHostSerializer, description="the next job for this host"),
        204: OpenApiResponse(description="no job for you")})
    def post(self, request):
        """The next job assigned to this host, or 204 (at once, or after waiting `wait_s`)."""
        limited = protocol.lease_limited(request.META.get("HTTP_AUTHORIZATION", ""))
        if limited is not None:
            return _respond(limited)
        # A bare POST (what older agents send, whatever its content type) asks for nothing more.
        sent = request.data if request.content_type.startswith("application/json") else {}
        return _answer("lease", None, sent, self.host)


def _answer(call: str, job_id, data: object, host) -> Response:
    """The protocol's answer to the call (its body read there), as DRF renders it."""
    status_code, body, headers = protocol.read_job_call(call, job_id, data)(host)
    return Response(body, status=status_code, headers=headers or None)


def _respond(answer: protocol.Answer) -> Response:
    status_code, body, headers = answer
    return Response(body, status=status_code, headers=headers or None)


class JobStartView(HostView):
    @extend_schema(request=None, responses={
        200: OpenApiResponse(JobStateSerializer, description="running"),
        404: NOT_YOUR_JOB, 409: JOB_CONFLICT})
    def post(self, request, job_id):
        return _answer("start", job_id, None, self.host)


class JobCompleteView(HostView):
    @extend_schema(request=CompleteSerializer, responses={
        200: OpenApiResponse(CompletedJobSerializer, description="completed"),
        404: NOT_YOUR_JOB, 409: JOB_CONFLICT})
    def post(self, request, job_id):
        return _answer("complete", job_id, request.data, self.host)


class JobCompleteManyView(HostView):
    # Its own id: drf-spectacular names both complete calls "jobs_complete_create".
    @extend_schema(operation_id="jobs_complete_many", request=CompleteManySerializer,
                   responses={200: OpenApiResponse(description=(
        "`jobs`: for each report, in order, the job's state as /complete answers it, or "
        "{id, error: {status, detail}} with the status /complete would have answered "
        "(404, 409, 400); `next` (with lease_next): the next jobs, started."))})
    def post(self, request):
        """Complete several jobs of this host in one call (a host with several slots)."""
        return _answer("complete_many", None, request.data, self.host)


class JobFailView(HostView):
    @extend_schema(request=FailSerializer, responses={
        200: OpenApiResponse(JobStateSerializer, description="failed"),
        404: NOT_YOUR_JOB, 409: JOB_CONFLICT})
    def post(self, request, job_id):
        return _answer("fail", job_id, request.data, self.host)
