"""GET /api/v1/teams/<slug>/audit/: a team's audit log, newest first, for its owners and
admins: JSON pages by default, the whole range as JSON lines (`?format=jsonl`) or CSV
(`?format=csv`). Another team's caller gets 404, any other role 403, and so does a
token: tokens never manage people or tokens, and the log is about both."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import Team
from accounts.tenancy import Access
from accounts.tenancy_api import TeamScopedViewSet
from audit import export
from audit.models import Action, ActorKind, AuditEntry
from audit.snapshot import OBJECT_TYPES
from common.pagination import StrictCursorPagination


class JSONLinesRenderer(BaseRenderer):
    """`?format=jsonl`: one JSON object a line."""

    media_type = "application/jsonl"
    format = "jsonl"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: Mapping[str, Any] | None = None) -> str:
        return "".join(export.json_lines(data))


class CSVRenderer(BaseRenderer):
    """`?format=csv`: the columns of audit.export."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: Mapping[str, Any] | None = None) -> str:
        return "".join(export.csv_lines(data))


class AuditEntrySerializer(serializers.Serializer):
    id = serializers.UUIDField()
    at = serializers.DateTimeField()
    team = serializers.CharField()
    actor_kind = serializers.ChoiceField(choices=ActorKind.choices)
    actor = serializers.CharField(help_text="the user's address, or the token by name and prefix")
    address = serializers.IPAddressField(allow_null=True, help_text="the client's address")
    action = serializers.ChoiceField(choices=Action.choices)
    object_type = serializers.ChoiceField(choices=OBJECT_TYPES)
    object_id = serializers.CharField(help_text="its public id (a team's or status page's: its slug)")
    object_name = serializers.CharField()
    changes = serializers.DictField(
        child=serializers.DictField(), help_text='{field: {"before": …, "after": …}}; a secret '
                                                  'shows as "•••", "changed" or "" only')


class AuditPages(StrictCursorPagination):
    ordering = "-at"


FILTERS = [
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="only changes at or after"),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="only changes before"),
    OpenApiParameter("object_type", str, enum=OBJECT_TYPES, description="only this kind of object"),
    OpenApiParameter("actor", str, description="only this actor, as the entries name it"),
    OpenApiParameter("format", str, enum=["json", "jsonl", "csv"],
                     description="json: pages; jsonl and csv: the whole range as one file"),
]


class AuditViewSet(TeamScopedViewSet):
    scoped_model = AuditEntry
    serializer_class = AuditEntrySerializer
    pagination_class = AuditPages
    renderer_classes = [JSONRenderer, JSONLinesRenderer, CSVRenderer]
    roles_may_not_read = True  # members, viewers and tokens get 403 (documented in the schema)

    def handle_exception(self, exc: Exception) -> Response:
        # An error is JSON whatever format was asked for: `detail`, as everywhere in the API.
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return super().handle_exception(exc)

    @extend_schema(parameters=FILTERS, responses=AuditEntrySerializer(many=True))
    def list(self, request: Request, slug: str) -> Response:
        """The team's audit log, newest first (owners and admins)."""
        access = Access.for_request(request)
        team = Team.objects.visible_to(access).filter(slug=slug).first()
        if team is None:
            raise Http404("No such team.")
        if not access.can_manage(team.pk):
            raise exceptions.PermissionDenied("Only owners and admins read the audit log.")
        entries = filtered(self.get_queryset().filter(team=team), request)
        kind = request.accepted_renderer.format
        if kind in ("jsonl", "csv"):  # the whole range, one file
            rows = [export.entry_dict(entry, team.slug) for entry in entries.iterator(chunk_size=500)]
            return Response(rows, headers={
                "Content-Disposition": f'attachment; filename="audit-{team.slug}.{kind}"'})
        page = self.paginate_queryset(entries)
        return self.get_paginated_response([export.entry_dict(e, team.slug) for e in page or []])


def filtered(entries: QuerySet[AuditEntry], request: Request) -> QuerySet[AuditEntry]:
    if (since := _time(request, "since")) is not None:
        entries = entries.filter(at__gte=since)
    if (until := _time(request, "until")) is not None:
        entries = entries.filter(at__lt=until)
    if object_type := request.query_params.get("object_type"):
        entries = entries.filter(object_type=object_type)
    if actor := request.query_params.get("actor"):
        entries = entries.filter(actor=actor)
    return entries.order_by("-at", "-id")


def _time(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = parse_datetime(raw)
    except ValueError:
        value = None
    if value is None:
        raise exceptions.ValidationError({name: ["expected an ISO 8601 time, e.g. 2026-11-01T00:00:00Z"]})
    return timezone.make_aware(value, UTC) if timezone.is_naive(value) else value

