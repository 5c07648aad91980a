"""Where a team's alerts go (notification channels), the alerts recorded, and their deliveries
(scans/notify/)."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from accounts.models import Team
from accounts.tenancy import TeamOwned
from scans.models.endpoints import Endpoint
from scans.models.scans import Scan


class ChannelKind(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook (signed)"
    SLACK = "slack", "Slack"
    TEAMS = "teams", "Microsoft Teams"
    DISCORD = "discord", "Discord"
    TELEGRAM = "telegram", "Telegram"
    PAGERDUTY = "pagerduty", "PagerDuty"
    OPSGENIE = "opsgenie", "Opsgenie"
    NTFY = "ntfy", "ntfy"
    APPRISE = "apprise", "Other (any Apprise URL over HTTP)"


class NotificationChannel(TeamOwned):
    """Somewhere a team's alerts go: its owners' and admins' mail, a signed webhook, or a chat
    or paging service through Apprise. Its URL and secret are one encrypted JSON object
    (`config_encrypted`, write-only like every secret); `destination` is what pages show of
    it (a host, never a token)."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="notification_channels")
    kind = models.CharField(max_length=12, choices=ChannelKind.choices)
    name = models.CharField(max_length=100)
    enabled = models.BooleanField(default=True)
    config_encrypted = models.TextField(blank=True, default="")
    destination = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(TeamOwned.Meta):
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="one_channel_name_per_team"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class AlertEvent(TeamOwned):
    """One piece of news (an endpoint down, up again after 37 min, a test message), recorded
    once with the message every channel is sent; its deliveries are the attempts per channel."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, null=True, blank=True,
                                 related_name="alert_events")
    # no constraint in the database: scans are partitioned (scans/models/scans.py), and the
    # retention pass sets this to None before it drops the scan's month
    scan = models.ForeignKey(Scan, on_delete=models.CASCADE, null=True, blank=True,
                             related_name="+", db_constraint=False)
    kind = models.CharField(max_length=30)  # "down", "down_recovered", …, "test"
    message = models.JSONField()  # scans.notify.alerts.payload, with how long it lasted
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(TeamOwned.Meta):
        indexes = [
            # how long an alert lasted: the endpoint's latest opening event of a kind
            models.Index(fields=["endpoint", "kind", "-created_at"], name="alert_event_history"),
        ]
        constraints = [
            # one event per change a scan found, however often its alerts are evaluated
            models.UniqueConstraint(fields=["scan", "kind"], name="one_alert_per_scan_and_kind",
                                    condition=Q(scan__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of endpoint {self.endpoint_id}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Waiting"  # due at next_attempt_at (first try or a retry)
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"  # gave up: out of attempts, or an answer no retry changes


class Delivery(TeamOwned):
    """One event sent to one channel: its retries are this row (attempts, next_attempt_at), not
    a countdown held by a worker, so a restarted worker loses none (scans/notify/channels/delivery.py)."""

    event = models.ForeignKey(AlertEvent, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE,
                                related_name="deliveries", db_index=False)
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices,
                              default=DeliveryStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    team_lookup = "channel__team"

    class Meta(TeamOwned.Meta):
        verbose_name_plural = "deliveries"  # what the team delete page counts
        indexes = [
            # the every-minute retry pass reads only waiting rows by due time
            models.Index(fields=["next_attempt_at"], name="delivery_due",
                         condition=Q(status="pending")),
            # a channel's history on the channels page, newest first
            models.Index(fields=["channel", "-created_at"], name="delivery_history"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["event", "channel"], name="one_delivery_per_channel"),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} to {self.channel_id} ({self.status})"
