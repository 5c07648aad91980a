"""Team API token authentication for DRF. Kept apart from DRF's views so that settings can
import it without a circular import."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication
from rest_framework.request import Request

from accounts import credentials
from accounts.models import ApiToken
from common import auth_failures

if TYPE_CHECKING:
    from drf_spectacular.openapi import AutoSchema


class TeamTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer tkv_…`. Malformed, unknown, revoked or expired: 401, counted
    per address; such a failure from an address over its failure limit: 429. A valid token is
    answered from any address; past the address's ceiling, only one that checked out within
    the window is looked up (common/auth_failures.py)."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[TokenUser, ApiToken] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        if not header.lower().startswith("bearer "):
            return None  # leave other schemes to other authenticators
        token = credentials.split_bearer(header, "tkv")
        if token is None:
            raise auth_failures.failed(request, "Malformed API token.")
        auth_failures.refuse_unlooked(request, token)  # a flood past its ceiling: no lookup
        row = (
            # Found by its prefix: the token is what says which team the request is for.
            ApiToken.dangerously_unscoped.select_related("team", "created_by")
            .filter(prefix=token[: credentials.PREFIX_CHARS])
            .first()
        )
        if row is None or not credentials.matches(token, row.secret_hmac):
            raise auth_failures.failed(request, "Invalid API token.")
        if not row.is_active:
            raise auth_failures.failed(request, "This API token is revoked or expired.")
        auth_failures.mark_valid(token)
        now = timezone.now()
        # Record use at most once a minute per token, without a write on every request.
        if row.last_used_at is None or (now - row.last_used_at).total_seconds() > 60:
            ApiToken.objects.for_team(row.team_id).filter(pk=row.pk).update(last_used_at=now)
        return (TokenUser(row), row)

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class TokenUser:
    """Stands in for request.user on token requests: authenticated, but nobody's account."""

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = False

    def __init__(self, token: ApiToken) -> None:
        self.token = token
        self.pk = None
        self.id = None

    def __str__(self) -> str:
        return f"token {self.token.prefix}…"


class TeamTokenScheme(OpenApiAuthenticationExtension):
    """How the API schema describes team tokens (registered by defining the class)."""

    target_class = "accounts.authentication.TeamTokenAuthentication"
    name = "teamToken"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "tkv_…",
                "description": "A team API token: read-only or read-write."}
