from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Teams, members and API tokens"

    def ready(self):
        from tokvera_site.logging import redact_access_logs

        redact_access_logs()  # request lines carry invitation secrets
