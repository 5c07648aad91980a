"""Login throttling with django-axes: per account and per address (docs/operations.md).

After LOGIN_FAILURE_LIMIT failed sign-ins for one username, or from one client address, every
sign-in for that username or from that address is refused, the right password included, until
LOGIN_COOLOFF has passed since the last failure. Failures are counted in the database (axes'
default handler), so the limit holds across web workers and while the cache is down.
"""

from __future__ import annotations

import math

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_cool_off
from django.shortcuts import render


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' lockout check for every sign-in that comes with a request (each one over HTTP does).

    A call without a request (a management command, a test client's `login()`) has no address
    to count and is not an attacker's path: it is passed to the next backend unchecked."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def locked_out(request, original_response=None, credentials=None):
    """The answer to a locked-out sign-in: 429, Retry-After and a page that says why."""
    cool_off = get_cool_off(request)
    minutes = math.ceil(cool_off.total_seconds() / 60)
    response = render(request, "registration/locked_out.html", {"minutes": minutes}, status=429)
    response["Retry-After"] = str(int(cool_off.total_seconds()))
    return response
