"""REST API for a team's maintenance windows: list, create, read, update, delete at
/api/v1/maintenance-windows/, as the maintenance page does.

Every view derives from TeamScopedViewSet, so a window is reached only through the team scoping
layer (another team's window is a 404); reads need membership, writes a writing role (viewers
and read-only tokens get 403), as on the page. The serializer only parses: whether a window may
be saved is scans.maintenance.window_errors, the rules the page's form applies, with the same
words, each under its field (422: the schema cannot say them)."""

from __future__ import annotations

import zoneinfo
from typing import Any, cast
from uuid import UUID

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.serializers import BaseSerializer

from accounts.tenancy import Access
from accounts.tenancy_api import TeamScopedViewSet
from accounts.validators import validate_one_line
from audit import record as audit
from common.errors import Unprocessable
from common.pagination import StrictCursorPagination
from scans import maintenance
from scans.models import Endpoint, MaintenanceKind, MaintenanceWindow
from scans.status_pages import subscriptions

ZONES = sorted(zoneinfo.available_timezones() - {"localtime", "Factory"})


class MaintenanceWindowSerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="public_id", read_only=True)
    # Resolved in the view through the scoping layer: an unknown or foreign slug is a 404.
    team = serializers.SlugField(source="team.slug", required=False)
    name = serializers.CharField(max_length=100, validators=[validate_one_line])
    endpoint = serializers.UUIDField(
        required=False, allow_null=True,
        help_text="the endpoint's id; null: every endpoint of the team")
    kind = serializers.ChoiceField(
        choices=MaintenanceKind.choices,
        help_text="once: from starts_at to ends_at; weekly: on weekdays at start_time for "
                  "duration_minutes, in timezone")
    starts_at = serializers.DateTimeField(
        required=False, allow_null=True,
        help_text=f"once: no earlier than {maintenance.span_text(maintenance.PAST_GRACE)} before "
                  f"now, within {maintenance.span_text(maintenance.MAX_AHEAD)} of now")
    ends_at = serializers.DateTimeField(
        required=False, allow_null=True,
        help_text=f"once: after starts_at, at most {maintenance.span_text(maintenance.MAX_LENGTH)} "
                  "after it")
    weekdays = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=6), required=False,
        help_text="weekly: 0 (Monday) to 6 (Sunday)")
    start_time = serializers.TimeField(required=False, allow_null=True,
                                       help_text="weekly: the local time it starts")
    duration_minutes = serializers.IntegerField(
        required=False, allow_null=True,
        help_text=f"weekly: 1 to {maintenance.MAX_WEEKLY_MINUTES}")
    timezone = serializers.ChoiceField(choices=ZONES, required=False, default="UTC")
    pause_scans = serializers.BooleanField(
        required=False, default=False,
        help_text="also start no scheduled scan during the window (alerts are held either way)")
    description = serializers.SerializerMethodField()

    class Meta:
        model = MaintenanceWindow
        fields = ["id", "team", "name", "endpoint", "kind", "starts_at", "ends_at", "weekdays",
                  "start_time", "duration_minutes", "timezone", "pause_scans", "description",
                  "created_at"]
        read_only_fields = ["created_at"]

    @extend_schema_field(serializers.CharField())
    def get_description(self, window: MaintenanceWindow) -> str:
        return maintenance.describe(window)

    def to_representation(self, instance: MaintenanceWindow) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["endpoint"] = str(instance.endpoint.public_id) if instance.endpoint is not None else None
        return data

    def validate_endpoint(self, value: UUID | None) -> Endpoint | None:
        if value is None:
            return None
        access = Access.for_request(self.context["request"])
        endpoint = Endpoint.objects.visible_to(access).filter(public_id=value).first()
        if endpoint is None:
            raise Unprocessable({"endpoint": ["No such endpoint in your teams."]})
        return endpoint

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        window = self.instance
        merged = {name: attrs[name] if name in attrs else getattr(window, name, None)
                  for name in ("kind", "starts_at", "ends_at", "weekdays", "start_time",
                               "duration_minutes")}
        endpoint = attrs["endpoint"] if "endpoint" in attrs else (window.endpoint if window else None)
        before = None
        if (window is not None and window.kind == MaintenanceKind.ONCE and window.starts_at
                and window.ends_at and (endpoint.pk if endpoint else None) == window.endpoint_id):
            before = (window.starts_at, window.ends_at)  # time it covers already may stay
        refused = maintenance.window_errors(
            merged["kind"] or MaintenanceKind.ONCE, starts_at=merged["starts_at"],
            ends_at=merged["ends_at"], weekdays=merged["weekdays"],
            start_time=merged["start_time"], duration_minutes=merged["duration_minutes"],
            now=timezone.now(), before=before)
        if refused:  # schema-valid but refused by the rules: 422, as the API answers elsewhere
            raise Unprocessable({k: [v] for k, v in refused.items()})
        if merged["kind"] == MaintenanceKind.ONCE:  # a window is one kind, its other fields empty
            attrs.update(weekdays=[], start_time=None, duration_minutes=None)
        else:
            attrs.update(starts_at=None, ends_at=None)
        return attrs


