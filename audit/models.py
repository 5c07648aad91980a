"""One row per change to a team's configuration: who, when, from where, what and how.

Rows are written by audit.record in the transaction of the change itself, and never changed
afterwards; they go when the team goes or when they are older than AUDIT_RETENTION_DAYS
(audit.retention). A secret's value never reaches a row: only that it was set, removed or
changed (audit.snapshot masks it).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from accounts.tenancy import TeamOwned


class Action(models.TextChoices):
    CREATE = "create", "created"
    CHANGE = "change", "changed"
    DELETE = "delete", "deleted"


class ActorKind(models.TextChoices):
    USER = "user", "User"
    TOKEN = "token", "API token"
    SYSTEM = "system", "System"  # a command, a task or the site itself: no request


class AuditEntry(TeamOwned):
    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField(default=timezone.now)
    actor_kind = models.CharField(max_length=6, choices=ActorKind.choices)
    # Who, in words that outlive the account or token ("alice@example.com", "token ci (tkv_ab12…)").
    actor = models.CharField(max_length=200)
    actor_user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    actor_token = models.ForeignKey("accounts.ApiToken", null=True, blank=True,
                                    on_delete=models.SET_NULL, related_name="+")
    # The client as every per-address count reads it (common/client_address.py); none
    # without a request.
    address = models.GenericIPAddressField(null=True, blank=True)
    action = models.CharField(max_length=6, choices=Action.choices)
    object_type = models.CharField(max_length=40)  # "endpoint", "channel", … (audit.snapshot)
    object_id = models.CharField(max_length=64)  # its public id (a team's: its slug)
    object_name = models.CharField(max_length=200)
    # {field: {"before": …, "after": …}}: every field on create and delete, the changed ones
    # on change; secrets as "•••" / "changed" / "".
    changes = models.JSONField(default=dict)

    class Meta(TeamOwned.Meta):
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            # The page and the export: one team's rows, newest first, within a time range.
            models.Index(fields=["team", "-at"], name="audit_team_at"),
            # Retention deletes by age across all teams.
            models.Index(fields=["at"], name="audit_at"),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.get_action_display()} {self.object_type} {self.object_name}"
