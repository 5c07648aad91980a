from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Teams, members and API tokens"

    def ready(self) -> None:
        from accounts.adapter import use_fallback_cache

        use_fallback_cache()  # logging in must survive a cache outage (accounts/adapter.py)
