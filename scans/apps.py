from django.apps import AppConfig
from django.db.models.signals import post_migrate

from tokvera_site.logging import redact_access_logs


class ScansConfig(AppConfig):
    name = "scans"
    verbose_name = "Endpoints and scans"

    def ready(self):
        # Registered by name before anything is sent: dispatch and pushes send these tasks by
        # name, because the task module imports them (the services its tasks run).
        import scans.tasks  # noqa: F401

        # shared_task binds to the current app: load the project's before any task is sent or run.
        import tokvera_site.celery  # noqa: F401
        from scans.schedules import ensure_periodic_tasks

        post_migrate.connect(ensure_periodic_tasks, sender=self)
        # Request lines carry invitation secrets. Here rather than in accounts, which may not
        # import the grader (where the credential patterns live) even through tokvera_site.
        redact_access_logs()
