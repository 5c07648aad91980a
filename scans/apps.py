from django.apps import AppConfig
from django.db.models.signals import post_migrate


class ScansConfig(AppConfig):
    name = "scans"
    verbose_name = "Endpoints and scans"

    def ready(self):
        from scans.schedules import ensure_periodic_tasks

        post_migrate.connect(ensure_periodic_tasks, sender=self)
