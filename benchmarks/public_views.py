"""The public benchmark surfaces: GET /v1/slo, GET /v1/stats, GET /benchmarks and its methodology.

All four are anonymous and shared-cache friendly: they never touch the session, the user or the
CSRF token (so Django adds no cookie and no `Vary: Cookie`), and the HTML is rendered without a
request context (no context processors run). Every figure comes from
`benchmarks.snapshot.build_snapshot`:

- `/v1/slo` and `/v1/stats` read the live snapshot, rebuilt at request time when the copy in the
  cache is older than LIVE_CACHE_S;
- `/benchmarks` reads the page snapshot, rebuilt every REFRESH_EVERY_S by the Celery task
  `benchmarks.public_tasks.refresh_public_benchmarks` (or `manage.py refresh_benchmarks`) and kept
  for PAGE_CACHE_S, so visitors are served the stored rendering.

A cached copy stores the coordinator time it was built at. Past its limit, the first request
takes the build lock and rebuilds it, and every other request meanwhile is served the previous
copy at once (nobody waits for a build); a copy is never served more than STALE_GRACE_S past its
limit, whatever the cache backend's own expiry does. Only a cache with no copy at all makes a
request wait for the builder (briefly, then it builds one itself).

When the cache cannot be reached (Redis down, or the database behind the database cache), each
process falls back on its own memory: it serves the last entry it built or read while that one
is fresh, else builds one from the database (one build at a time per process). When the
database cannot answer either, it serves its last entry whatever its age (the page and the JSON
carry the time it was built), or, having none, answers 503 with Retry-After: never a 500.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TypeGuard

from django.core.cache import cache
from django.db import Error as DatabaseError
from django.http import HttpResponse
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.text import slugify
from django.views.decorators.http import require_safe

from benchmarks import snapshot as snap
from tokvera_site.cache_outage import CACHE_ERRORS, warn

PAGE_CACHE_S = 300  # the page snapshot is kept this long in the site's cache
PAGE_MAX_AGE_S = 300  # and browsers / shared caches may keep the page this long
REFRESH_EVERY_S = 240  # the periodic rebuild, a little under PAGE_CACHE_S so it never lapses
LIVE_CACHE_S = 15  # /v1/slo and /v1/stats: computed at request time, reused this long at most
LIVE_MAX_AGE_S = 15
PAGE_KEY = "benchmarks:public:page:v1"
LIVE_KEY = "benchmarks:public:live:v1"
BUILD_LOCK_S = 30  # one builder at a time per entry; the others are served the previous copy
# A copy past its limit is served while one request rebuilds it, for at most this long.
STALE_GRACE_S = BUILD_LOCK_S
BUILD_WAIT_STEPS = 100  # with no copy at all: how many times a request looks again (every 50 ms)
# Entries are stored a little longer than they may be served: _fresh() decides, from the
# coordinator time each one was built at, so the backend's own expiry never cuts in early.
_CACHE_SLACK_S = 5
# Package data (a link to docs/methodology.md in a checkout, the file itself in a wheel).
METHODOLOGY_PATH = Path(__file__).resolve().parent / "methodology.md"
EM_DASH = "\u2014"


# --- cached entries --------------------------------------------------------------------------


def _fresh(entry: dict | None, max_age_s: int, now: datetime) -> TypeGuard[dict]:
    return entry is not None and timedelta(0) <= now - entry["built_at"] <= timedelta(seconds=max_age_s)


UNAVAILABLE_RETRY_AFTER_S = 30  # a 503 (no snapshot at all) says to come back after this


class SnapshotUnavailable(Exception):
    """Neither the cache, nor the database, nor this process's memory has a snapshot to serve."""


# Per process: the newest entry this process built or read, by full cache key (prefix included).
_last_entries: dict[str, dict] = {}
_build_lock = threading.Lock()


def _entry(key: str, max_age_s: int, build) -> dict:
    """The entry under `key`: from the cache when it is reachable, else from this process."""
    try:
        entry = _entry_from_cache(key, max_age_s, build)
    except CACHE_ERRORS as exc:
        warn(f"{key} served without the cache", exc)
        entry = _entry_without_cache(key, max_age_s, build)
    _last_entries[cache.make_key(key)] = entry
    return entry


