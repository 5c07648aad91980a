"""Login throttling with django-axes: per account and per address (docs/operations.md).

After LOGIN_FAILURE_LIMIT failed sign-ins for one username, or from one client address, every
sign-in for that username or from that address is refused, the right password included, until
LOGIN_COOLOFF has passed since the last failure. Failures are counted in the database (axes'
default handler), so the limit holds across web workers and while the cache is down.
"""

from __future__ import annotations

import math
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_cool_off
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' lockout check for every sign-in that comes with a request (each one over HTTP does).

    A call without a request (a management command, a test client's `login()`) has no address
    to count and is not an attacker's path: it is passed to the next backend unchecked."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None,
                     password: str | None = None, **kwargs: Any) -> Any:
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def account_key(request: HttpRequest | None, credentials: dict[str, Any] | None = None) -> str:
    """What the per-account count is keyed by: the account's username, whichever identifier
    was typed (allauth's login takes an email or a username), so switching between the two
    does not double the guesses; for an unknown identifier, that identifier (lowercased)."""
    credentials = credentials or {}
    typed = credentials.get("email") or credentials.get("username")
    if not typed and request is not None:
        data = getattr(request, "data", None) or request.POST
        typed = data.get("login") or data.get("username")
    typed = (typed or "").strip().lower()
    if not typed:
        return ""
    users = get_user_model().objects.filter(Q(username__iexact=typed) | Q(email__iexact=typed))
    usernames = sorted(users.values_list("username", flat=True)[:2])
    return usernames[0].lower() if len(usernames) == 1 else typed


def locked_out(request: HttpRequest, original_response: HttpResponse | None = None,
               credentials: dict[str, Any] | None = None) -> HttpResponse:
    """The answer to a locked-out sign-in: 429, Retry-After and a page that says why."""
    cool_off = get_cool_off(request)
    minutes = math.ceil(cool_off.total_seconds() / 60)
    response = render(request, "registration/locked_out.html", {"minutes": minutes}, status=429)
    response["Retry-After"] = str(int(cool_off.total_seconds()))
    return response
