"""The one scoping layer between a request and a team's rows.

- `Access` says which teams a request may see and with which role: from a logged-in user's
  memberships, or from a team API token (read-write acts as a member, read-only as a viewer).
- `TeamScopedManager` is every team-owned model's `objects`. Reading it unscoped raises
  `UnscopedQuery`; `Model.objects.visible_to(access)` is the way in. Only code where no team
  is known (admin, system-wide tasks, a lookup by secret) uses the unscoped manager that
  `TeamOwned` declares below, each use with its reason (the name is greppable on purpose).
- Pages use `get_visible_or_404()` and `require_write()`; the API uses
  `accounts.tenancy_api.TeamScopedViewSet`, which does not let a subclass replace `get_queryset`.

Outsiders get 404 (never a 403 that would confirm the object exists); members without the
needed role get 403. A team that requires two-factor authentication is left out of the access
of a member who has none (`Access.withheld`), so every page read of it fails closed; the
middleware in accounts/middleware.py turns that into "set up two-factor first".
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import Http404, HttpRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User

READ_ROLES = frozenset({"owner", "admin", "member", "viewer"})
WRITE_ROLES = frozenset({"owner", "admin", "member"})
MANAGE_ROLES = frozenset({"owner", "admin"})


class UnscopedQuery(RuntimeError):
    """A team-owned model was queried without saying whose rows are wanted."""


class TeamToken(Protocol):
    """What is read from an ApiToken (typed here: accounts.models imports this module)."""

    team_id: int
    prefix: str
    scope: str


@dataclass(frozen=True)
class Access:
    """What one request may reach: team id → role. Empty for anonymous and outsiders."""

    roles: dict[int, str] = field(default_factory=dict)
    token: TeamToken | None = None  # the ApiToken when the request used one
    # Teams the user belongs to but may not see yet: they require two-factor authentication
    # and the user has none (accounts.middleware sends them to set it up). Tokens are exempt.
    withheld: frozenset[int] = frozenset()
    # Teams that require single sign-on, of a session that did not sign in through it.
    sso_withheld: frozenset[int] = frozenset()

    @property
    def team_ids(self) -> list[int]:
        return sorted(self.roles)

    def role_in(self, team_id: int) -> str | None:
        return self.roles.get(team_id)

    def can_write(self, team_id: int) -> bool:
        return self.roles.get(team_id) in WRITE_ROLES

    def can_manage(self, team_id: int) -> bool:
        # Tokens never manage people or tokens, whatever their scope.
        return self.token is None and self.roles.get(team_id) in MANAGE_ROLES

    def can_change_channels(self, team_id: int) -> bool:
        """Where the alerts go, and the services' secrets: owners and admins, and a read-write
        token (an admin made it; configuration as code applies channels with one)."""
        return self.can_manage(team_id) or (self.token is not None and self.can_write(team_id))

    def is_owner(self, team_id: int) -> bool:
        return self.token is None and self.roles.get(team_id) == "owner"

    @classmethod
    def for_request(cls, request: HttpRequest) -> Access:
        cached = getattr(request, "_tokvera_access", None)
        if cached is not None:
            return cached
        token = getattr(request, "auth", None)
        if token is not None and hasattr(token, "scope") and getattr(token, "team_id", None) is not None:
            role = "member" if token.scope == "read-write" else "viewer"
            access = cls(roles={token.team_id: role}, token=token)
        elif token is None and request.user.is_authenticated:
            # The user's own memberships, through the reverse relation: no import of
            # accounts.models, which imports this module for TeamOwned.
            rows = request.user.memberships.values_list(
                "team_id", "role", "team__require_two_factor", "team__require_sso", "from_sso")
            via_sso = bool(settings.SSO_APP) and signed_in_with_sso(request)
            # A role the provider gave holds only in a session the provider vouched for: taken
            # out of the group there, a person keeps nothing by signing in with a password.
            roles = {team_id: role for team_id, role, _, _, from_sso in rows
                     if via_sso or not from_sso}
            needs_two_factor = frozenset(row[0] for row in rows if row[2])
            # Requiring single sign-on holds while the site has a provider to sign in with.
            needs_sso = frozenset(row[0] for row in rows if row[3]) if settings.SSO_APP \
                else frozenset()
            withheld = needs_two_factor if needs_two_factor and not _has_two_factor(request.user) \
                else frozenset()
            sso_withheld = needs_sso if not via_sso else frozenset()
            roles = {t: r for t, r in roles.items() if t not in withheld | sso_withheld}
            access = cls(roles=roles, withheld=withheld, sso_withheld=sso_withheld)
        else:  # anonymous, or another credential (a host token acts for no team)
            access = cls()
        request._tokvera_access = access  # type: ignore[attr-defined]  # kept for the request's life
        return access


#: The provider_id of settings.SSO_APP (accounts/sso.py): its login URL is /oidc/sso/login/.
SSO_PROVIDER_ID = "sso"


def signed_in_with_sso(request: HttpRequest) -> bool:
    """This session's sign-in went through the site's single sign-on (allauth's own record)."""
    # Imported here, as in _has_two_factor: allauth is not ready when this module loads.
    from allauth.account.authentication import get_authentication_records

    records = get_authentication_records(request, getattr(request, "user", None))
    return any(record.get("method") == "socialaccount"
               and record.get("provider") == SSO_PROVIDER_ID for record in records)


def _has_two_factor(user: User) -> bool:
    # Imported here: this module is loaded with the models, before allauth's app is ready.
    from allauth.mfa.utils import is_mfa_enabled

    return is_mfa_enabled(user)


_Owned = TypeVar("_Owned", bound="TeamOwned")


class TeamScopedQuerySet(models.QuerySet[_Owned]):
    def visible_to(self, access: Access) -> TeamScopedQuerySet[_Owned]:
        lookup = f"{self.model.team_lookup}__in"
        return self.filter(**{lookup: access.team_ids})

    def for_team(self, team: models.Model | int | None) -> TeamScopedQuerySet[_Owned]:
        return self.filter(**{self.model.team_lookup: team})


_TeamScopedManagerBase = models.Manager.from_queryset(TeamScopedQuerySet)


class TeamScopedManager(_TeamScopedManagerBase):
    """Fail-closed: `.all()`, `.get()`, `.filter()` straight off the manager raise."""

    def get_queryset(self) -> NoReturn:
        raise UnscopedQuery(
            f"{self.model.__name__}.objects must be scoped: use .visible_to(access) or "
            f".for_team(team) (only code where no team is known uses the unscoped manager)"
        )

    # The scoped querysets are typed Any: the stubs would take them for TeamOwned's, not the
    # model's own (whose fields and annotations callers read).
    def _scoped(self) -> Any:
        return super().get_queryset()

    def visible_to(self, access: Access) -> Any:
        return self._scoped().visible_to(access)

    def for_team(self, team: models.Model | int | None) -> Any:
        return self._scoped().for_team(team)


class TeamOwned(models.Model):
    """The base of every team-owned model: `objects` is fail-closed; the second manager is
    the greppable way around it. Subclasses set `team_lookup` (the path to their team) and
    extend `TeamOwned.Meta` in their own Meta so the manager settings carry over."""

    team_lookup = "team"
    objects = TeamScopedManager()
    dangerously_unscoped = models.Manager()  # only where no team is known, with the reason

    class Meta:
        abstract = True
        # The admin, forms and related managers need a plain default manager; request code
        # goes through `objects`.
        default_manager_name = "dangerously_unscoped"
        base_manager_name = "dangerously_unscoped"


def team_id_of(obj: Any) -> int:
    """The id of the team that owns `obj`, following the model's team_lookup path."""
    path = obj.team_lookup
    if path == "pk":
        return obj.pk
    target = obj
    parts = path.split("__")
    for part in parts[:-1]:
        target = getattr(target, part)
    return getattr(target, f"{parts[-1]}_id")


# --- pages -----------------------------------------------------------------------------------


def get_visible_or_404(request: HttpRequest, model: type[_Owned], **lookup: Any) -> _Owned:
    try:
        return model.objects.visible_to(Access.for_request(request)).get(**lookup)
    except model.DoesNotExist:
        raise Http404(f"No {model._meta.verbose_name} here") from None


def require_write(request: HttpRequest, obj: Any) -> None:
    if not Access.for_request(request).can_write(team_id_of(obj)):
        raise PermissionDenied("Your role in this team is read-only.")


def require_channel_rights(request: HttpRequest, obj: Any) -> None:
    if not Access.for_request(request).can_change_channels(team_id_of(obj)):
        raise PermissionDenied("Only owners and admins change notification channels.")


def require_owner(request: HttpRequest, obj: Any) -> None:
    if not Access.for_request(request).is_owner(team_id_of(obj)):
        raise PermissionDenied("Only owners change the team itself.")


def require_manage(request: HttpRequest, obj: Any) -> None:
    if not Access.for_request(request).can_manage(team_id_of(obj)):
        raise PermissionDenied("Only owners and admins can do this.")


def scoped_to_teams(model: type[TeamOwned], team_ids: Iterable[int]) -> Any:
    """`model`'s rows of these teams through the scoped manager (one `for_team` per team)."""
    team_ids = sorted(set(team_ids))
    if not team_ids:
        return model.objects.for_team(None).none()
    return functools.reduce(operator.or_, (model.objects.for_team(t) for t in team_ids))
