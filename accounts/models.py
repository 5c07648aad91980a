"""Teams (the tenants), their members, invitations and API tokens.

Every team-owned model uses TeamScopedManager as `objects` (see accounts/tenancy.py): reading it
without saying whose rows you want raises, so a view cannot leak another team's data by
accident. Only code where no team is known goes around it (see accounts/tenancy.py).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from timezone_field import TimeZoneField

from accounts.tenancy import TeamOwned


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Editor"  # changes endpoints and windows; "member" in the API
    VIEWER = "viewer", "Viewer"


class Team(TeamOwned):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)
    # Badges show only grades the site measured itself, never pushed ones (owners and admins).
    badge_site_measured_only = models.BooleanField(default=False)
    # Members without two-factor authentication are sent to set it up before they see the
    # team's pages (accounts.tenancy.Access.withheld); API tokens are unaffected.
    require_two_factor = models.BooleanField(default=False)
    # Members see the team's pages only in a session signed in through the site's single
    # sign-on (accounts/sso.py); API tokens are unaffected.
    require_sso = models.BooleanField(default=False)
    # The last whole month's SLA report is mailed to the owners once the next month begins
    # (scans.sla.mail_due_reports); `sla_report_mailed_for` is the first day of the last
    # month mailed, so a retried or late pass mails each month once.
    sla_report_mail = models.BooleanField(default=False)
    sla_report_mailed_for = models.DateField(null=True, blank=True)

    team_lookup = "pk"

    class Meta(TeamOwned.Meta):
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Profile(models.Model):
    """What a person says about themselves: a name to show and the timezone every page uses
    (accounts.middleware.UserTimezoneMiddleware). Not team-owned: it belongs to the user."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile")
    name = models.CharField(max_length=100, blank=True)
    timezone = TimeZoneField(default="UTC", choices_display="WITH_GMT_OFFSET")

    def __str__(self) -> str:
        return f"profile of {self.user}"


class Membership(TeamOwned):
    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    # Given by the single sign-on provider's claims (accounts/sso.py): it follows them at each
    # sign-on, and goes when they no longer grant it. Others are the team's own to change.
    from_sso = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(TeamOwned.Meta):
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_user_team")
        ]
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Invitation(TeamOwned):
    """An email invitation; the link carries a secret of which only the hash is stored."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    secret_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta(TeamOwned.Meta):
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invitation of {self.email} to {self.team_id} as {self.role}"


class TokenScope(models.TextChoices):
    READ_ONLY = "read-only", "Read-only"
    READ_WRITE = "read-write", "Read-write"


class ApiToken(TeamOwned):
    """A team API token `tkv_<secret>`: only a lookup prefix and an HMAC of it are stored."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    # The prefix finds the row; the HMAC proves the secret (compared in constant time).
    prefix = models.CharField(max_length=16, unique=True)
    secret_hmac = models.CharField(max_length=64)
    scope = models.CharField(max_length=10, choices=TokenScope.choices)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta(TeamOwned.Meta):
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(scope__in=["read-only", "read-write"]), name="api_token_scope_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.scope})"

    @property
    def is_active(self) -> bool:
        from django.utils import timezone

        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()
