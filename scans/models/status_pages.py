"""A team's public status page and the endpoints it shows (scans/status_pages/); the team's
maintenance windows (scans/maintenance.py), which the page shows as maintenance."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models.functions import Lower
from django.dispatch import Signal
from django.utils.timezone import now as timezone_now

from accounts.models import Team
from accounts.tenancy import TeamOwned
from scans.models.endpoints import Endpoint


def new_status_page_slug() -> str:
    """20 characters of a-z and 0-9 (about 103 bits): an address nobody guesses."""
    import secrets
    import string

    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(20))


class StatusPage(TeamOwned):
    """A team's public status page: off until the team turns it on, at /status/<slug>/, with
    only the endpoints it picked under the names it gave them (StatusPageEndpoint)."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="status_page")
    enabled = models.BooleanField(default=False)
    slug = models.CharField(max_length=50, unique=True, default=new_status_page_slug)
    title = models.CharField(max_length=100, default="Status")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta(TeamOwned.Meta):
        pass

    def __str__(self) -> str:
        return f"status page {self.slug} ({'on' if self.enabled else 'off'})"


class StatusPageEndpoint(TeamOwned):
    """One endpoint a status page shows, under the name the team chose for it."""

    status_page = models.ForeignKey(StatusPage, on_delete=models.CASCADE, related_name="entries")
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="+")
    display_name = models.CharField(max_length=100)
    position = models.PositiveSmallIntegerField(default=0)

    team_lookup = "status_page__team"

    class Meta(TeamOwned.Meta):
        ordering = ["position", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["status_page", "endpoint"],
                                    name="one_entry_per_endpoint_per_status_page"),
        ]

    def __str__(self) -> str:
        return self.display_name


#: Sent (send_robust: a failing receiver never breaks the sender) where an alert decides that
#: an endpoint went down or came back (scans/notify/alerts.py, scans/liveness/record.py), with
#: `endpoint`, `kinds` (the alert kinds) and `at`; the status page subscriptions listen
#: (scans/status_pages/subscriptions.py). A signal, so the alert path imports nothing of the pages.
incident_news = Signal()


class StatusPageSubscriber(TeamOwned):
    """Someone who asked for a status page's news by email (scans/status_pages/subscriptions.py).
    Pending until the confirmation link is followed (double opt-in): only a confirmed subscriber
    gets mail. The address is never shown anywhere; the team sees only how many are confirmed.
    `token_hash` is the SHA-256 of the pending confirmation link's secret (blank once used)."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    status_page = models.ForeignKey(StatusPage, on_delete=models.CASCADE, related_name="subscribers")
    email = models.EmailField(max_length=254)
    token_hash = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone_now)
    confirmed_at = models.DateTimeField(null=True, blank=True)

    team_lookup = "status_page__team"

    class Meta(TeamOwned.Meta):
        constraints = [
            models.UniqueConstraint(Lower("email"), "status_page",
                                    name="one_subscription_per_address_per_status_page"),
        ]

    def __str__(self) -> str:
        return f"subscriber {self.public_id} ({'confirmed' if self.confirmed_at else 'pending'})"


# --- maintenance windows (scans/maintenance.py) -------------------------------------


class MaintenanceKind(models.TextChoices):
    ONCE = "once", "Once (from a start to an end)"
    WEEKLY = "weekly", "Every week (on chosen days, at a time)"


class MaintenanceWindow(TeamOwned):
    """Time a team plans to be down: alerts are held, the time is left out of SLO windows, and
    scans stop only when `pause_scans` says so. For one endpoint, or the whole team (endpoint
    null). Once: [starts_at, ends_at). Weekly: on `weekdays` (0 Monday … 6 Sunday) at
    `start_time` for `duration_minutes`, read in `timezone` (an IANA name, kept with the window
    so a change of anyone's profile does not move it), from `created_at` on."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="maintenance_windows")
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, null=True, blank=True,
                                 related_name="maintenance_windows")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=MaintenanceKind.choices,
                            default=MaintenanceKind.ONCE)
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    weekdays = models.JSONField(default=list, blank=True)
    start_time = models.TimeField(null=True, blank=True)
    duration_minutes = models.PositiveIntegerField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    pause_scans = models.BooleanField(
        default=False, help_text="Also start no scheduled scan during the window.")
    created_at = models.DateTimeField(default=timezone_now)

    class Meta(TeamOwned.Meta):
        ordering = ["name", "pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"