class MaintenanceWindowPages(StrictCursorPagination):
    ordering = "created_at"


REFUSED = OpenApiResponse(description=(
    "Refused, nothing saved: the window breaks a rule of scans.maintenance.window_errors (a "
    "one-off window starting over 1 h ago, lasting over 31 days, ending before it starts; a "
    "weekly one with no day or a duration outside 1 to 10,080 minutes), or names an endpoint "
    'outside the team, each under its field (`{"starts_at": ["…"]}`).'))


@extend_schema_view(
    create=extend_schema(responses={201: MaintenanceWindowSerializer, 422: REFUSED}),
    update=extend_schema(responses={200: MaintenanceWindowSerializer, 422: REFUSED}),
    partial_update=extend_schema(responses={200: MaintenanceWindowSerializer, 422: REFUSED}),
)
class MaintenanceWindowViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    mixins.UpdateModelMixin, mixins.DestroyModelMixin, TeamScopedViewSet,
):
    """Maintenance windows of the caller's teams: alerts are held during a window, its time is
    left out of the SLO and the status page's availability, and the pages show the endpoints
    it covers as in maintenance. Creating one needs a writing role in its team (a team token's
    own team, or `team` by slug for a logged-in user)."""

    scoped_model = MaintenanceWindow
    serializer_class = MaintenanceWindowSerializer
    pagination_class = MaintenanceWindowPages

    def narrow_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.select_related("team", "endpoint")

    @staticmethod
    def _same_team(serializer: BaseSerializer[Any], team_id: int) -> None:
        endpoint = serializer.validated_data.get("endpoint")
        if endpoint is not None and endpoint.team_id != team_id:
            raise Unprocessable({"endpoint": ["The endpoint is in another team."]})

    def perform_create(self, serializer: BaseSerializer[Any]) -> None:
        team = self.team_to_create_in(serializer)
        self._same_team(serializer, team.pk)
        with transaction.atomic():
            window = serializer.save(team=team)
            audit.created(window)
            subscriptions.maintenance_news(window)  # never raises; mailed once committed

    def perform_update(self, serializer: BaseSerializer[Any]) -> None:
        serializer.validated_data.pop("team", None)  # a window never moves between teams
        self._same_team(serializer, cast(MaintenanceWindow, serializer.instance).team_id)
        with transaction.atomic(), audit.track(cast(MaintenanceWindow, serializer.instance)):
            serializer.save()

    def perform_destroy(self, instance: MaintenanceWindow) -> None:
        """Past SLO figures count the window's time again."""
        with audit.track(instance):
            MaintenanceWindow.objects.for_team(instance.team_id).filter(pk=instance.pk).delete()
