"""Writing the audit log: the one call each write path makes.

    with audit.record.track(endpoint):
        ... change or delete the row (or create it: `endpoint` unsaved until then) ...

`track` runs the block in a transaction, reads the row as stored before and after it, and
writes one AuditEntry in the same transaction when something changed: a refused change
(an exception out of the block) rolls back and records nothing. What a row was is read
from the database, not from the object: forms and serializers have often written their
input onto it before the service is called.

Who and from where come from the request being served (audit.middleware keeps it for this
context): the user, or the API token by name and prefix, and the client address as every
per-address count reads it. Without a request (a command, a task) the actor is the system.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import models, transaction
from django.http import HttpRequest

from accounts.tenancy import team_id_of
from audit import snapshot
from audit.models import Action, ActorKind, AuditEntry
from common import client_address

current_request: contextvars.ContextVar[HttpRequest | None] = contextvars.ContextVar(
    "audit_current_request", default=None)


@dataclass(frozen=True)
class Actor:
    kind: str
    label: str
    user_id: int | None = None
    token_id: int | None = None
    address: str | None = None


def actor_of(request: HttpRequest | None, user: AbstractBaseUser | None = None) -> Actor:
    """Who makes a change: `user` when the caller says (one who signs up in the request),
    else the request's token or user, else the system."""
    address = (client_address.of_request(request) or None) if request is not None else None
    # DRF sets `auth` on the Django request once it has authenticated a team token.
    token = getattr(request, "auth", None) if request is not None else None
    if user is None and token is not None and hasattr(token, "prefix"):
        return Actor(ActorKind.TOKEN, f"token {token.name} ({token.prefix}…)"[:200],
                     token_id=token.pk, address=address)
    if user is None and request is not None:
        user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.pk is not None:
        label = getattr(user, "email", "") or user.get_username()
        return Actor(ActorKind.USER, label[:200], user_id=user.pk, address=address)
    return Actor(ActorKind.SYSTEM, "system", address=address)


@contextmanager
def track(obj: models.Model, *, user: AbstractBaseUser | None = None) -> Iterator[None]:
    """Record what the block does to `obj`'s row (create, change or delete), atomically."""
    with transaction.atomic():
        old = _stored(obj)
        yield
        new = _stored(obj)
        if old is None and new is None:
            return  # nothing was made, or a row already gone was deleted again
        before = None if old is None else snapshot.fields_of(old)
        after = None if new is None else snapshot.fields_of(new)
        action = Action.CREATE if old is None else Action.DELETE if new is None else Action.CHANGE
        # Named as it is now, or as it was when it is gone.
        _write(new or old or obj, action, snapshot.changes(obj, before, after), user)


def created(obj: models.Model, *, user: AbstractBaseUser | None = None) -> None:
    """Record a row made where no `track` could wrap it (a get_or_create): call it in the
    creating transaction."""
    _write(obj, Action.CREATE, snapshot.changes(obj, None, snapshot.fields_of(obj)), user)


def _stored(obj: models.Model) -> models.Model | None:
    """`obj`'s row as the database holds it now (None before it is made or once deleted)."""
    if obj.pk is None:
        return None
    # By primary key, of an object the caller already reached through its team's scope.
    return type(obj)._base_manager.filter(pk=obj.pk).first()


def _write(obj: models.Model, action: str, changes: dict[str, Any],
           user: AbstractBaseUser | None) -> None:
    if action == Action.CHANGE and not changes:
        return  # saved as it was: nothing happened worth a line
    table = snapshot.audited(obj)
    actor = actor_of(current_request.get(), user)
    AuditEntry.objects.for_team(team_id_of(obj)).create(
        team_id=team_id_of(obj), action=action, object_type=table.object_type,
        object_id=table.public_id(obj)[:64], object_name=table.name(obj)[:200],
        changes=changes, actor_kind=actor.kind, actor=actor.label, actor_user_id=actor.user_id,
        actor_token_id=actor.token_id, address=actor.address)
