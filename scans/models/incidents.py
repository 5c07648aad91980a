"""Incidents: a team's confirmed problems, grouped, with a timeline people add to
(scans/notify/incidents.py opens and closes them; pages and the API read and update them)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.dispatch import Signal

from accounts.models import Team
from accounts.tenancy import TeamOwned
from scans.models.endpoints import Endpoint
from scans.models.notify import AlertEvent


class IncidentStatus(models.TextChoices):
    # The words of the status-page convention (Atlassian Statuspage, Better Stack, Instatus).
    INVESTIGATING = "investigating", "Investigating"
    IDENTIFIED = "identified", "Identified"
    MONITORING = "monitoring", "Monitoring"
    RESOLVED = "resolved", "Resolved"


class Incident(TeamOwned):
    """A run of bad results of one or more of a team's endpoints that failed together (opened
    by a confirmed alert), or a problem a person declared (`manual`). Open until resolved:
    by the last of its problems recovering, or by hand."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="incidents")
    title = models.CharField(max_length=200)
    status = models.CharField(max_length=16, choices=IncidentStatus.choices,
                              default=IncidentStatus.INVESTIGATING)
    manual = models.BooleanField(default=False)
    endpoints = models.ManyToManyField(Endpoint, blank=True, related_name="incidents")
    opened_at = models.DateTimeField()
    # When the newest problem joined: later failures within the grouping window join it too.
    last_problem_at = models.DateTimeField()
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=200, blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    postmortem = models.TextField(blank=True, default="")

    class Meta(TeamOwned.Meta):
        ordering = ["-opened_at", "-pk"]
        indexes = [
            # the list page and the grouping rule: a team's open incidents, newest first
            models.Index(fields=["team", "-opened_at"], name="incident_by_team",
                         condition=Q(resolved_at__isnull=True)),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def open(self) -> bool:
        return self.resolved_at is None


class IncidentProblem(TeamOwned):
    """One endpoint's trouble of one kind ("down", "floor", "slo") inside an incident,
    from the alert that opened it to the one that ended it."""

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="problems")
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="+")
    trouble = models.CharField(max_length=30)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    team_lookup = "incident__team"

    class Meta(TeamOwned.Meta):
        ordering = ["started_at", "pk"]
        constraints = [
            # one active problem per endpoint and kind: a repeated alert finds it
            models.UniqueConstraint(fields=["endpoint", "trouble"], name="one_open_problem",
                                    condition=Q(ended_at__isnull=True)),
        ]


class TimelineKind(models.TextChoices):
    OPENED = "opened", "Opened"
    ALERT = "alert", "Alert"  # a state change and the alert sent for it
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    UPDATE = "update", "Update"  # a person's status and words
    RESOLVED = "resolved", "Resolved"
    POSTMORTEM = "postmortem", "Postmortem"


class IncidentUpdate(TeamOwned):
    """One line of an incident's timeline: what happened, when, and who said it."""

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="timeline")
    kind = models.CharField(max_length=16, choices=TimelineKind.choices)
    at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=IncidentStatus.choices, blank=True,
                              default="")
    text = models.TextField(blank=True, default="")
    # Shown on the team's public status pages (only an update a person marked so).
    public = models.BooleanField(default=False)
    by = models.CharField(max_length=200, blank=True, default="")  # a user's email or a token's name
    by_user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                blank=True, related_name="+")
    alert = models.ForeignKey(AlertEvent, on_delete=models.SET_NULL, null=True, blank=True,
                              related_name="+")

    team_lookup = "incident__team"

    class Meta(TeamOwned.Meta):
        ordering = ["at", "pk"]


#: Sent (with `update`) once a public update is committed: the status pages' subscribers hear of it
#: (scans/status_pages/subscriptions.py receives it; the incident code never imports the pages).
public_update_posted = Signal()