def _store(key: str, entry: dict, max_age_s: int) -> None:
    # Kept past its limit so that it can stand in while one request rebuilds it.
    cache.set(key, entry, timeout=max_age_s + STALE_GRACE_S + _CACHE_SLACK_S)


def _entry_from_cache(key: str, max_age_s: int, build) -> dict:
    """The cached entry under `key` if it is fresh, else a new one built by one request while
    the others are served the previous copy."""
    now = timezone.now()
    entry = cache.get(key)
    if _fresh(entry, max_age_s, now):
        return entry
    lock = f"{key}:lock"
    if cache.add(lock, 1, timeout=BUILD_LOCK_S):
        try:
            entry = build(now)
            _store(key, entry, max_age_s)
            return entry
        finally:
            cache.delete(lock)
    if _fresh(entry, max_age_s + STALE_GRACE_S, now):
        return entry  # another request is rebuilding it: the previous copy, at once
    for _ in range(BUILD_WAIT_STEPS):  # no copy at all (a cold cache): the builder's result
        time.sleep(0.05)
        entry = cache.get(key)
        if _fresh(entry, max_age_s, timezone.now()):
            return entry
    return build(timezone.now())


def _entry_without_cache(key: str, max_age_s: int, build) -> dict:
    with _build_lock:  # while the cache cannot coordinate builders: one per process
        last = _last_entries.get(cache.make_key(key))
        if _fresh(last, max_age_s, timezone.now()):
            return last
        try:
            return build(timezone.now())
        except DatabaseError as exc:
            if last is None:
                raise SnapshotUnavailable from exc
            warn(f"{key}: the database is unreachable too; serving the copy of {last['built_at']}", exc)
            return last


def _dumps(payload: dict) -> bytes:
    return json.dumps(payload).encode()


def build_live_entry(now: datetime) -> dict:
    snapshot = snap.build_snapshot(now)
    return {"built_at": now, "snapshot": snapshot,
            "slo": _dumps(snap.slo_payload(snapshot)), "stats": _dumps(snap.stats_payload(snapshot))}


def build_page_entry(now: datetime) -> dict:
    snapshot = snap.build_snapshot(now)
    return {"built_at": now, "snapshot": snapshot, "html": render_page(snapshot)}


def live_entry() -> dict:
    return _entry(LIVE_KEY, LIVE_CACHE_S, build_live_entry)


def page_entry() -> dict:
    return _entry(PAGE_KEY, PAGE_CACHE_S, build_page_entry)


def refresh(now: datetime | None = None) -> dict:
    """Rebuild the page snapshot (and the live one, from the same build) at once."""
    now = now or timezone.now()
    snapshot = snap.build_snapshot(now)
    page = {"built_at": now, "snapshot": snapshot, "html": render_page(snapshot)}
    live = {"built_at": now, "snapshot": snapshot,
            "slo": _dumps(snap.slo_payload(snapshot)), "stats": _dumps(snap.stats_payload(snapshot))}
    _store(PAGE_KEY, page, PAGE_CACHE_S)
    _store(LIVE_KEY, live, LIVE_CACHE_S)
    return snapshot


# --- how figures are written -----------------------------------------------------------------


def attr(value) -> str:
    """A figure as a data attribute: written as the JSON writes it, empty when there is none."""
    return "" if value is None else json.dumps(value)


def percent(share: float | None) -> str:
    """A share as a percentage with one decimal. Only exactly 1 reads 100 % and only exactly 0
    reads 0 %: 0.9996 is 99.9 %, not a rounded-up perfect score."""
    if share is None:
        return EM_DASH
    text = f"{snap.half_up(Decimal(repr(share)) * 100, 1):.1f}"
    if text == "100.0" and share < 1:
        text = "99.9"
    elif text == "0.0" and share > 0:
        text = "0.1"
    return f"{text}\u00a0%"


def millis(value: int | None) -> str:
    return EM_DASH if value is None else f"{value:,}\u00a0ms"


def speed(value: float | None) -> str:
    return EM_DASH if value is None else f"{value:,.1f}\u00a0tok/s"


