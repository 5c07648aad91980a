"""/healthz: can this process reach its database and its broker? JSON, 200 or 503."""

from __future__ import annotations

from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache

from tokvera_site.celery import app


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:
        return f"error: {type(exc).__name__}"


def _broker() -> str:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=2)
        return "ok"
    except Exception as exc:
        return f"error: {type(exc).__name__}"


@never_cache
def healthz(request):
    checks = {"database": _database(), "broker": _broker()}
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse({"status": "ok" if healthy else "error", **checks}, status=200 if healthy else 503)
