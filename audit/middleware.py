"""Keeps the request being served where audit.record finds it: who changes something, and
from where, is the request's, whichever service makes the change."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from audit.record import current_request


class AuditRequestMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = current_request.set(request)
        try:
            return self.get_response(request)
        finally:
            current_request.reset(token)
