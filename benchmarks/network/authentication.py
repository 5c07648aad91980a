"""Host token authentication for the host API (`Authorization: Bearer tkh_…`).

Host views use only this class, and buyer views never use it: a host token cannot act for a
team, and a team token cannot act as a host. Malformed, unknown or revoked tokens get 401, counted per
address, or 429 from an address over its failure limit; a valid token is answered from any
address (common/auth_failures.py).
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, permissions

from accounts import credentials
from benchmarks.network import hosts
from common import auth_failures


class HostPrincipal:
    """Stands in for request.user on host requests: authenticated, but nobody's account."""

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = False
    pk = None
    id = None

    def __init__(self, host):
        self.host = host

    def __str__(self) -> str:
        return f"host {self.host.public_id}"


class HostTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None  # IsHost then answers 401 with the Bearer challenge
        token = credentials.split_bearer(header, hosts.TOKEN_KIND)
        if token is None:
            raise auth_failures.failed(request, "Malformed host token.")
        auth_failures.refuse_unlooked(request, token)  # a flood past its ceiling: no lookup
        host = hosts.authenticate(token)
        if host is None:
            raise auth_failures.failed(request, "Invalid or revoked host token.")
        auth_failures.mark_valid(token)
        return (HostPrincipal(host), host)

    def authenticate_header(self, request):
        return self.keyword


class IsHost(permissions.BasePermission):
    def has_permission(self, request, view):
        return isinstance(request.user, HostPrincipal)


class HostTokenScheme(OpenApiAuthenticationExtension):
    """How the API schema describes host tokens (registered by defining the class)."""

    target_class = "benchmarks.network.authentication.HostTokenAuthentication"
    name = "hostToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "A host token (tkh_…) from `createhost` or the admin."}
