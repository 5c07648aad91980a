from django.apps import AppConfig


class ScansConfig(AppConfig):
    name = "scans"
    verbose_name = "Endpoints and scans"
    # Collected by common.periodic_tasks (name shown in the admin, task, every N seconds).
    periodic_tasks = (
        ("Enqueue due scans", "scans.tasks.enqueue_due_scans", 60),
        ("Send due liveness probes", "scans.tasks.dispatch_probes", 10),
        ("Reap dead scans", "scans.tasks.reap_scans", 60),
        ("Deliver due notifications", "scans.tasks.deliver_due_notifications", 60),
        ("Prune full reports past their retention", "scans.tasks.prune_reports", 3600),
        ("Roll up scans for long chart ranges", "scans.tasks.roll_up_scans", 300),
        # Hourly: the first pass of a month mails the last one (once per team, however late).
        ("Mail monthly SLA reports", "scans.tasks.mail_sla_reports", 3600),
    )

    def ready(self) -> None:
        # Register the tasks, which dispatch and pushes send by name (the task module imports
        # them, so they cannot import it).
        # A new team starts with one channel: mail to its owners and admins.
        from django.db.models.signals import post_save

        import scans.notify.incidents  # noqa: F401 - its receiver ends a deleted endpoint's problems
        import scans.tasks  # noqa: F401
        from accounts.models import Team
        from scans.notify.channels.service import give_new_team_its_email_channel

        post_save.connect(give_new_team_its_email_channel, sender=Team,
                          dispatch_uid="scans-team-email-channel")
