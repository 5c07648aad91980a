"""Liveness probes between graded scans: each probe's result (kept for PROBE_RETENTION_DAYS),
its hour (kept as long as rollups), and each endpoint's standing per location, which the
confirmation and the quorum read (scans/liveness/)."""

from __future__ import annotations

from django.db import models

from accounts.tenancy import TeamOwned
from scans.models.endpoints import Endpoint


class ProbeResult(TeamOwned):
    """One probe from one location: the preflight alone (GET /models and one short streamed
    request). Compact on purpose: a site probes every endpoint every minute.

    The table is partitioned by UTC day of `at` (migration 0033, scans/liveness/partitions.py)
    so that retention drops whole days. In the database its primary key is (id, at), as a
    partitioned table's keys must hold the partition key; `id` alone is unique all the same
    (one sequence), and is the primary key Django knows."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="+",
                                 db_index=False)
    location = models.CharField(max_length=40)
    at = models.DateTimeField()
    ok = models.BooleanField()
    # False: the result says nothing about the endpoint (the guard refused its address, or the
    # probe failed on our side); it is kept and shown, but no streak counts it.
    counted = models.BooleanField(default=True)
    status_code = models.PositiveSmallIntegerField(null=True)
    ttft_ms = models.FloatField(null=True)
    kind = models.CharField(max_length=24, blank=True, default="")
    cause = models.CharField(max_length=300, blank=True, default="")

    team_lookup = "endpoint__team"

    class Meta(TeamOwned.Meta):
        indexes = [
            # the probe series of an endpoint page and the API, newest first
            models.Index(fields=["endpoint", "-at"], name="probe_history"),
        ]

    def __str__(self) -> str:
        return f"probe of {self.endpoint_id} from {self.location} at {self.at:%H:%M:%S}"


class ProbeHour(TeamOwned):
    """One hour of an endpoint's probes from one location: counts and TTFT sums, never means,
    so hours add up exactly; written with each batch of probes (an upsert that adds)."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="+",
                                 db_index=False)
    location = models.CharField(max_length=40)
    hour = models.DateTimeField()
    probes = models.PositiveIntegerField()
    failed = models.PositiveIntegerField()
    # seconds the counted probes stood for (each its endpoint's probe interval then)
    covered_s = models.FloatField()
    down_s = models.FloatField()  # of which failed probes stood for
    ttft_sum = models.FloatField()
    ttft_n = models.PositiveIntegerField()
    ttft_min = models.FloatField(null=True)
    ttft_max = models.FloatField(null=True)

    team_lookup = "endpoint__team"

    class Meta(TeamOwned.Meta):
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "hour", "location"],
                                    name="one_probe_hour_per_location"),
        ]

    def __str__(self) -> str:
        return f"probes of {self.endpoint_id} from {self.location} in {self.hour:%Y-%m-%d %H}h"


class LivenessState(TeamOwned):
    """An endpoint's standing from one location: its latest counted probe and how many in a
    row agreed. `down` is the confirmed verdict of that location (confirm_after failures in a
    row; back up after confirm_after successes), which the quorum reads."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE,
                                 related_name="liveness_states", db_index=False)
    location = models.CharField(max_length=40)
    failures = models.PositiveIntegerField(default=0)  # counted failed probes in a row
    successes = models.PositiveIntegerField(default=0)  # counted good probes in a row
    down = models.BooleanField(default=False)
    since = models.DateTimeField(null=True)  # when the current verdict's first probe ran
    streak_since = models.DateTimeField(null=True)  # the first probe of the current run
    last_at = models.DateTimeField(null=True)
    last_ok = models.BooleanField(null=True)
    last_ttft_ms = models.FloatField(null=True)
    # the latest failed probe's cause (kept after it: a location confirmed down names why)
    last_cause = models.CharField(max_length=300, blank=True, default="")

    team_lookup = "endpoint__team"

    class Meta(TeamOwned.Meta):
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "location"],
                                    name="one_liveness_state_per_location"),
        ]

    def __str__(self) -> str:
        return f"{self.endpoint_id} from {self.location}: {'down' if self.down else 'up'}"
