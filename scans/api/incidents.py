"""REST API for a team's incidents at /api/v1/incidents/: list (open first filter), read with
the problems and timeline, declare a manual incident, acknowledge, post an update (a status
and words, "resolved" resolves), write the postmortem — as the incident pages do.

Every view derives from TeamScopedViewSet (another team's incident is a 404); reads need
membership, every change a writing role (viewers and read-only tokens get 403). What an
incident's state allows is scans/notify/incidents.py's rule, refused with a 409 and its words."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from accounts.tenancy import Access
from accounts.tenancy_api import TeamScopedViewSet
from accounts.validators import validate_one_line
from common.errors import Unprocessable
from common.pagination import StrictCursorPagination
from scans.models import Endpoint, Incident, IncidentProblem, IncidentStatus, IncidentUpdate
from scans.notify import incidents

OPEN_STATUSES = [s for s in IncidentStatus.values if s != IncidentStatus.RESOLVED]


class ProblemSerializer(serializers.ModelSerializer):
    endpoint = serializers.UUIDField(source="endpoint.public_id", read_only=True)
    endpoint_name = serializers.CharField(source="endpoint.name", read_only=True)
    trouble = serializers.CharField(read_only=True, help_text="down, floor (below the grade "
                                                              "floor) or slo (a fast burn)")

    class Meta:
        model = IncidentProblem
        fields = ["endpoint", "endpoint_name", "trouble", "started_at", "ended_at"]


class TimelineSerializer(serializers.ModelSerializer):
    kind = serializers.CharField(read_only=True, help_text="opened, alert, acknowledged, update, "
                                                           "resolved or postmortem")
    alert_kind = serializers.CharField(source="alert.kind", read_only=True, allow_null=True,
                                       default=None, help_text="the alert's event, for alert lines")
    status = serializers.CharField(read_only=True, help_text="the status an update set ('' when none)")
    by = serializers.CharField(read_only=True, help_text="a user's email, a token's name, or system")

    class Meta:
        model = IncidentUpdate
        fields = ["at", "kind", "status", "text", "public", "by", "alert_kind"]


class EndpointIds(serializers.ListField):
    """Endpoint ids in, the incident's endpoints' ids out."""

    def to_representation(self, data: Any) -> list[str]:
        return [str(e.public_id) for e in data.all()]


class IncidentSerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="public_id", read_only=True)
    team = serializers.SlugField(source="team.slug", required=False,
                                 help_text="for a new manual incident: the team's slug (a team "
                                           "token's own team by default)")
    title = serializers.CharField(max_length=200, validators=[validate_one_line])
    status = serializers.ChoiceField(choices=OPEN_STATUSES, required=False,
                                     default=IncidentStatus.INVESTIGATING)
    endpoints = EndpointIds(child=serializers.UUIDField(), required=False,
                            help_text="ids of the affected endpoints; none: the whole team")
    text = serializers.CharField(write_only=True, max_length=5000,
                                 help_text="the first update's words")
    public = serializers.BooleanField(write_only=True, required=False, default=False,
                                      help_text="show the first update on the public status pages")
    problems = ProblemSerializer(many=True, read_only=True)
    timeline = TimelineSerializer(many=True, read_only=True)

    class Meta:
        model = Incident
        fields = ["id", "team", "title", "status", "manual", "endpoints", "opened_at",
                  "acknowledged_at", "acknowledged_by", "resolved_at", "postmortem", "text",
                  "public", "problems", "timeline"]
        read_only_fields = ["manual", "opened_at", "acknowledged_at", "acknowledged_by",
                            "resolved_at", "postmortem"]

    def validate_endpoints(self, value: list) -> list[Endpoint]:
        access = Access.for_request(self.context["request"])
        found = list(Endpoint.objects.visible_to(access).filter(public_id__in=value))
        if len(found) != len(set(value)):
            raise Unprocessable({"endpoints": ["No such endpoint in your teams."]})
        return found


class UpdateSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=IncidentStatus.choices)
    text = serializers.CharField(max_length=5000)
    public = serializers.BooleanField(required=False, default=False)


class PostmortemSerializer(serializers.Serializer):
    postmortem = serializers.CharField(max_length=20000)


class IncidentPages(StrictCursorPagination):
    ordering = "-opened_at"


CONFLICT = OpenApiResponse(description="The incident's state does not allow it (an update to a "
                                       "resolved incident; a postmortem of an open one).")


@extend_schema_view(
    list=extend_schema(parameters=[OpenApiParameter(
        "open", bool, description="true: only open incidents; false: only resolved ones")]),
    create=extend_schema(responses={201: IncidentSerializer, 422: OpenApiResponse(
        description="An endpoint outside the team, under its field.")}),
)
class IncidentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                      TeamScopedViewSet):
    """Incidents of the caller's teams: confirmed problems grouped (opened and resolved by the
    alerts) and problems declared by hand, each with its problems and timeline."""

    scoped_model = Incident
    serializer_class = IncidentSerializer
    pagination_class = IncidentPages

    def narrow_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        queryset = queryset.select_related("team").prefetch_related(
            "endpoints", "problems__endpoint", "timeline__alert")
        wanted = self.request.query_params.get("open")
        if wanted is not None:
            if wanted not in ("true", "false"):
                raise ValidationError({"open": ["true or false"]})
            queryset = queryset.filter(resolved_at__isnull=(wanted == "true"))
        return queryset

    def perform_create(self, serializer: BaseSerializer[Any]) -> None:
        team = self.team_to_create_in(serializer)
        data = serializer.validated_data
        chosen = data.get("endpoints", [])
        if any(e.team_id != team.pk for e in chosen):
            raise Unprocessable({"endpoints": ["An endpoint is in another team."]})
        serializer.instance = incidents.open_manual(
            team, data["title"], chosen, status=data["status"], text=data["text"],
            public=data["public"])

    def _answer(self, incident: Incident) -> Response:
        fresh = self.get_queryset().get(pk=incident.pk)
        return Response(IncidentSerializer(fresh, context=self.get_serializer_context()).data)

    @extend_schema(request=None, responses={200: IncidentSerializer})
    @action(detail=True, methods=["post"], url_path="acknowledge")
    def acknowledge(self, request: Request, public_id: str | None = None) -> Response:
        """Acknowledge: somebody is on it, and the "still down" reminders of its endpoints
        stop. Acknowledging again (or a resolved incident) changes nothing."""
        incident = self.get_object()
        incidents.acknowledge(incident)
        return self._answer(incident)

    @extend_schema(request=UpdateSerializer, responses={201: IncidentSerializer, 409: CONFLICT})
    @action(detail=True, methods=["post"], url_path="updates")
    def post_update(self, request: Request, public_id: str | None = None) -> Response:
        """Post an update: a status (investigating, identified, monitoring; resolved resolves
        the incident) and words, shown on the public status pages when `public`."""
        incident = self.get_object()
        body = UpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            incidents.post_update(incident, body.validated_data["status"],
                                  body.validated_data["text"],
                                  public=body.validated_data["public"])
        except incidents.IncidentError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        answer = self._answer(incident)
        answer.status_code = status.HTTP_201_CREATED
        return answer

    @extend_schema(request=PostmortemSerializer, responses={200: IncidentSerializer, 409: CONFLICT})
    @action(detail=True, methods=["put"], url_path="postmortem")
    def postmortem(self, request: Request, public_id: str | None = None) -> Response:
        """Write (or rewrite) a resolved incident's postmortem."""
        incident = self.get_object()
        body = PostmortemSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            incidents.set_postmortem(incident, body.validated_data["postmortem"])
        except incidents.IncidentError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return self._answer(incident)
