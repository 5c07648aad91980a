"""Team-scoped REST API (DRF). Every view here derives from tenancy.TeamScopedViewSet."""

from __future__ import annotations

from typing import cast

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import Team
from accounts.tenancy import Access
from accounts.tenancy_api import TeamScopedViewSet
from accounts.validators import validate_one_line
from audit import record as audit


class TeamSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["slug", "name", "role", "created_at", "badge_site_measured_only", "sla_report_mail"]
        read_only_fields = ["slug", "role", "created_at"]
        # A team name is one line, as at team creation (the schema states it).
        extra_kwargs = {"name": {"validators": [validate_one_line]}}

    def get_role(self, team: Team) -> str | None:
        return Access.for_request(self.context["request"]).role_in(team.pk)


class TeamViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.UpdateModelMixin, TeamScopedViewSet
):
    """The teams this user or token belongs to. Renaming a team needs owner or admin."""

    scoped_model = Team
    serializer_class = TeamSerializer
    lookup_field = "slug"
    lookup_value_regex = "[-a-zA-Z0-9_]+"
    writes_need = "is_owner"  # the team itself (its name, badges, mail) is its owners'; never a token's

    def perform_update(self, serializer: serializers.BaseSerializer[Team]) -> None:
        with audit.track(cast(Team, serializer.instance)):
            serializer.save()


class WhoAmISerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["user", "token"])
    username = serializers.CharField(allow_null=True)
    token_prefix = serializers.CharField(allow_null=True)
    token_scope = serializers.CharField(allow_null=True)
    teams = serializers.ListField(child=serializers.DictField())


@extend_schema(responses=WhoAmISerializer)
@api_view(["GET"])
def whoami(request: Request) -> Response:
    """Who the API sees: the user or token, and the teams and roles it reaches."""
    access = Access.for_request(request)
    token = access.token
    teams = Team.objects.visible_to(access)
    return Response(
        {
            "kind": "token" if token else "user",
            "username": None if token else request.user.get_username(),
            "token_prefix": token.prefix if token else None,
            "token_scope": token.scope if token else None,
            "teams": [{"slug": t.slug, "role": access.role_in(t.pk)} for t in teams],
        }
    )
