"""Rollups: hours and UTC days of an endpoint's scans and check results, which long chart
ranges read instead of the scans (scans/history/rollups.py writes them)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from accounts.tenancy import TeamOwned
from scans.models.endpoints import Endpoint


class RollupPeriod(models.TextChoices):
    HOUR = "hour", "hour"
    DAY = "day", "day"


class ScanRollup(TeamOwned):
    """One hour or one UTC day of an endpoint's succeeded scans (by queued_at), per location,
    scoring version, load (`plan`: the pf_* texts of scans/endpoints/profile.py PLAN_PATHS) and URL: the
    groups a chart never merges. Sums and counts, never means, so buckets add up exactly;
    long chart ranges read these instead of the scans (scans/history/grades.py and its siblings)."""

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
    # headline figures of the first level (scans.history.headlines.HEADLINE_FIGURES): sum and count
    ttft_p50_sum = models.FloatField(null=True)
    ttft_p50_n = models.PositiveIntegerField()
    ttft_p95_sum = models.FloatField(null=True)
    ttft_p95_n = models.PositiveIntegerField()
    tokens_per_s_sum = models.FloatField(null=True)
    tokens_per_s_n = models.PositiveIntegerField()
    # and of the top level, the agent-shaped load's valid shares (None and 0 where not sent)
    tool_calls_valid_sum = models.FloatField(null=True)
    tool_calls_valid_n = models.PositiveIntegerField(default=0)
    json_valid_sum = models.FloatField(null=True)
    json_valid_n = models.PositiveIntegerField(default=0)

    team_lookup = "endpoint__team"

    class Meta(TeamOwned.Meta):
        constraints = [
            # the upsert's conflict target; its leading columns serve the charts' range reads
            models.UniqueConstraint(
                fields=["endpoint", "period", "bucket_start", "location", "scoring_version",
                        "plan", "target_url"], name="one_scan_rollup_per_group"),
        ]
        indexes = [
            # retention deletes the hours past HOURLY_ROLLUP_RETENTION_DAYS, oldest first
            models.Index(fields=["bucket_start"], name="scan_rollup_hour_age",
                         condition=Q(period="hour")),
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
        indexes = [
            models.Index(fields=["bucket_start"], name="check_rollup_hour_age",
                         condition=Q(period="hour")),
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
