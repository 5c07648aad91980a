"""The site as the end-to-end test runs it under gunicorn: the real WSGI application, with
Celery tasks run eagerly in the web process (the fold task then runs in the completing
request's on_commit), so the test needs no broker or worker process."""

from tokvera_site.celery import app as celery_app
from tokvera_site.wsgi import application

celery_app.conf.task_always_eager = True

__all__ = ["application"]
