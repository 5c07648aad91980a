"""The public benchmark surfaces: GET /v1/slo, GET /v1/stats, GET /benchmarks and its methodology.

All four are anonymous and shared-cache friendly: they never touch the session, the user or the
CSRF token (so Django adds no cookie and no `Vary: Cookie`), and the HTML is rendered without a
request context (no context processors run). What they serve comes from the cached snapshot
(benchmarks/public/cache.py); the page is rendered by benchmarks/public/page.py. With no
snapshot anywhere they answer 503 with Retry-After: never a 500."""

from __future__ import annotations

import json

from django.http import HttpResponse
from django.views.decorators.http import require_safe

from accounts.middleware import same_for_everyone
from benchmarks.public.cache import (
    LIVE_MAX_AGE_S,
    PAGE_MAX_AGE_S,
    UNAVAILABLE_RETRY_AFTER_S,
    SnapshotUnavailable,
    live_entry,
    page_entry,
)
from benchmarks.public.page import METHODOLOGY_PATH, methodology_html


def _public(response: HttpResponse, max_age_s: int) -> HttpResponse:
    response["Cache-Control"] = f"public, max-age={max_age_s}"
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _json(body: bytes) -> HttpResponse:
    response = HttpResponse(body, content_type="application/json")
    response["Access-Control-Allow-Origin"] = "*"
    return _public(response, LIVE_MAX_AGE_S)


def _unavailable(content_type: str) -> HttpResponse:
    message = "The benchmark figures are unavailable right now; try again shortly."
    body = json.dumps({"detail": message}) if content_type == "application/json" else message
    response = HttpResponse(body, status=503, content_type=content_type)
    response["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER_S)
    response["Cache-Control"] = "no-store"
    return response


@same_for_everyone
@require_safe
def slo(request):
    """GET /v1/slo: per active catalog model, online hosts and 7 d / 30 d success and latency."""
    try:
        return _json(live_entry()["slo"])
    except SnapshotUnavailable:
        return _unavailable("application/json")


@same_for_everyone
@require_safe
def stats(request):
    """GET /v1/stats: online hosts, providers per model and the online hosts' hardware."""
    try:
        return _json(live_entry()["stats"])
    except SnapshotUnavailable:
        return _unavailable("application/json")


@same_for_everyone
@require_safe
def benchmarks_page(request):
    try:
        html = page_entry()["html"]
    except SnapshotUnavailable:
        return _unavailable("text/plain; charset=utf-8")
    return _public(HttpResponse(html, content_type="text/html; charset=utf-8"), PAGE_MAX_AGE_S)


@same_for_everyone
@require_safe
def methodology_page(request):
    html = methodology_html(METHODOLOGY_PATH.stat().st_mtime_ns)
    return _public(HttpResponse(html, content_type="text/html; charset=utf-8"), PAGE_MAX_AGE_S)
