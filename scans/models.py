"""Endpoints, their scans and check results, and the per-origin scan locks.

Every team-owned model uses TeamScopedManager as `objects` (see accounts/tenancy.py): reading it
without saying whose rows you want raises, so a view cannot leak another team's data by
accident. Code that serves every team (the beat, the reaper, id-only worker steps) reads
through scans/system_wide.py.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.timezone import now as timezone_now

from accounts.models import Team
from accounts.tenancy import TeamOwned
from scans.grader.scoring import GRADES

GRADE_CHOICES = [(g, g) for g in GRADES]
MIN_INTERVAL_MINUTES, MAX_INTERVAL_MINUTES = 5, 24 * 60


def new_badge_key() -> str:
    import secrets

    return secrets.token_urlsafe(18)


def default_scan_location() -> str:
    from django.conf import settings

    return settings.SCAN_DEFAULT_LOCATION


class EndpointMode(models.TextChoices):
    SCHEDULED = "scheduled", "Scheduled (the site scans it)"
    PUSHED = "pushed", "Pushed (scans uploaded from inside the network)"


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
    levels = models.JSONField(default=list)  # e.g. [1, 4, 16]; validated by the engine's plan
    requests_per_level = models.PositiveIntegerField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField(default=128)
    timeout_s = models.FloatField(default=60.0)
    interval_minutes = models.PositiveIntegerField(default=60)
    enabled = models.BooleanField(default=True)
    # A scheduled endpoint takes pushed reports only when this is on (a report from inside the
    # network then stands beside the site's own measurements); a pushed-only endpoint always
    # takes them (scans/pushes.py).
    accepts_pushes = models.BooleanField(
        default=False, help_text="Scheduled endpoints only: also accept reports pushed with "
                                 "tokvera scan --publish.")
    price_input_per_mtok = models.DecimalField(max_digits=12, decimal_places=4, null=True,
                                               blank=True)
    price_output_per_mtok = models.DecimalField(max_digits=12, decimal_places=4, null=True,
                                                blank=True)
    # The team's export of real traffic: never sent anywhere; only for repeat_prompt_share.
    prompt_sample_encrypted = models.TextField(blank=True, default="")
    # The workload (issue 21; scans/profile.py): None is the default plan (built-in prompts,
    # replies capped by max_tokens). The load dataset is JSONL prompts, stored encrypted like
    # the prompt sample and decrypted in memory only when a scan is planned.
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    shared_prefix_tokens = models.PositiveIntegerField(null=True, blank=True)
    warmup = models.PositiveIntegerField(null=True, blank=True)
    load_dataset_encrypted = models.TextField(blank=True, default="")
    # SLO targets
    slo_grade_floor = models.CharField(max_length=1, choices=GRADE_CHOICES, default="B")
    slo_ttft_p95_ms = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)])
    slo_error_rate = models.FloatField(null=True, blank=True)
    # share of a window's time that must meet every target (the rest is the error budget);
    # judged on the time scans cover, never on uncovered time (scans/slo.py, docs/slo.md)
    slo_objective = models.FloatField(default=0.9)
    # Capacity within the SLO (issue 22): each scan also searches for the largest concurrency
    # whose requests meet the TTFT and error-rate targets (scans/profile.py bounds the search by
    # the site's per-scan limits); an alert when it drops below capacity_alert_below streams.
    capacity_search = models.BooleanField(default=False)
    capacity_search_levels = models.PositiveSmallIntegerField(
        default=8, validators=[MinValueValidator(1), MaxValueValidator(16)])
    capacity_alert_below = models.PositiveIntegerField(null=True, blank=True)
    # badges and alerts
    badge_key = models.CharField(max_length=40, unique=True, default=new_badge_key)
    # Where its alerts go (issue 24): every channel of the team, or only those picked.
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
    # "ticket" the slow pair, "page" the fast pair; scans/alerts.py, scans/slo.py).
    slo_burn_alert = models.CharField(max_length=6, blank=True, default="",
                                      choices=[("", "none"), ("ticket", "ticket"),
                                               ("page", "page")])
    # scheduling
    # Where the site scans it from: names in SCAN_LOCATIONS; empty means the site's own
    # (SCAN_DEFAULT_LOCATION). Each location gets its own scan per slot (scans/scheduling.py).
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
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(interval_minutes__gte=MIN_INTERVAL_MINUTES,
                            interval_minutes__lte=MAX_INTERVAL_MINUTES),
                name="endpoint_interval_range",
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


class ScanTrigger(models.TextChoices):
    SCHEDULE = "schedule", "Schedule"
    MANUAL = "manual", "Manual"
    API = "api", "API"
    PUSH = "push", "Pushed report"


class ScanStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"  # ran to the end, whatever the grade
    ERRORED = "errored", "Errored"  # our side failed: dead worker, refused address…
    # A pushed report whose proof failed (scans/pushes.py): error_reason holds the reasons, one
    # per line. Not a measurement: left out of SLO windows, states and alerts like a queued scan.
    REFUSED = "refused", "Refused"
    # A manual or API scan a team member stopped (scans/worker.py, cancel): error_reason says
    # who and when. Like refused, not a measurement: no grade, left out of SLO windows, states
    # and alerts.
    CANCELLED = "cancelled", "Cancelled"


class CapacityOutcome(models.TextChoices):
    """What a scan's capacity search found (report.json's `capacity`); "" when it did not
    search."""

    MET = "met", "met"  # the boundary was found: the next level up missed
    NONE_MET = "none_met", "no level met the SLO"
    MET_AT_HIGHEST = "met_at_highest", "met at the highest level tried"  # may be higher


class Scan(TeamOwned):
    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="scans")
    trigger = models.CharField(max_length=10, choices=ScanTrigger.choices)
    # The schedule slot this scan fills; unique per endpoint and location so a doubled beat
    # makes one scan.
    slot = models.DateTimeField(null=True, blank=True)
    # Where it was (or will be) measured from: the Celery queue scans.<location> runs it.
    # Pushed reports carry "pushed": measured inside the team's network.
    location = models.CharField(max_length=40, default=default_scan_location)
    # scheme://host:port of the target when it was queued: the worker that frees an origin
    # hands it to the next scan waiting for it (dispatch.hand_off).
    origin = models.CharField(max_length=300, blank=True, default="")
    status = models.CharField(max_length=10, choices=ScanStatus.choices,
                              default=ScanStatus.QUEUED)
    error_reason = models.TextField(blank=True, default="")
    queued_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # A running scan not finished by then is presumed dead (worker killed) and reaped.
    deadline_at = models.DateTimeField(null=True, blank=True)
    # A running scan touches this every SCAN_HEARTBEAT_S; a silent one's worker died (reap()).
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # When the beat sends this queued scan to a worker (again): nothing waits inside a worker,
    # so a killed worker loses no other scan (dispatch.redispatch_due()).
    redispatch_at = models.DateTimeField(null=True, blank=True)
    report = models.JSONField(null=True, blank=True)
    # denormalized from report["score"] for lists, charts and SLO windows
    grade = models.CharField(max_length=25, blank=True, default="")  # A–F or insufficient_evidence
    # The endpoint never answered (the preflight stopped the scan, or no request succeeded):
    # down is a state, not a grade, so such a scan is stored with grade "" and points None
    # (report.json keeps the F the scoring spec gives; DECISIONS.md, issue 23).
    down = models.BooleanField(default=False)
    points = models.DecimalField(max_digits=4, decimal_places=1, null=True, blank=True)
    uncapped_grade = models.CharField(max_length=1, blank=True, default="")
    scoring_version = models.CharField(max_length=20, blank=True, default="")
    provisional = models.BooleanField(default=True)
    pushed = models.BooleanField(default=False)
    # A pushed scan's team (its endpoint's), copied so that the proof workers pick the next
    # team and its oldest queued report from one partial index of queued pushed scans
    # (scan_proof_waiting; scans/pushes.py). The endpoint's foreign key is the integrity: the
    # scan goes with its endpoint, so this copy needs no constraint of its own.
    proof_team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.DO_NOTHING,
                                   db_constraint=False, db_index=False, related_name="+")
    # SHA-256 of a pushed report as uploaded: a retried upload finds its scan instead of
    # storing the report twice.
    report_digest = models.CharField(max_length=64, blank=True, default="")
    tool_version = models.CharField(max_length=40, blank=True, default="")
    # denormalized from report["capacity"] (issue 22) for the trend, the dashboard, the gauge
    # and the alert: concurrency None with outcome none_met when no level met the SLO
    capacity_outcome = models.CharField(max_length=20, choices=CapacityOutcome.choices,
                                        blank=True, default="")
    capacity_concurrency = models.PositiveIntegerField(null=True, blank=True)
    capacity_requests_per_s = models.FloatField(null=True, blank=True)
    capacity_output_tokens_per_s = models.FloatField(null=True, blank=True)
    capacity_output_unit = models.CharField(max_length=12, blank=True, default="")
    # When the full report was replaced by its summary, REPORT_RETENTION_DAYS after the scan
    # finished (scans/retention.py): per-request samples gone; grade, points, checks and each
    # level's figures kept, in the same JSON shape. None while the full report is kept.
    report_pruned_at = models.DateTimeField(null=True, blank=True)
    # Read out of the report once, as it is stored (worker.report_columns), so that lists,
    # charts and states never read a report (up to REPORT_MAX_BYTES each):
    # the URL the scan reached (report.target.base_url): another URL is another server
    target_url = models.CharField(max_length=500, blank=True, default="")
    # the load it ran: {pf_<name>: text} for each of scans.profile.PLAN_PATHS, the text
    # PostgreSQL's ->> gives (the rollups' `plan`); None when the scan stored no report
    load_plan = models.JSONField(null=True, blank=True)
    # why it was down or degraded (scans/state.py): report.preflight and failure_summary
    preflight_stopped = models.BooleanField(default=False)
    preflight_cause = models.TextField(blank=True, default="")
    failure_summary = models.TextField(blank=True, default="")
    preflight_warnings = models.JSONField(null=True, blank=True)

    team_lookup = "endpoint__team"

    class Meta(TeamOwned.Meta):
        ordering = ["-queued_at"]
        indexes = [
            # the pruning pass reads only the scans still holding a full report, oldest first:
            # about REPORT_RETENTION_DAYS of rows, however long the table (scans/retention.py)
            models.Index(fields=["finished_at"], name="scan_report_kept",
                         condition=Q(report_pruned_at__isnull=True, report__isnull=False)),
            # the rollup pass finds the hours touched since its last pass by finish time (a
            # late scan lands in an old hour of queued_at; scans/rollups.py)
            models.Index(fields=["finished_at"], name="scan_finished",
                         condition=Q(status="succeeded")),
            # the capacity trend and the latest capacity: only the scans that searched
            models.Index(fields=["endpoint", "-queued_at"], name="scan_capacity_history",
                         condition=~Q(capacity_outcome="")),
            # history, sparklines and SLO windows: one endpoint's scans by time
            models.Index(fields=["endpoint", "-queued_at"], name="scan_endpoint_time"),
            # the reaper looks only at unfinished scans
            models.Index(fields=["status", "deadline_at"], name="scan_unfinished",
                         condition=Q(status__in=["queued", "running"])),
            # the next scan waiting for an origin that was just freed
            models.Index(fields=["origin", "location", "queued_at"], name="scan_waiting_for_origin",
                         condition=Q(status="queued")),
        ]
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "location", "slot"],
                                    name="one_scan_per_slot_and_location",
                                    condition=Q(slot__isnull=False)),
            models.UniqueConstraint(fields=["endpoint", "report_digest"],
                                    name="one_scan_per_pushed_report",
                                    condition=~Q(report_digest="")),
        ]

    def __str__(self) -> str:
        return f"scan {self.public_id} of {self.endpoint_id} ({self.status})"

    @property
    def has_letter(self) -> bool:
        return self.grade in GRADES


class PushedReportBody(TeamOwned):
    """The bytes of a pushed report waiting for its proof: the upload stores them with a queued
    pushed scan and answers 202; the proof worker (queue "proofs") reads, proves and deletes
    them (scans/pushes.py)."""

    scan = models.OneToOneField(Scan, on_delete=models.CASCADE, primary_key=True,
                                related_name="pushed_body")
    body = models.BinaryField()

    team_lookup = "scan__endpoint__team"

    class Meta(TeamOwned.Meta):
        pass

    def __str__(self) -> str:
        return f"pushed report of scan {self.scan_id}"


class ProofTurn(TeamOwned):
    """When a team's last pushed-report proof started: the proof workers serve the team whose
    last proof started longest ago first (scans/pushes.py, claim_turn), and write this in the
    transaction that claims the report."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, primary_key=True,
                                related_name="+")
    last_started_at = models.DateTimeField()

    class Meta(TeamOwned.Meta):
        pass

    def __str__(self) -> str:
        return f"last proof of team {self.team_id} at {self.last_started_at}"


