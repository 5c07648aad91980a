"""The API half of the scoping layer (see accounts/tenancy.py; tokens: accounts/authentication.py):
the role permission and the base viewset every team-owned API view derives from."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import exceptions, permissions, viewsets
from rest_framework.request import Request
from rest_framework.serializers import BaseSerializer
from rest_framework.views import APIView

from accounts import teams
from accounts.models import Team
from accounts.tenancy import Access, TeamOwned, team_id_of


class TeamRolePermission(permissions.BasePermission):
    """Safe methods need any role; writes need a writing role (403 for viewers and read-only
    tokens). `needs_manage` on the view raises the bar for writes to owners and admins;
    `writes_need` names another Access check for them (e.g. "can_change_channels")."""

    def has_object_permission(self, request: Request, view: APIView, obj: Any) -> bool:
        access = Access.for_request(request)
        team_id = team_id_of(obj)
        if access.role_in(team_id) is None:
            raise exceptions.NotFound()
        if request.method in permissions.SAFE_METHODS:
            return True
        if getattr(view, "needs_manage", False):
            return access.can_manage(team_id)
        if writes_need := getattr(view, "writes_need", ""):
            return bool(getattr(access, writes_need)(team_id))
        return access.can_write(team_id)


class TeamScopedViewSet(viewsets.GenericViewSet):
    """Base for every team-owned API view. Subclasses set `scoped_model`; they may narrow
    with `narrow_queryset()`, but cannot replace `get_queryset()`."""

    scoped_model: type[TeamOwned]
    permission_classes = [permissions.IsAuthenticated, TeamRolePermission]
    lookup_field = "public_id"
    lookup_value_regex = "[0-9a-fA-F-]{36}"  # a malformed id is a 404, not a database error

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "get_queryset" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} overrides get_queryset(); narrow_queryset() keeps team scoping"
            )

    def get_queryset(self) -> QuerySet[Any]:
        access = Access.for_request(self.request)
        return self.narrow_queryset(self.scoped_model.objects.visible_to(access))

    def narrow_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset

    def team_to_create_in(self, serializer: BaseSerializer[Any]) -> Team:
        """The team a create puts its object in: the body's `team` slug, or the caller's only
        writable team (accounts.teams.team_for_new_object), each refusal as its API answer."""
        slug = serializer.validated_data.pop("team", {}).get("slug")
        try:
            return teams.team_for_new_object(Access.for_request(self.request), slug)
        except teams.TeamNotChosen as exc:
            raise exceptions.ValidationError({"team": [str(exc)]}) from None
        except teams.NoSuchTeam as exc:
            raise exceptions.NotFound(str(exc)) from None
        except teams.ReadOnlyInTeam as exc:
            raise exceptions.PermissionDenied(str(exc)) from None
