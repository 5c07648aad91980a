from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Teams, members and API tokens"
    # Collected by common.periodic_tasks (name shown in the admin, task, every N seconds).
    periodic_tasks = (
        ("Delete expired invitations", "scans.tasks.delete_expired_invitations", 3600),
    )

    def ready(self) -> None:
        import accounts.tasks  # noqa: F401 - registered, as beat sends it by name
        from accounts.adapter import use_fallback_cache

        use_fallback_cache()  # logging in must survive a cache outage (accounts/adapter.py)
