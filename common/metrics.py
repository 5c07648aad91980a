"""The site's own Prometheus metrics at /metrics (HTTP metrics come from django-prometheus).

Process metrics only: requests, Celery tasks, heartbeats. Nothing a team owns is ever put in a
process registry (a team's gauges are rendered per request by scans/api/metrics.py), so this page
holds no team's slug, endpoint name or id even with PROMETHEUS_MULTIPROC_DIR set. It is open by
default, like most services' /metrics; SITE_METRICS_TOKEN asks scrapers for a bearer token
(docs/operations.md).

With several processes (gunicorn workers, the Celery worker), set PROMETHEUS_MULTIPROC_DIR
so that /metrics aggregates them; the run command does.
"""

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django_prometheus.exports import ExportToDjangoView
from prometheus_client import Counter

TASKS = Counter("tokvera_celery_tasks", "Celery tasks finished, by task and final state", ["task", "state"])


@never_cache
def site_metrics(request: HttpRequest) -> HttpResponse:
    """The process metrics, behind SITE_METRICS_TOKEN when it is set (compared in constant
    time)."""
    token = settings.SITE_METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            response = HttpResponse("A bearer token is required (SITE_METRICS_TOKEN).\n",
                                    status=401, content_type="text/plain; charset=utf-8")
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    return ExportToDjangoView(request)
