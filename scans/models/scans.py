"""A scan of an endpoint and one row per check it measured.

Both tables are partitioned by month in PostgreSQL (scans/models/scan_partitions.py), on
`partition_month`: retention drops whole months. A partitioned table's unique keys must hold
its partition key, so the database's primary keys are (id, partition_month) and each unique
constraint below names partition_month too; `id` comes from one sequence and stays unique,
and Django keeps it as the primary key. No foreign key in the database points at a scan (it
would need the pair): Django's own cascade deletes a scan's rows, and the retention pass
detaches what points into a month before it drops it."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models
from django.db.models import Q

from accounts.models import Team
from accounts.tenancy import TeamOwned
from common.time_partitions import this_month
from scans.grader import GRADES
from scans.models.endpoints import Endpoint
from scans.models.scan_partitions import ensure_scan_month


def default_scan_location() -> str:
    from django.conf import settings

    return settings.SCAN_DEFAULT_LOCATION


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
    # A pushed report whose proof failed (scans/running/pushes.py): error_reason holds the reasons, one
    # per line. Not a measurement: left out of SLO windows, states and alerts like a queued scan.
    REFUSED = "refused", "Refused"
    # A manual or API scan a team member stopped (scans/running/worker.py, cancel): error_reason says
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
    # unique with partition_month (random: unique alone in practice; looked up alone)
    public_id = models.UUIDField(default=uuid.uuid4, db_index=True, editable=False)
    # The UTC month whose partition holds the scan: its slot's for a scheduled scan, so that
    # one_scan_per_slot_and_location, which must hold it, still allows one scan per slot;
    # else the month it was queued in. Never changes.
    partition_month = models.DateField(default=this_month, editable=False)
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
    # (report.json keeps the F the scoring spec gives; DECISIONS.md).
    down = models.BooleanField(default=False)
    points = models.DecimalField(max_digits=4, decimal_places=1, null=True, blank=True)
    uncapped_grade = models.CharField(max_length=1, blank=True, default="")
    scoring_version = models.CharField(max_length=20, blank=True, default="")
    provisional = models.BooleanField(default=True)
    pushed = models.BooleanField(default=False)
    # A pushed scan's team (its endpoint's), copied so that the proof workers pick the next
    # team and its oldest queued report from one partial index of queued pushed scans
    # (scan_proof_waiting; scans/running/pushes.py). The endpoint's foreign key is the integrity: the
    # scan goes with its endpoint, so this copy needs no constraint of its own.
    proof_team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.DO_NOTHING,
                                   db_constraint=False, db_index=False, related_name="+")
    # SHA-256 of a pushed report as uploaded: a retried upload finds its scan instead of
    # storing the report twice.
    report_digest = models.CharField(max_length=64, blank=True, default="")
    tool_version = models.CharField(max_length=40, blank=True, default="")
    # denormalized from report["capacity"] for the trend, the dashboard, the gauge
    # and the alert: concurrency None with outcome none_met when no level met the SLO
    capacity_outcome = models.CharField(max_length=20, choices=CapacityOutcome.choices,
                                        blank=True, default="")
    capacity_concurrency = models.PositiveIntegerField(null=True, blank=True)
    capacity_requests_per_s = models.FloatField(null=True, blank=True)
    capacity_output_tokens_per_s = models.FloatField(null=True, blank=True)
    capacity_output_unit = models.CharField(max_length=12, blank=True, default="")
    # When the full report was replaced by its summary, REPORT_RETENTION_DAYS after the scan
    # finished (scans/history/retention.py): per-request samples gone; grade, points, checks and each
    # level's figures kept, in the same JSON shape. None while the full report is kept.
    report_pruned_at = models.DateTimeField(null=True, blank=True)
    # Read out of the report once, as it is stored (worker.report_columns), so that lists,
    # charts and states never read a report (up to REPORT_MAX_BYTES each):
    # the URL the scan reached (report.target.base_url): another URL is another server
    target_url = models.CharField(max_length=500, blank=True, default="")
    # the load it ran: {pf_<name>: text} for each of scans.endpoints.profile.PLAN_PATHS, the text
    # PostgreSQL's ->> gives (the rollups' `plan`); None when the scan stored no report
    load_plan = models.JSONField(null=True, blank=True)
    # why it was down or degraded (scans/history/state.py): report.preflight and failure_summary
    preflight_stopped = models.BooleanField(default=False)
    preflight_cause = models.TextField(blank=True, default="")
    failure_summary = models.TextField(blank=True, default="")
    preflight_warnings = models.JSONField(null=True, blank=True)
    # the headline figures of its first level (one request at a time; None where not measured)
    ttft_p50_ms = models.FloatField(null=True, blank=True)
    ttft_p95_ms = models.FloatField(null=True, blank=True)
    tokens_per_s = models.FloatField(null=True, blank=True)  # the generation rate's median
    tokens_basis = models.CharField(max_length=12, blank=True, default="")  # tokens or chunks
    first_answer_p50_ms = models.FloatField(null=True, blank=True)  # reasoning models
    thinking_p50_ms = models.FloatField(null=True, blank=True)
    # the ids of the caps its score applied (report.score.caps_applied); re-grading rewrites it
    caps_applied = models.JSONField(null=True, blank=True)
    # report.capacity whole (the search's reason, levels tried and SLO), None without a search
    capacity_found = models.JSONField(null=True, blank=True)
    # What the server said of itself (report.server without where each fact came from), and
    # in one line ("vLLM 0.11.0 · Qwen3-8B · ctx 32,768"); None and "" when the report has none
    server_identity = models.JSONField(null=True, blank=True)
    server_label = models.CharField(max_length=300, blank=True, default="")
    # The agent-shaped figures of each level ({concurrency, turns, tool_calls,
    # structured_output} as report.json has them); None when the scan sent no such load
    agent_figures = models.JSONField(null=True, blank=True)
    # and at its top level, the shares of tool calls and of JSON replies that were valid
    # (the charts' figures; None where not sent)
    tool_calls_valid_share = models.FloatField(null=True, blank=True)
    json_valid_share = models.FloatField(null=True, blank=True)
    # Which set of these columns the row holds (REPORT_COLUMNS_VERSION in worker.py); 0: none,
    # a scan stored by a release before them, which `manage.py fill_scan_columns` fills.
    report_columns_version = models.PositiveSmallIntegerField(default=0)

    team_lookup = "endpoint__team"

    class Meta(TeamOwned.Meta):
        ordering = ["-queued_at"]
        indexes = [
            # the pruning pass reads only the scans still holding a full report, oldest first:
            # about REPORT_RETENTION_DAYS of rows, however long the table (scans/history/retention.py)
            models.Index(fields=["finished_at"], name="scan_report_kept",
                         condition=Q(report_pruned_at__isnull=True, report__isnull=False)),
            # the rollup pass finds the hours touched since its last pass by finish time (a
            # late scan lands in an old hour of queued_at; scans/history/rollups.py)
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
            models.UniqueConstraint(fields=["endpoint", "location", "slot", "partition_month"],
                                    name="one_scan_per_slot_and_location",
                                    condition=Q(slot__isnull=False)),
            # a retried upload racing across a month's start is caught by pushes.receive's
            # lock, which this index cannot see across partitions
            models.UniqueConstraint(fields=["endpoint", "report_digest", "partition_month"],
                                    name="one_scan_per_pushed_report",
                                    condition=~Q(report_digest="")),
            models.UniqueConstraint(fields=["public_id", "partition_month"],
                                    name="one_scan_per_public_id"),
        ]

    def __str__(self) -> str:
        return f"scan {self.public_id} of {self.endpoint_id} ({self.status})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding:
            # Its month's partition may not be made yet (a slot from long ago, a beat that
            # stood still): one catalog read when it is.
            ensure_scan_month(self.partition_month)
        super().save(*args, **kwargs)

    @property
    def has_letter(self) -> bool:
        return self.grade in GRADES

class CheckResult(TeamOwned):
    """One check of one finished scan: a check's history is one indexed query."""

    # No single-column FK indexes: one_result_per_check (scan, …) and check_history
    # (endpoint, …) already lead with these columns, and this table holds tens of millions.
    scan = models.ForeignKey(Scan, on_delete=models.CASCADE, related_name="check_results",
                             db_index=False, db_constraint=False)
    # its scan's: a scan and its checks are dropped with one month
    partition_month = models.DateField()
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="+",
                                 db_index=False)
    check_id = models.CharField(max_length=60)
    value = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=25)
    counted = models.BooleanField()
    measured_at = models.DateTimeField()
    scoring_version = models.CharField(max_length=20)
    # why it was not measured or not counted (the report's reason), for the charts' hover text
    reason = models.TextField(blank=True, default="")

    team_lookup = "endpoint__team"

    class Meta(TeamOwned.Meta):
        indexes = [
            models.Index(fields=["endpoint", "check_id", "measured_at"], name="check_history"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["scan", "check_id", "partition_month"],
                                    name="one_result_per_check"),
        ]

    def __str__(self) -> str:
        return f"{self.check_id}={self.value} ({self.status})"
