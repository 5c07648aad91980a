"""The audit log of admin and operator changes to hosts and the catalog (who, what, when)."""

from __future__ import annotations

from django.db import models

from benchmarks.models import AuditEntry, CatalogModel, Host


def actor_label(actor) -> str:
    """A user, or a plain string for commands (e.g. "command createhost")."""
    if actor is None:
        return "system"
    if isinstance(actor, str):
        return actor
    return f"user {actor.get_username()}"


def record(actor, target: models.Model, action: str, changes: dict | None = None) -> AuditEntry:
    if isinstance(target, Host):
        target_type, target_id = "host", str(target.public_id)
    elif isinstance(target, CatalogModel):
        target_type, target_id = "catalog model", target.pk
    else:  # pragma: no cover - a programming error, not input
        raise TypeError(f"nothing audits {type(target).__name__}")
    return AuditEntry.objects.create(
        actor=None if actor is None or isinstance(actor, str) else actor,
        actor_label=actor_label(actor),
        target_type=target_type,
        target_id=target_id,
        target_label=str(target)[:150],
        action=action,
        changes=_jsonable(changes or {}),
    )


def _jsonable(changes: dict) -> dict:
    out = {}
    for field, pair in changes.items():
        out[field] = [v if v is None or isinstance(v, bool | int | float | str | list) else str(v)
                      for v in pair]
    return out
