"""The site's error answers: JSON for API callers (paths under /api/ and /v1/), HTML pages for
people, and 503 with Retry-After whenever the database cannot be reached, so an agent, the
CLI's --publish or a scraper can tell an outage (retry later) from a bug (report it).

Django calls these handlers (tokvera_site/urls.py) for what no view answered itself; the
heartbeat's WSGI fast path uses the same outage answer (benchmarks/network/host_wsgi.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.views.defaults import bad_request as django_bad_request
from django.views.defaults import page_not_found
from django.views.defaults import server_error as django_server_error
from rest_framework import exceptions
from rest_framework.response import Response

API_PREFIXES = ("/api/", "/v1/")
# Long enough for a failover or a restart; short enough that agents come back soon.
OUTAGE_RETRY_AFTER_S = 30
OUTAGE_BODY = {"detail": "The site's database is unreachable; try again shortly.",
               "code": "database_unavailable"}


def is_database_outage(exc: BaseException | None) -> bool:
    """A connection that could not be made or was lost (psycopg's OperationalError and
    InterfaceError, as Django wraps them)."""
    return isinstance(exc, (OperationalError, InterfaceError))


def is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIXES)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """JSON for API callers (e.g. a malformed id that no route matches), HTML for people."""
    if is_api(request):
        return JsonResponse({"detail": "Not found."}, status=404)
    return page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """JSON for API callers: Django refuses a body over DATA_UPLOAD_MAX_MEMORY_SIZE (16 MB)
    or a malformed request before any view runs."""
    if is_api(request):
        return JsonResponse({"detail": "Bad request: malformed, or a body over 16 MB."},
                            status=400)
    # Django always passes the exception here; its view never reads it (nothing is disclosed).
    return django_bad_request(request, exception)  # type: ignore[arg-type]


def server_error(request: HttpRequest) -> HttpResponse:
    """An exception no view handled. Django calls this inside its `except` block, so the
    exception is the one being handled: a database outage answers 503 with Retry-After on
    every path, anything else 500 (JSON for API callers)."""
    if is_database_outage(sys.exc_info()[1]):
        if is_api(request):
            response: HttpResponse = JsonResponse(OUTAGE_BODY, status=503)
        else:
            response = HttpResponse(
                "<!doctype html><title>Unavailable</title><h1>Temporarily unavailable</h1>"
                "<p>The site cannot reach its database. Try again in a minute.</p>",
                status=503)
        response["Retry-After"] = str(OUTAGE_RETRY_AFTER_S)
        return response
    if is_api(request):
        return JsonResponse({"detail": "Internal server error.", "code": "server_error"},
                            status=500)
    return django_server_error(request)


class ApiNotFoundAsJson:
    """An API path no route matches answers JSON in every mode: with DEBUG on (the run
    command) Django answers its HTML 404 page without calling handler404
    (`GET /api/v1/scans/` would answer HTML). Only Django's own HTML 404s are replaced; a view's
    JSON 404 passes unchanged."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if (response.status_code == 404 and is_api(request)
                and response.get("Content-Type", "").startswith("text/html")):
            return JsonResponse({"detail": f"Not found: no API resource at {request.path}. "
                                           "What the API holds is listed at /api/v1/.",
                                 "code": "not_found"}, status=404)
        return response


# The API's answers for a request the schema calls valid that the site still refuses
# (documented for every operation by tokvera_site/api_schema.py).
class Unprocessable(exceptions.APIException):
    """422: the request is what the schema describes, but names what this site cannot use (a
    catalog id it does not have, a URL the guard or the channel's service refuses). `detail`
    is the body, in a 400's shape ({field: [messages]}). Raised from a serializer's validate,
    it passes through `is_valid`, which would turn a ValidationError into a 400."""

    status_code = 422
    default_detail = "The request names what this site cannot use."
    default_code = "unprocessable"


class Conflict(exceptions.APIException):
    """409: the request is well formed but clashes with what is stored (a name taken, a kind
    a channel keeps); `detail` is the body, in a 400's shape."""

    status_code = 409
    default_detail = "The request clashes with what is stored."
    default_code = "conflict"


def try_again_later(exc: Exception, status_code: int, retry_after_s: int) -> Response:
    """An API answer for work refused for now (a rate limit: 429; a queue out of reach: 503):
    the refusal's words and when to try again, as the Retry-After header."""
    return Response({"detail": str(exc)}, status=status_code, headers={"Retry-After": str(retry_after_s)})
