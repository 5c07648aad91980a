"""The team's notification channels: list (with each channel's recent deliveries), create,
edit, delete, and "Send test".

Reads need membership (outsiders get 404), writes a writing role (viewers get 403). A channel's
URL and secret are write-only: the form never renders the stored ones (a refused URL is shown
again only in the answer to the POST that sent it) and an edit keeps them when left blank. Bad
input (a URL Apprise cannot read as the kind's, or one whose host the outbound guard refuses)
is an error at the field and nothing is saved. `?kind=X` shows only the fields kind X uses."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import IntegrityError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from accounts.identity import SignedInRequest
from accounts.models import Team
from accounts.tenancy import Access, get_visible_or_404, require_channel_rights
from accounts.validators import validate_one_line
from accounts.views import team_for_request, team_to_create_in
from scans.models import ChannelKind, Delivery, DeliveryStatus, Endpoint, NotificationChannel
from scans.notify.channels import delivery, kinds, service

HISTORY_PER_CHANNEL = 10


class WriteOnlyInput(forms.TextInput):
    """A text input that never renders a stored value: only what this same POST submitted
    comes back (so a refused URL can be fixed, not retyped); the form's initial never has it."""

    def format_value(self, value: Any) -> Any:
        return value or None


class ChannelForm(forms.Form):
    kind = forms.ChoiceField(label="Kind", choices=ChannelKind.choices)
    name = forms.CharField(label="Name", max_length=100, validators=[validate_one_line])
    url = forms.CharField(
        label="URL",
        required=False,
        max_length=kinds.MAX_URL_CHARS,
        strip=True,
        widget=WriteOnlyInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
        help_text="Write-only (it carries the service's token): stored encrypted, never shown "
        "again. Email needs none.",
    )
    secret = forms.CharField(
        label="Signing secret (webhooks)",
        required=False,
        max_length=500,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Signs each webhook (HMAC-SHA256 of the body, header X-Tokvera-Signature). Write-only.",
    )
    clear_secret = forms.BooleanField(label="Remove the stored signing secret", required=False)
    enabled = forms.BooleanField(label="Send alerts to this channel", required=False, initial=True)

    def __init__(self, *args: Any, channel: NotificationChannel | None = None, can_manage: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.channel = channel or NotificationChannel()
        self.can_manage = can_manage
        self.warnings: list[str] = []
        if channel is not None and channel.pk:
            self.fields["kind"].disabled = True  # a new kind is a new channel
            self.fields["url"].help_text += " Leave blank to keep the stored URL."
            self.fields["secret"].help_text += " Leave blank to keep the stored secret."

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        change = service.ChannelChange(
            kind=cleaned["kind"],
            name=cleaned["name"],
            enabled=cleaned.get("enabled", False),
            url=cleaned.get("url", ""),
            secret=cleaned.get("secret", ""),
            clear_secret=cleaned.get("clear_secret", False),
        )
        try:
            self.warnings = service.prepare(self.channel, change, self.can_manage)
        except kinds.ChannelInvalid as exc:
            self.add_error("url", str(exc))
        except service.ChannelFieldError as exc:
            self.add_error(exc.field, str(exc))
        return cleaned


def _kind_shown(value: str | None) -> str:
    """The kind whose fields alone the form shows ("" for none known: every field)."""
    return value if value in ChannelKind.values else ""


def _examples(kind: str) -> list[tuple[str, str]]:
    return [(ChannelKind(k).label, t) for k, t in kinds.EXAMPLES.items() if not kind or k == kind]


def _channel_or_404(request: HttpRequest, public_id: UUID) -> NotificationChannel:
    return get_visible_or_404(request, NotificationChannel, public_id=public_id)


def _save(request: HttpRequest, form: ChannelForm, team: Team) -> bool:
    form.channel.team = team
    try:
        service.save(form.channel)
    except IntegrityError:
        form.add_error("name", "The team has a channel of this name already.")
        return False
    for warning in form.warnings:
        messages.warning(request, warning)
    return True


def _event_label(kind: str) -> str:
    return "test message" if kind == "test" else kind.replace("_", " ")


@login_required
def channel_list(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_for_request(request, slug)
    channels = list(NotificationChannel.objects.for_team(team).order_by("name"))
    history: dict[int, list[tuple[Delivery, str]]] = {}
    recent = (
        Delivery.objects.for_team(team).select_related("event", "event__endpoint").order_by("-created_at")
    )
    for channel in channels:  # one indexed query per channel (delivery_history)
        history[channel.pk] = [
            (row, _event_label(row.event.kind))
            for row in recent.filter(channel=channel)[:HISTORY_PER_CHANNEL]
        ]
    return render(
        request,
        "scans/channels.html",
        {
            "team": team,
            "rows": [(c, history[c.pk]) for c in channels],
            "can_write": Access.for_request(request).can_change_channels(team.pk),
            "examples": [(ChannelKind(k).label, text) for k, text in kinds.EXAMPLES.items()],
            "pending": DeliveryStatus.PENDING,
        },
    )


@login_required
@sensitive_post_parameters("url", "secret")
def channel_create(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_to_create_in(request, slug)
    require_channel_rights(request, team)
    # One form per kind: ?kind=X (or the kind a POST chose) shows only the fields X uses.
    kind = _kind_shown(request.POST.get("kind") if request.method == "POST" else request.GET.get("kind"))
    form = ChannelForm(request.POST or None, initial={"kind": kind} if kind else None, can_manage=True)
    if request.method == "POST" and form.is_valid() and _save(request, form, team):
        messages.success(request, f"Channel {form.channel.name} added.")
        return redirect("team-channels", slug=team.slug)
    return render(
        request,
        "scans/channel_form.html",
        {
            "team": team,
            "form": form,
            "channel": None,
            "kind": kind,
            "kinds": ChannelKind.choices,
            "examples": _examples(kind),
        },
        status=400 if form.is_bound else 200,
    )


@login_required
@sensitive_post_parameters("url", "secret")
def channel_edit(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    channel = _channel_or_404(request, public_id)
    require_channel_rights(request, channel)
    team = channel.team
    has_secret = service.has_secret(channel)
    initial = {"kind": channel.kind, "name": channel.name, "enabled": channel.enabled}
    form = ChannelForm(
        request.POST or None,
        initial=initial,
        channel=channel,
        can_manage=Access.for_request(request).can_manage(team.pk),
    )
    if request.method == "POST" and form.is_valid() and _save(request, form, team):
        messages.success(request, f"Channel {channel.name} saved.")
        return redirect("team-channels", slug=team.slug)
    if request.method == "POST":
        channel.refresh_from_db()  # the page shows what is stored, not the rejected input
    return render(
        request,
        "scans/channel_form.html",
        {
            "team": team,
            "form": form,
            "channel": channel,
            "has_secret": has_secret,
            "kind": channel.kind,
            "examples": _examples(channel.kind),
        },
        status=400 if form.is_bound else 200,
    )


@login_required
def channel_delete(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    """GET: a confirmation page; POST: delete the channel with its delivery history."""
    channel = _channel_or_404(request, public_id)
    require_channel_rights(request, channel)
    team = channel.team
    if request.method == "POST":
        service.delete(channel)
        messages.success(request, f"Channel {channel.name} was deleted.")
        return redirect("team-channels", slug=team.slug)
    return render(
        request,
        "scans/channel_delete.html",
        {
            "team": team,
            "channel": channel,
            "endpoint_count": Endpoint.objects.for_team(team).filter(channels=channel).count(),
            "delivery_count": Delivery.objects.for_team(team).filter(channel=channel).count(),
        },
    )


@login_required
@require_POST
def channel_test(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    """Hand a test message to a worker and come back to the channel's card: no web thread
    waits on the receiver. Limited per team and per account (429 with Retry-After); 503 with
    Retry-After, nothing saved, while the task queue is unreachable."""
    channel = _channel_or_404(request, public_id)
    require_channel_rights(request, channel)
    try:
        row = delivery.start_test(channel, account=f"user:{request.user.pk}")
    except (delivery.TooManyTests, delivery.QueueUnreachable) as exc:
        status = 429 if isinstance(exc, delivery.TooManyTests) else 503
        context = {"channel": channel, "reason": str(exc)}
        response = render(request, "scans/channel_test_not_sent.html", context, status=status)
        response["Retry-After"] = str(exc.retry_after_s)
        return response
    row.refresh_from_db()  # a worker may have settled it already
    if row.status == DeliveryStatus.SENT:
        messages.success(request, f"Test message sent to {channel.name}.")
    elif row.status == DeliveryStatus.FAILED:
        messages.error(request, f"The test message to {channel.name} failed: {row.last_error.rstrip('.')}.")
    else:
        messages.info(
            request,
            f"Test message to {channel.name} handed to a worker: how it went shows under Recent "
            "deliveries (reload the page).",
        )
    return redirect(reverse("team-channels", args=[channel.team.slug]) + f"#channel-{channel.public_id}")
