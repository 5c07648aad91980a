"""REST API for a team's notification channels: list, create, read, update, delete,
send a test message, and a channel's delivery history.

Every view derives from TeamScopedViewSet, so a channel is reached only through the team
scoping layer (another team's channel is a 404); writes need a writing role. A channel's URL
and signing secret are write-only, as on the channels page: accepted, stored encrypted, never
returned (`has_url`, `has_secret` say whether one is set; `destination` is the host it sends
to, never a token). What a channel is given is checked by the one write service the page uses
(scans/notify/channels/service.py): an Apprise URL Apprise cannot read as the kind's, or a host the
outbound guard refuses, is a 400 under `url` and nothing is saved."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from drf_spectacular.utils import (
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
from common.errors import Conflict, Unprocessable, try_again_later
from common.pagination import StrictCursorPagination
from scans.models import ChannelKind, Delivery, DeliveryStatus, NotificationChannel
from scans.notify.channels import delivery, kinds, service

NAME_TAKEN = "The team has a channel of this name already."


def _account(request: Request) -> str:
    """Whose "Send test" limit a call counts against: the signed-in account, or for a team
    token the account that made it (the token itself if that account is gone)."""
    token = getattr(request.user, "token", None)
    if token is None:
        return f"user:{request.user.pk}"
    return f"user:{token.created_by_id}" if token.created_by_id else f"token:{token.pk}"


class ChannelSerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="public_id", read_only=True)
    # Resolved in the view through the scoping layer: an unknown or foreign slug is a 404.
    team = serializers.SlugField(source="team.slug", required=False)
    # A channel keeps its kind: another kind is another channel.
    kind = serializers.ChoiceField(choices=ChannelKind.choices)
    name = serializers.CharField(max_length=100, validators=[validate_one_line])
    enabled = serializers.BooleanField(
        required=False, default=True, help_text="false: alerts are not sent to it (kept, not deleted)")
    # Write-only: the service's token is in it. Omitted or "" on an update keeps the stored
    # one; email needs none.
    url = serializers.CharField(
        write_only=True, required=False, allow_blank=True, trim_whitespace=True,
        max_length=kinds.MAX_URL_CHARS,
        help_text="Where it sends (an Apprise URL, or a webhook's http(s) URL); write-only. "
                  + " ".join(f"{ChannelKind(k).label}: {text}" for k, text in kinds.EXAMPLES.items()))
    # Webhooks only: signs each body (HMAC-SHA256, header X-Tokvera-Signature). Write-only;
    # "" removes the stored secret.
    secret = serializers.CharField(
        write_only=True, required=False, allow_blank=True, trim_whitespace=True, max_length=500,
        help_text="Webhooks only: the signing secret; write-only, \"\" removes the stored one")
    has_url = serializers.SerializerMethodField()
    has_secret = serializers.SerializerMethodField()
    destination = serializers.CharField(read_only=True, help_text="the host it sends to, never a token")

    class Meta:
        model = NotificationChannel
        fields = ["id", "team", "kind", "name", "enabled", "url", "secret", "has_url", "has_secret",
                  "destination", "created_at"]
        read_only_fields = ["created_at"]
        validators: list = []  # the name's uniqueness per team is checked on save (IntegrityError)

    @extend_schema_field(serializers.BooleanField())
    def get_has_url(self, channel: NotificationChannel) -> bool:
        return bool(channel.config_encrypted) and bool(service.stored_config(channel).get("url"))

    @extend_schema_field(serializers.BooleanField())
    def get_has_secret(self, channel: NotificationChannel) -> bool:
        return service.has_secret(channel)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        channel = self.instance or NotificationChannel()
        kind = attrs.get("kind", channel.kind)
        if self.instance is not None and kind != self.instance.kind:
            raise Conflict(
                {"kind": ["A channel keeps its kind: add a new channel for another kind."]})
        change = service.ChannelChange(
            kind=kind,
            name=attrs.get("name", channel.name),
            enabled=attrs.get("enabled", channel.enabled if self.instance else True),
            url=attrs.get("url", ""),
            secret=attrs.get("secret") or "",
            clear_secret=attrs.get("secret") == "",
        )
        request = self.context["request"]
        can_manage = self.instance is None or Access.for_request(request).can_manage(self.instance.team_id)
        try:
            # Applied to the channel in memory; saved by create/update. Nothing else can fail
            # after this but the name's uniqueness, which refuses the save as a whole.
            self.warnings = service.prepare(channel, change, can_manage)
        # The schema cannot say what a kind's service reads or the guard refuses: a 422.
        except kinds.ChannelInvalid as exc:
            raise Unprocessable({"url": [str(exc)]}) from None
        except service.ChannelRefused as exc:
            raise exceptions.PermissionDenied(f"{exc.field}: {exc}") from None
        except service.ChannelFieldError as exc:
            raise Unprocessable({exc.field: [str(exc)]}) from None
        self.prepared = channel
        return attrs

    def _save(self, channel: NotificationChannel) -> NotificationChannel:
        try:
            with transaction.atomic():
                return service.save(channel)
        except IntegrityError:
            raise Conflict({"name": [NAME_TAKEN]}) from None

    def create(self, validated: dict[str, Any]) -> NotificationChannel:
        channel = self.prepared
        channel.team = validated["team"]
        return self._save(channel)

    def update(self, instance: NotificationChannel, validated: dict[str, Any]) -> NotificationChannel:
        return self._save(self.prepared)


class DeliverySerializer(serializers.ModelSerializer):
    """One alert (or test message) sent to the channel: its tries are this row."""

    event = serializers.UUIDField(source="event.public_id", help_text="the alert event's id")
    event_kind = serializers.CharField(
        source="event.kind", help_text="down, down_recovered, below_floor, …, or test")
    endpoint = serializers.SerializerMethodField()
    scan = serializers.SerializerMethodField()
    status = serializers.ChoiceField(
        choices=DeliveryStatus.choices,
        help_text="pending (due at next_attempt_at: a first try or a retry), sent, or failed "
                  "(out of tries, or an answer no retry changes)")
    last_error = serializers.CharField(help_text="why the last try failed (tokens redacted); \"\"")

    class Meta:
        model = Delivery
        fields = ["event", "event_kind", "endpoint", "scan", "status", "attempts", "last_error",
                  "next_attempt_at", "created_at", "sent_at"]
        read_only_fields = fields

    @extend_schema_field(serializers.UUIDField(allow_null=True))
    def get_endpoint(self, row: Delivery) -> str | None:
        endpoint = row.event.endpoint
        return str(endpoint.public_id) if endpoint else None

    @extend_schema_field(serializers.UUIDField(allow_null=True))
    def get_scan(self, row: Delivery) -> str | None:
        scan = row.event.scan
        return str(scan.public_id) if scan else None


class ChannelPages(StrictCursorPagination):
    ordering = "created_at"
    page_size = 100
    max_page_size = 500


class DeliveryPages(StrictCursorPagination):
    ordering = "-created_at"
    page_size = 50
    max_page_size = 500


CLASHES = OpenApiResponse(description=(
    "Refused, nothing saved: the team has a channel of this name already, or the channel "
    'would change its kind (`{"name": ["…"]}`, `{"kind": ["…"]}`).'))
UNUSABLE = OpenApiResponse(description=(
    "Refused, nothing saved: a URL the kind's service cannot read or the outbound guard "
    "refuses, none where the kind needs one, or a secret for a kind that is not signed "
    '(`{"url": ["…"]}`, `{"secret": ["…"]}`).'))


@extend_schema_view(
    create=extend_schema(responses={201: ChannelSerializer, 409: CLASHES, 422: UNUSABLE}),
    update=extend_schema(responses={200: ChannelSerializer, 409: CLASHES, 422: UNUSABLE}),
    partial_update=extend_schema(responses={200: ChannelSerializer, 409: CLASHES,
                                            422: UNUSABLE}),
)
class ChannelViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    mixins.UpdateModelMixin, mixins.DestroyModelMixin, TeamScopedViewSet,
):
    """Notification channels of the caller's teams. Creating one needs a writing role in its
    team (a team token's own team, or `team` by slug for a logged-in user)."""

    scoped_model = NotificationChannel
    writes_need = "can_change_channels"  # owners, admins and read-write tokens
    serializer_class = ChannelSerializer
    pagination_class = ChannelPages

    def narrow_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.select_related("team")

    def perform_create(self, serializer: BaseSerializer[Any]) -> None:
        team = self.team_to_create_in(serializer)
        if not Access.for_request(self.request).can_change_channels(team.pk):
            raise exceptions.PermissionDenied("Only owners and admins change notification channels.")
        serializer.save(team=team)

    def perform_update(self, serializer: BaseSerializer[Any]) -> None:
        serializer.validated_data.pop("team", None)  # a channel never moves between teams
        serializer.save()

    def perform_destroy(self, instance: NotificationChannel) -> None:
        """The channel goes with its delivery history; the alert events stay."""
        service.delete(instance)

    @extend_schema(
        request=None,
        responses={202: inline_serializer("ChannelTest", {
            "outcome": serializers.ChoiceField(
                choices=["queued", "sent", "failed"],
                help_text="queued: a worker sends it (the delivery's status says how it went, in "
                          "the channel's deliveries); sent: the service took it already; failed: it "
                          "did not arrive (last_error says why). A test message is tried once."),
            "delivery": DeliverySerializer(),
        })},
    )
    @action(detail=True, methods=["post"], url_path="test", url_name="test")
    def send_test(self, request: Request, public_id: str | None = None) -> Response:
        """Send a test message: a worker sends it (this call does not wait on the service), once,
        never retried; it is a delivery in the channel's history. Limited per team and per
        account (429 with Retry-After); 503 with Retry-After, nothing saved, while the task
        queue is unreachable."""
        channel = self.get_object()
        try:
            row = delivery.start_test(channel, account=_account(request))
        except delivery.TooManyTests as exc:
            return try_again_later(exc, status.HTTP_429_TOO_MANY_REQUESTS, exc.retry_after_s)
        except delivery.QueueUnreachable as exc:
            return try_again_later(exc, status.HTTP_503_SERVICE_UNAVAILABLE, exc.retry_after_s)
        row = (Delivery.objects.for_team(channel.team_id)
               .select_related("event__endpoint", "event__scan").get(pk=row.pk))
        outcome = "queued" if row.status == DeliveryStatus.PENDING else row.status
        return Response({"outcome": outcome, "delivery": DeliverySerializer(row).data},
                        status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses=DeliverySerializer(many=True))
    @action(detail=True, methods=["get"], url_path="deliveries")
    def deliveries(self, request: Request, public_id: str | None = None) -> Response:
        """The channel's deliveries, newest first (cursor-paginated): each alert or test message
        sent to it, with its status, tries and last error."""
        channel = self.get_object()
        rows = (Delivery.objects.for_team(channel.team_id).filter(channel=channel)
                .select_related("event__endpoint", "event__scan"))
        paginator = DeliveryPages()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(DeliverySerializer(page, many=True).data)
