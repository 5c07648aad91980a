"""REST API for a team's status page (one per team): read and change its settings at
/api/v1/teams/<slug>/status-page/, as the status page settings page does: whether it is on,
its address (slug), its title, and which endpoints it shows, in order, under which names.

The team is reached through the scoping layer (another team's is a 404); reading needs any
role, writing a writing role (viewers and read-only tokens get 403). The write goes through
the one service the page uses (scans/status_pages/settings.py save_settings), which records
it in the audit log and drops the cached public page. Subscribers' addresses are never
answered, only how many are confirmed."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import Team
from accounts.tenancy import Access
from accounts.validators import validate_one_line
from common.errors import Conflict, Unprocessable
from scans.models import Endpoint, StatusPage
from scans.status_pages import subscriptions
from scans.status_pages.settings import SLUG_RE, page_of, save_settings, validate_slug

__all__ = ["StatusPageSerializer", "StatusPageView", "team_in_scope"]

MAX_SHOWN = 100  # endpoints one page shows


def team_in_scope(request: Request, slug: str) -> Team:
    """The caller's team of this slug, through the scoping layer; 404 for anyone else's."""
    team = Team.objects.visible_to(Access.for_request(request)).filter(slug=slug).first()
    if team is None:
        raise exceptions.NotFound("No such team.")
    return team


class ShownEndpointSerializer(serializers.Serializer):
    endpoint = serializers.UUIDField(help_text="the endpoint's id (one of the team's)")
    name = serializers.CharField(max_length=100, required=False, allow_blank=True, default="",
                                 validators=[validate_one_line],
                                 help_text="the name the page shows; blank: the endpoint's own")


class StatusPageSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(help_text="on: the page is public at `url`")
    slug = serializers.CharField(
        max_length=50, help_text="the page's address, /status/<slug>/: 3 to 50 lowercase "
                                 "letters, digits and single hyphens; not a reserved word")
    title = serializers.CharField(max_length=100, allow_blank=True, validators=[validate_one_line],
                                  help_text='blank: "Status"')
    endpoints = ShownEndpointSerializer(  # type: ignore[call-arg]  # max_length: the stubs lack it
        many=True, max_length=MAX_SHOWN, help_text="what the page shows, in this order")
    url = serializers.SerializerMethodField()
    subscribers = serializers.SerializerMethodField()
    updated_at = serializers.DateTimeField(read_only=True)

    schema_limits = {"slug": {"pattern": SLUG_RE.pattern}}  # and no "--": a 422

    def get_url(self, page: StatusPage) -> str:
        return self.context["request"].build_absolute_uri(reverse("status-page", args=[page.slug]))

    def get_subscribers(self, page: StatusPage) -> int:
        """Confirmed subscribers: how many, never who."""
        return subscriptions.count_confirmed(page)

    def to_representation(self, instance: StatusPage) -> dict[str, Any]:
        """The page's own fields, and its entries (rows of their own) as `endpoints`."""
        return {
            "enabled": instance.enabled, "slug": instance.slug, "title": instance.title,
            "endpoints": [{"endpoint": str(entry.endpoint.public_id), "name": entry.display_name}
                          for entry in instance.entries.select_related("endpoint")
                          .order_by("position", "pk")],
            "url": self.get_url(instance), "subscribers": self.get_subscribers(instance),
            "updated_at": self.fields["updated_at"].to_representation(instance.updated_at),
        }

    def validate_slug(self, value: str) -> str:
        if value == getattr(self.instance, "slug", None):
            return value  # a page keeps the address it has
        try:
            return validate_slug(value)
        except DjangoValidationError as exc:  # a reserved word: no schema lists them
            raise Unprocessable({"slug": exc.messages}) from None

    def validate_endpoints(self, value: list[dict[str, Any]]) -> list[tuple[Endpoint, str]]:
        page = self.instance
        assert isinstance(page, StatusPage)  # the view always binds the team's page
        if any("endpoint" not in entry for entry in value):  # a PATCH makes DRF skip it
            raise serializers.ValidationError("Each entry names its endpoint.")
        wanted = [entry["endpoint"] for entry in value]
        if len(set(wanted)) != len(wanted):
            raise Unprocessable({"endpoints": ["An endpoint is listed twice."]})
        found = Endpoint.objects.for_team(page.team_id).in_bulk(wanted, field_name="public_id")
        if len(found) != len(wanted):
            raise Unprocessable({"endpoints": ["No such endpoint in the page's team."]})
        return [(found[entry["endpoint"]], entry.get("name", "")) for entry in value]

    def update(self, instance: StatusPage, validated: dict[str, Any]) -> StatusPage:
        shown = validated.get("endpoints")
        if shown is None:
            shown = [(entry.endpoint, entry.display_name) for entry in
                     instance.entries.select_related("endpoint").order_by("position", "pk")]
        try:
            return save_settings(
                instance, enabled=validated.get("enabled", instance.enabled),
                slug=validated.get("slug", instance.slug),
                title=validated.get("title", instance.title), shown=shown)
        except DjangoValidationError as exc:  # the address is another page's
            raise Conflict({"slug": exc.messages}) from None


REFUSED = OpenApiResponse(description=(
    "Refused, nothing saved: a reserved address, an endpoint listed twice or not of the "
    'team (`{"slug": ["…"]}`, `{"endpoints": ["…"]}`).'))
TAKEN = OpenApiResponse(description='Refused, nothing saved: the address is another page\'s '
                                    '(`{"slug": ["…"]}`).')


class StatusPageView(APIView):
    """The team's status page settings."""

    permission_classes = [IsAuthenticated]

    def _page(self, request: Request, slug: str, write: bool) -> StatusPage:
        team = team_in_scope(request, slug)
        if write and not Access.for_request(request).can_write(team.pk):
            raise exceptions.PermissionDenied("Your role in this team is read-only.")
        return page_of(team)

    @extend_schema(responses=StatusPageSerializer)
    def get(self, request: Request, slug: str) -> Response:
        """Read the team's status page settings"""
        page = self._page(request, slug, write=False)
        return Response(StatusPageSerializer(page, context={"request": request}).data)

    @extend_schema(request=StatusPageSerializer,
                   responses={200: StatusPageSerializer, 409: TAKEN, 422: REFUSED})
    def put(self, request: Request, slug: str) -> Response:
        """Replace the team's status page settings"""
        return self._save(request, slug, partial=False)

    @extend_schema(request=StatusPageSerializer,
                   responses={200: StatusPageSerializer, 409: TAKEN, 422: REFUSED})
    def patch(self, request: Request, slug: str) -> Response:
        """Update the team's status page settings"""
        return self._save(request, slug, partial=True)

    def _save(self, request: Request, slug: str, partial: bool) -> Response:
        page = self._page(request, slug, write=True)
        serializer = StatusPageSerializer(page, data=request.data, partial=partial,
                                          context={"request": request})
        serializer.is_valid(raise_exception=True)
        saved = serializer.save()
        saved.refresh_from_db()
        return Response(StatusPageSerializer(saved, context={"request": request}).data)
