"""The one write service for notification channels (the channels page; a team's first one).

A channel's URL and secret are stored as one encrypted JSON object and never shown again: an
edit with the URL left blank keeps the stored one. A webhook's signing secret follows its URL's
origin as an endpoint's secrets do (scans/endpoints/url_rules.py): a new origin drops a stored secret
unless the same edit gives one, and only owners and admins may move it with the secret kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from accounts import encryption
from accounts.models import Team
from audit import record as audit
from scans.models import ChannelKind, NotificationChannel
from scans.notify.channels import kinds
from scans.origins import origin_of

EMAIL_CHANNEL_NAME = "Email to owners and admins"


class ChannelFieldError(Exception):
    """What a field was given cannot be used; `field` names the form (and API) field."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class ChannelRefused(ChannelFieldError):
    """An edit the caller's role may not make."""


@dataclass
class ChannelChange:
    kind: str
    name: str
    enabled: bool
    url: str = ""  # blank on an edit: keep the stored URL
    secret: str = ""  # blank: keep the stored secret
    clear_secret: bool = False


def stored_config(channel: NotificationChannel) -> dict:
    return json.loads(encryption.decrypt(channel.config_encrypted) or "{}")


def has_secret(channel: NotificationChannel) -> bool:
    return bool(channel.config_encrypted) and bool(stored_config(channel).get("secret"))


def prepare(channel: NotificationChannel, change: ChannelChange, can_manage: bool) -> list[str]:
    """Apply `change` to `channel` (not saved); the warnings to show. Raises
    kinds.ChannelInvalid for the URL, ChannelFieldError for a secret the kind cannot take and
    ChannelRefused for a move the role may not make. The channels page and the API both call
    this: one check of what a channel is given."""
    if change.secret and change.clear_secret:
        raise ChannelFieldError("secret", "Either give a new secret or remove the stored one, not both.")
    if change.kind != ChannelKind.WEBHOOK and (change.secret or change.clear_secret):
        raise ChannelFieldError("secret", "Only webhooks are signed: leave this blank.")
    old = stored_config(channel) if channel.pk and channel.config_encrypted else {}
    url = kinds.clean(change.kind, change.url) if (change.url or not old) else old.get("url", "")
    secret = "" if change.clear_secret else (change.secret or old.get("secret", ""))
    warnings = []
    if (
        change.kind == ChannelKind.WEBHOOK
        and old.get("secret")
        and old.get("url")
        and url != old["url"]
        and not change.secret
        and not change.clear_secret
    ):
        if not can_manage:
            raise ChannelRefused(
                "url",
                "Only owners and admins can change this URL while a "
                "signing secret is stored for it. Give a new secret with "
                "the new URL, or remove the stored one.",
            )
        if origin_of(url) != origin_of(old["url"]):
            secret = ""
            warnings.append(
                "The stored signing secret was removed because the URL now points "
                "at another server; enter it again if it belongs there."
            )
    channel.kind, channel.name, channel.enabled = change.kind, change.name, change.enabled
    config = (
        {"url": url, "secret": secret}
        if change.kind == ChannelKind.WEBHOOK
        else ({"url": url} if url else {})
    )
    channel.config_encrypted = encryption.encrypt(json.dumps(config)) if config else ""
    channel.destination = kinds.destination(change.kind, url)[:200]
    return warnings


def save(channel: NotificationChannel) -> NotificationChannel:
    with transaction.atomic(), audit.track(channel):
        channel.save()
    return channel


def delete(channel: NotificationChannel) -> None:
    with transaction.atomic(), audit.track(channel):
        NotificationChannel.objects.for_team(channel.team_id).filter(pk=channel.pk).delete()


def give_new_team_its_email_channel(sender: type[Team], instance: Team, created: bool, raw: bool = False,
                                    **kwargs: Any) -> None:
    """post_save of Team: a new team's alerts reach its owners and admins by mail, as an
    endpoint's always did before channels (scans/apps.py connects it)."""
    if not created or raw:
        return
    NotificationChannel.objects.for_team(instance.pk).get_or_create(
        team=instance,
        name=EMAIL_CHANNEL_NAME,
        defaults={"kind": ChannelKind.EMAIL, "destination": kinds.destination(ChannelKind.EMAIL, "")},
    )