TIER_LABELS = {"none": "None", "software": "Software", "edr": "EDR", "hardware": "Hardware"}
WINDOW_LABELS = {"7d": "7 days", "30d": "30 days"}


def page_context(snapshot: dict) -> dict:
    models = []
    for m in snapshot["models"]:
        windows = []
        for name, w in m["windows"].items():
            latency = w["latency"]
            windows.append({
                "name": name, "label": WINDOW_LABELS.get(name, name),
                "completed": w["completed"], "failed": w["failed"],
                "settled": w["completed"] + w["failed"],
                "success": percent(w["success_rate"]), "success_attr": attr(w["success_rate"]),
                "p50": millis(latency["p50_ms"]), "p50_attr": attr(latency["p50_ms"]),
                "p95": millis(latency["p95_ms"]), "p95_attr": attr(latency["p95_ms"]),
            })
        tiers = [{
            "tier": t["tier"], "label": TIER_LABELS.get(t["tier"], t["tier"]), "hosts": t["hosts"],
            "ttft_p50": millis(t["ttft_p50_ms"]), "ttft_p50_attr": attr(t["ttft_p50_ms"]),
            "ttft_p95": millis(t["ttft_p95_ms"]), "ttft_p95_attr": attr(t["ttft_p95_ms"]),
            "tps_p50": speed(t["tps_p50"]), "tps_p50_attr": attr(t["tps_p50"]),
        } for t in m["tiers"]]
        models.append({
            "id": m["id"], "display_name": m["display_name"], "quant": m["quant"],
            "context_len": f"{m['context_len']:,}", "online_hosts": m["online_hosts"],
            "success_7d_attr": attr(m["windows"]["7d"]["success_rate"]),
            "windows": windows, "tiers": tiers,
        })
    generated = datetime.fromisoformat(snapshot["generated_at"].replace("Z", "+00:00"))
    return {
        "generated_at": snapshot["generated_at"],
        "generated_label": generated.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "online_hosts": snapshot["online_hosts"],
        "sparse": snapshot["sparse"],
        "models": models,
        "hardware": snapshot["hardware"],
        "gpu_kinds": snap.gpu_models_online(snapshot["hardware"]),
        "ewma_alpha": snap.EWMA_ALPHA,
        "min_operators": snap.MIN_OPERATORS,
        "min_cell_hosts": snap.MIN_HOSTS_PER_CELL,
    }


def render_page(snapshot: dict) -> str:
    # No request: no context processor runs, so nothing reads the session or the user.
    return render_to_string("benchmarks/benchmarks.html", page_context(snapshot))


@functools.lru_cache(maxsize=4)
def _methodology_html(mtime_ns: int) -> str:
    from markdown_it import MarkdownIt

    md = MarkdownIt("js-default")  # tables; raw HTML in the Markdown is escaped
    tokens = md.parse(METHODOLOGY_PATH.read_text(encoding="utf-8"))
    for i, token in enumerate(tokens):
        if token.type == "heading_open":  # linkable sections: #cache-and-privacy
            token.attrSet("id", slugify(tokens[i + 1].content))
    body = md.renderer.render(tokens, md.options, {})
    return render_to_string("benchmarks/methodology.html", {"body": body})


# --- views -----------------------------------------------------------------------------------


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


@require_safe
def slo(request):
    """GET /v1/slo: per active catalog model, online hosts and 7 d / 30 d success and latency."""
    try:
        return _json(live_entry()["slo"])
    except SnapshotUnavailable:
        return _unavailable("application/json")


@require_safe
def stats(request):
    """GET /v1/stats: online hosts, providers per model and the online hosts' hardware."""
    try:
        return _json(live_entry()["stats"])
    except SnapshotUnavailable:
        return _unavailable("application/json")


@require_safe
def benchmarks_page(request):
    try:
        html = page_entry()["html"]
    except SnapshotUnavailable:
        return _unavailable("text/plain; charset=utf-8")
    return _public(HttpResponse(html, content_type="text/html; charset=utf-8"), PAGE_MAX_AGE_S)


@require_safe
def methodology_page(request):
    html = _methodology_html(METHODOLOGY_PATH.stat().st_mtime_ns)
    return _public(HttpResponse(html, content_type="text/html; charset=utf-8"), PAGE_MAX_AGE_S)
