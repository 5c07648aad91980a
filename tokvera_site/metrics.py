"""The site's own Prometheus metrics (HTTP metrics come from django-prometheus).

With several processes (gunicorn workers, the Celery worker), set PROMETHEUS_MULTIPROC_DIR
so that /metrics aggregates them; the run command does.
"""

from prometheus_client import Counter

TASKS = Counter("tokvera_celery_tasks", "Celery tasks finished, by task and final state", ["task", "state"])
