from django.apps import AppConfig
from django.db.models.signals import post_migrate

from tokvera_site.logging import quiet_periodic_task_logs, redact_access_logs


class ScansConfig(AppConfig):
    name = "scans"
    verbose_name = "Endpoints and scans"

    def ready(self):
        # Register the tasks, which dispatch and pushes send by name (the task module imports
        # them, so they cannot import it); importing them loads the project's Celery app first
        # (scans.dispatch imports it), which shared_task binds to.
        import scans.tasks  # noqa: F401
        import tokvera_site.celery  # noqa: F401
        from scans.periodic_tasks import ensure_periodic_tasks

        post_migrate.connect(ensure_periodic_tasks, sender=self)
        # A new team starts with one channel: mail to its owners and admins (issue 24).
        from django.db.models.signals import post_save

        from accounts.models import Team
        from scans.channels.service import give_new_team_its_email_channel

        post_save.connect(give_new_team_its_email_channel, sender=Team,
                          dispatch_uid="scans-team-email-channel")
        # Request lines carry invitation secrets. Here rather than in accounts, which may not
        # import the grader (where the credential patterns live) even through tokvera_site.
        redact_access_logs()
        quiet_periodic_task_logs()  # the beat's and workers' routine lines (issue 23)
