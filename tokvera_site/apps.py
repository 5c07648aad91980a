"""The site's own app config: start-up that concerns the whole site rather than one app."""

from __future__ import annotations

from django.apps import AppConfig, apps
from django.db.models.signals import post_migrate


class SiteConfig(AppConfig):
    name = "tokvera_site"
    verbose_name = "Tokvera site"

    def ready(self) -> None:
        # The Celery app, in every Django process: tasks are sent through it by name.
        import tokvera_site.celery  # noqa: F401
        from common.logging import quiet_periodic_task_logs, redact_access_logs
        from common.periodic_tasks import ensure_periodic_tasks

        # Every app's periodic tasks, once beat's tables exist (post_migrate is sent per app
        # with models; this one has none, so it listens for beat's).
        post_migrate.connect(ensure_periodic_tasks, sender=apps.get_app_config("django_celery_beat"),
                             dispatch_uid="site-periodic-tasks")
        # Request lines carry invitation secrets: the web servers' access logs are masked too.
        redact_access_logs()
        quiet_periodic_task_logs()  # the beat's and workers' routine lines