class CheckResult(TeamOwned):
    """One check of one finished scan: a check's history is one indexed query."""

    # No single-column FK indexes: one_result_per_check (scan, …) and check_history
    # (endpoint, …) already lead with these columns, and this table holds tens of millions.
    scan = models.ForeignKey(Scan, on_delete=models.CASCADE, related_name="check_results",
                             db_index=False)
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="+",
                                 db_index=False)
    check_id = models.CharField(max_length=60)
    value = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=25)
    counted = models.BooleanField()
    measured_at = models.DateTimeField()
    scoring_version = models.CharField(max_length=20)

    team_lookup = "endpoint__team"

    class Meta(TeamOwned.Meta):
        indexes = [
            models.Index(fields=["endpoint", "check_id", "measured_at"], name="check_history"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["scan", "check_id"], name="one_result_per_check"),
        ]

    def __str__(self) -> str:
        return f"{self.check_id}={self.value} ({self.status})"


# --- rollups (issue 24; scans/rollups.py) -----------------------------------------------------


class RollupPeriod(models.TextChoices):
    HOUR = "hour", "hour"
    DAY = "day", "day"


class ScanRollup(TeamOwned):
    """One hour or one UTC day of an endpoint's succeeded scans (by queued_at), per location,
    scoring version, load (`plan`: the pf_* texts of scans/profile.py PLAN_PATHS) and URL: the
    groups a chart never merges. Sums and counts, never means, so buckets add up exactly;
    long chart ranges read these instead of the scans (scans/history.py)."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="+",
                                 db_index=False)
    period = models.CharField(max_length=4, choices=RollupPeriod.choices)
    bucket_start = models.DateTimeField()
    location = models.CharField(max_length=40)
    scoring_version = models.CharField(max_length=20)
    plan = models.JSONField()
    target_url = models.CharField(max_length=500)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    scans = models.PositiveIntegerField()
    points_sum = models.DecimalField(max_digits=14, decimal_places=1, null=True)
    points_n = models.PositiveIntegerField()
    points_min = models.DecimalField(max_digits=4, decimal_places=1, null=True)
    points_max = models.DecimalField(max_digits=4, decimal_places=1, null=True)
    worst_grade = models.CharField(max_length=25)
    capped = models.PositiveIntegerField()
    no_letter = models.PositiveIntegerField()
    down = models.PositiveIntegerField()
    provisional = models.PositiveIntegerField()
    # headline figures of the first level (scans.history.HEADLINE_FIGURES): sum and count
    ttft_p50_sum = models.FloatField(null=True)
    ttft_p50_n = models.PositiveIntegerField()
    ttft_p95_sum = models.FloatField(null=True)
    ttft_p95_n = models.PositiveIntegerField()
    tokens_per_s_sum = models.FloatField(null=True)
    tokens_per_s_n = models.PositiveIntegerField()

    team_lookup = "endpoint__team"

    class Meta(TeamOwned.Meta):
        constraints = [
            # the upsert's conflict target; its leading columns serve the charts' range reads
            models.UniqueConstraint(
                fields=["endpoint", "period", "bucket_start", "location", "scoring_version",
                        "plan", "target_url"], name="one_scan_rollup_per_group"),
        ]

    def __str__(self) -> str:
        return f"{self.period} {self.bucket_start:%Y-%m-%d %H:%M} of {self.endpoint_id}"


class CheckRollup(TeamOwned):
    """One hour or one UTC day of one check's results (by measured_at), grouped as ScanRollup."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="+",
                                 db_index=False)
    check_id = models.CharField(max_length=60)
    period = models.CharField(max_length=4, choices=RollupPeriod.choices)
    bucket_start = models.DateTimeField()
    location = models.CharField(max_length=40)
    scoring_version = models.CharField(max_length=20)
    plan = models.JSONField()
    target_url = models.CharField(max_length=500)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    scans = models.PositiveIntegerField()
    value_sum = models.FloatField(null=True)
    value_n = models.PositiveIntegerField()
    value_min = models.FloatField(null=True)
    value_max = models.FloatField(null=True)
    passed = models.PositiveIntegerField()
    warned = models.PositiveIntegerField()
    failed = models.PositiveIntegerField()
    unmeasured = models.PositiveIntegerField()
    insufficient = models.PositiveIntegerField()

    team_lookup = "endpoint__team"

    class Meta(TeamOwned.Meta):
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "check_id", "period", "bucket_start", "location",
                        "scoring_version", "plan", "target_url"],
                name="one_check_rollup_per_group"),
        ]

    def __str__(self) -> str:
        return f"{self.check_id} {self.period} {self.bucket_start:%Y-%m-%d %H:%M}"


