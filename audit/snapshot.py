"""What the audit log keeps of a row: its audited fields as JSON values, secrets masked.

One table (`AUDITED`) says, per model, how the log names it and which of its fields are left
out: bookkeeping the workers write (alert state, next run) is no one's change. A field is a
secret when its name says so (`*_encrypted`, `*_hmac`, `*_hash`: how every model here stores
one) or when its model's row lists it; its value is compared in memory and never leaves it.
The models are named by label: this app sits beside accounts and imports no app above it.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import models

MASK = "•••"
EMPTY: tuple[Any, ...] = (None, "", [], {})
SECRET_SUFFIXES = ("_encrypted", "_hmac", "_hash")
# Never worth a line: the row's identity and timestamps the database keeps.
ALWAYS_LEFT_OUT = frozenset({"id", "public_id", "team", "created_at", "updated_at"})


@dataclass(frozen=True)
class Audited:
    object_type: str
    name: Callable[[Any], str] = lambda obj: str(getattr(obj, "name", obj))
    public_id: Callable[[Any], str] = lambda obj: str(obj.public_id)
    left_out: frozenset[str] = frozenset()
    secrets: frozenset[str] = frozenset()  # beyond those SECRET_SUFFIXES name
    # Values kept beside the row's own fields (what a status page shows, in order).
    also: Callable[[Any], dict[str, Any]] = lambda obj: {}
    many_to_many: tuple[str, ...] = field(default=())  # listed by their rows' names


AUDITED: dict[str, Audited] = {
    "scans.endpoint": Audited(
        "endpoint",
        # The workers' state and schedule: they follow from the change, they are not it.
        left_out=frozenset({
            "below_floor", "erroring", "capacity_low", "slo_burn_alert", "next_probe_at",
            "liveness", "liveness_since", "liveness_cause", "liveness_notified_at",
            "liveness_held", "next_scan_at", "last_manual_scan_at"}),
        secrets=frozenset({"badge_key"}),  # whoever holds it reads the badge
        many_to_many=("channels",)),
    "scans.notificationchannel": Audited("channel"),  # its URL and secret: config_encrypted
    "scans.maintenancewindow": Audited("maintenance window"),
    "scans.statuspage": Audited(
        "status page", name=lambda page: page.title, public_id=lambda page: page.slug,
        also=lambda page: {"endpoints": [
            entry.display_name for entry in page.entries.order_by("position")]}),
    # What people do to an incident; what the alerts do to it is its timeline.
    "scans.incident": Audited("incident", name=lambda incident: incident.title,
                              left_out=frozenset({"last_problem_at"}),
                              many_to_many=("endpoints",)),
    "accounts.team": Audited("team", public_id=lambda team: team.slug,
                             left_out=frozenset({"sla_report_mailed_for"})),  # the mail pass's
    "accounts.membership": Audited("member", name=lambda member: str(member.user)),
    "accounts.invitation": Audited("invitation", name=lambda invitation: invitation.email),
    "accounts.apitoken": Audited(
        "API token", name=lambda token: f"{token.name} ({token.prefix}…)",
        left_out=frozenset({"last_used_at"})),
}

OBJECT_TYPES = sorted(audited.object_type for audited in AUDITED.values())


def audited(obj: models.Model) -> Audited:
    return AUDITED[obj._meta.label_lower]


def is_secret(obj: models.Model, name: str) -> bool:
    return name.endswith(SECRET_SUFFIXES) or name in audited(obj).secrets


def fields_of(obj: models.Model) -> dict[str, Any]:
    """The audited fields of `obj` as they are in memory, secrets still in clear (compared,
    then masked by `changes`)."""
    table = audited(obj)
    values: dict[str, Any] = {}
    for model_field in obj._meta.concrete_fields:
        if model_field.name in ALWAYS_LEFT_OUT or model_field.name in table.left_out:
            continue
        if model_field.is_relation:
            related = getattr(obj, model_field.name)
            values[model_field.name] = None if related is None else str(related)
        else:
            values[model_field.name] = _json_value(getattr(obj, model_field.attname))
    for name in table.many_to_many:
        values[name] = sorted(str(row) for row in getattr(obj, name).all())
    values.update(table.also(obj))
    return values


def changes(obj: models.Model, before: dict[str, Any] | None,
            after: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """{field: {"before", "after"}} for each field that differs (all of them on create and
    delete), secrets masked: "•••" when one is stored, "" when none, "changed" when one
    replaced another."""
    names = dict.fromkeys([*(before or {}), *(after or {})])
    found = {}
    for name in names:
        old = None if before is None else before.get(name)
        new = None if after is None else after.get(name)
        if before is not None and after is not None and old == new:
            continue
        if (before is None or after is None) and old in EMPTY and new in EMPTY:
            continue  # a new or deleted row's empty fields say nothing
        if is_secret(obj, name):
            old, new = _masked(old), _masked(new)
            if old == new == MASK:
                new = "changed"
        found[name] = {"before": old, "after": new}
    return found


def _masked(value: Any) -> str | None:
    if value is None:
        return None
    return MASK if value else ""


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    return value
