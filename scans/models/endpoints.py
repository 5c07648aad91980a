"""An endpoint a team tracks: where it is, how it is scanned, its SLO targets and alert state."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.dispatch import Signal

from accounts.models import Team
from accounts.tenancy import TeamOwned
from scans.grader import APIS, GRADES

if TYPE_CHECKING:  # through the package: the channel's module imports this one
    from scans.models import NotificationChannel

GRADE_CHOICES = [(g, g) for g in GRADES]
MIN_INTERVAL_MINUTES, MAX_INTERVAL_MINUTES = 5, 24 * 60
# Liveness probes between graded scans (scans/liveness/): how often, and how many results in
# a row confirm a change of state before it alerts.
DEFAULT_PROBE_INTERVAL_S, MIN_PROBE_INTERVAL_S, MAX_PROBE_INTERVAL_S = 60, 30, 15 * 60
DEFAULT_CONFIRM_AFTER, MAX_CONFIRM_AFTER = 2, 10


def new_badge_key() -> str:
    import secrets

    return secrets.token_urlsafe(18)



class EndpointMode(models.TextChoices):
    SCHEDULED = "scheduled", "Scheduled (the site scans it)"
    PUSHED = "pushed", "Pushed (scans uploaded from inside the network)"


# The APIs a scan's load can speak (the grader's APIS), as the form offers them.
API_LABELS = {
    "chat": "Chat completions",
    "completions": "Completions",
    "responses": "Responses API",
    "messages": "Anthropic Messages",
    "embeddings": "Embeddings",
}
API_CHOICES = [(name, API_LABELS[name]) for name in APIS]


class Endpoint(TeamOwned):
    """An inference endpoint a team tracks. Secrets are stored encrypted (accounts/encryption.py)
    and are write-only: forms and the API never render them back."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="endpoints")
    name = models.CharField(max_length=100)
    base_url = models.URLField(max_length=500)
    model = models.CharField(max_length=200)
    mode = models.CharField(max_length=10, choices=EndpointMode.choices,
                            default=EndpointMode.SCHEDULED)
    api_key_encrypted = models.TextField(blank=True, default="")
    # scan profile
    levels = models.JSONField(default=list)  # e.g. [1, 4, 16]; validated by the grader's plan
    requests_per_level = models.PositiveIntegerField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField(default=128)
    timeout_s = models.FloatField(default=60.0)
    interval_minutes = models.PositiveIntegerField(default=60)
    enabled = models.BooleanField(default=True)
    # A scheduled endpoint takes pushed reports only when this is on (a report from inside the
    # network then stands beside the site's own measurements); a pushed-only endpoint always
    # takes them (scans/running/pushes.py).
    accepts_pushes = models.BooleanField(
        default=False, help_text="Scheduled endpoints only: also accept reports pushed with "
                                 "tokvera scan --publish.")
    price_input_per_mtok = models.DecimalField(max_digits=12, decimal_places=4, null=True,
                                               blank=True)
    price_output_per_mtok = models.DecimalField(max_digits=12, decimal_places=4, null=True,
                                                blank=True)
    # The team's export of real traffic: never sent anywhere; only for repeat_prompt_share.
    prompt_sample_encrypted = models.TextField(blank=True, default="")
    # The workload (scans/endpoints/profile.py): None is the default plan (built-in prompts,
    # replies capped by max_tokens). The load dataset is JSONL prompts, stored encrypted like
    # the prompt sample and decrypted in memory only when a scan is planned.
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    shared_prefix_tokens = models.PositiveIntegerField(null=True, blank=True)
    warmup = models.PositiveIntegerField(null=True, blank=True)
    load_dataset_encrypted = models.TextField(blank=True, default="")
    # The API the load speaks (scans.grader.APIS) and whether it is an agent's sessions (the
    # grader's agent preset: conversations mixing tool calls and structured output over a
    # shared system prompt); a change of either is a change of load, as the charts show it.
    api = models.CharField(max_length=16, default="chat", choices=API_CHOICES)
    agent_workload = models.BooleanField(default=False)
    # SLO targets
    slo_grade_floor = models.CharField(max_length=1, choices=GRADE_CHOICES, default="B")
    slo_ttft_p95_ms = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)])
    slo_error_rate = models.FloatField(null=True, blank=True)
    # share of a window's time that must meet every target (the rest is the error budget);
    # judged on the time scans cover, never on uncovered time (scans/history/slo_windows.py, docs/slo.md)
    slo_objective = models.FloatField(default=0.9)
    # Capacity within the SLO: each scan also searches for the largest concurrency
    # whose requests meet the TTFT and error-rate targets (scans/endpoints/profile.py bounds the search by
    # the site's per-scan limits); an alert when it drops below capacity_alert_below streams.
    capacity_search = models.BooleanField(default=False)
    capacity_search_levels = models.PositiveSmallIntegerField(
        default=8, validators=[MinValueValidator(1), MaxValueValidator(16)])
    capacity_alert_below = models.PositiveIntegerField(null=True, blank=True)
    # badges and alerts
    badge_key = models.CharField(max_length=40, unique=True, default=new_badge_key)
    # Where its alerts go: every channel of the team, or only those picked.
    all_channels = models.BooleanField(
        default=True, help_text="Alerts go to every channel of the team, new ones included.")
    channels: models.ManyToManyField[NotificationChannel, Any] = models.ManyToManyField(
        "NotificationChannel", blank=True, related_name="endpoints")
    alert_after_errors = models.PositiveSmallIntegerField(
        default=3, validators=[MinValueValidator(1), MaxValueValidator(100)])
    below_floor = models.BooleanField(default=False)  # alert state: last graded scan missed it
    erroring = models.BooleanField(default=False)  # alert state: N errored scans in a row
    capacity_low = models.BooleanField(default=False)  # alert state: capacity below the alert
    # Alert state: the multi-window burn-rate alert last sent in this episode ("" none,
    # "ticket" the slow pair, "page" the fast pair; scans/notify/alerts.py, scans/history/slo_windows.py).
    slo_burn_alert = models.CharField(max_length=6, blank=True, default="",
                                      choices=[("", "none"), ("ticket", "ticket"),
                                               ("page", "page")])
    # Liveness between graded scans (scans/liveness/): probed every probe_interval_s from each
    # location; a state change alerts once confirm_after results in a row agree (both ways).
    probe_interval_s = models.PositiveIntegerField(
        default=DEFAULT_PROBE_INTERVAL_S,
        validators=[MinValueValidator(MIN_PROBE_INTERVAL_S),
                    MaxValueValidator(MAX_PROBE_INTERVAL_S)])
    next_probe_at = models.DateTimeField(null=True, blank=True)
    confirm_after = models.PositiveSmallIntegerField(
        default=DEFAULT_CONFIRM_AFTER,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_CONFIRM_AFTER)])
    # Re-send a down alert every this many minutes while it lasts (None: once per episode).
    renotify_minutes = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(10), MaxValueValidator(7 * 24 * 60)])
    # Alert state of the probes' verdict across locations: "" not probed yet, "up", "down",
    # "degraded" (a minority of locations confirms it down); flipped by a conditional UPDATE.
    liveness = models.CharField(max_length=8, blank=True, default="")
    liveness_since = models.DateTimeField(null=True, blank=True)
    liveness_cause = models.CharField(max_length=400, blank=True, default="")
    liveness_notified_at = models.DateTimeField(null=True, blank=True)
    # A change a maintenance window held: told at the first probe after the window.
    liveness_held = models.BooleanField(default=False)
    # scheduling
    # Where the site scans it from: names in SCAN_LOCATIONS; empty means the site's own
    # (SCAN_DEFAULT_LOCATION). Each location gets its own scan per slot (scans/endpoints/scheduling.py).
    locations = models.JSONField(default=list, blank=True)
    next_scan_at = models.DateTimeField(null=True, blank=True)
    last_manual_scan_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(TeamOwned.Meta):
        ordering = ["name"]
        indexes = [
            # the every-minute due-scan finder reads only enabled scheduled rows by due time
            models.Index(fields=["next_scan_at"], name="endpoint_due",
                         condition=Q(enabled=True, mode="scheduled")),
            # the probe dispatcher's due finder (not partial: the scan finder's partial index
            # must stay the planner's only match for its own condition)
            models.Index(fields=["next_probe_at"], name="endpoint_probe_due"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(interval_minutes__gte=MIN_INTERVAL_MINUTES,
                            interval_minutes__lte=MAX_INTERVAL_MINUTES),
                name="endpoint_interval_range",
            ),
            models.CheckConstraint(
                condition=Q(probe_interval_s__gte=MIN_PROBE_INTERVAL_S,
                            probe_interval_s__lte=MAX_PROBE_INTERVAL_S),
                name="endpoint_probe_interval_range",
            ),
            models.CheckConstraint(
                condition=Q(confirm_after__gte=1, confirm_after__lte=MAX_CONFIRM_AFTER),
                name="endpoint_confirm_after_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.model})"

    @property
    def has_api_key(self) -> bool:
        return bool(self.api_key_encrypted)

    @property
    def has_prompt_sample(self) -> bool:
        return bool(self.prompt_sample_encrypted)

    @property
    def has_load_dataset(self) -> bool:
        return bool(self.load_dataset_encrypted)



#: Sent (with `endpoint` and `at`) when an endpoint's URL moves to another server and its alert
#: state starts over: what was confirmed of the old server ends there.
endpoint_moved = Signal()