class RollupWatermark(models.Model):
    """How far the rollup pass has read: every succeeded scan finished before `until` (less the
    pass's overlap) is in the rollups. System-wide, one row."""

    name = models.CharField(max_length=40, unique=True)
    until = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} until {self.until:%Y-%m-%d %H:%M:%S}"


class OriginLock(models.Model):
    """At most one running scan per target origin (scheme://host:port), across all workers.

    A row is the lock: inserting it is atomic on every database, and a lock whose holder died
    is taken over once it expires."""

    origin = models.CharField(max_length=300, unique=True)
    scan_id = models.BigIntegerField()
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.origin} held by scan {self.scan_id}"


# --- notification channels (issue 24; scans/channels/) ---------------------------------------


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
    scan = models.ForeignKey(Scan, on_delete=models.CASCADE, null=True, blank=True,
                             related_name="+")
    kind = models.CharField(max_length=30)  # "down", "down_recovered", …, "test"
    message = models.JSONField()  # scans.alerts.payload, with how long it lasted
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
    a countdown held by a worker, so a restarted worker loses none (scans/channels/delivery.py)."""

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


# --- public status pages (issue 24; scans/status_page.py) -------------------------------------


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


# --- maintenance windows (issue 24; scans/maintenance.py) -------------------------------------


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
