"""The inference network: the catalog of models, the hosts that serve them and the jobs they run.

- `CatalogModel` is global (not team-owned): the ids hosts advertise and buyers submit.
- `Host` belongs to the team that operates it. Its token is stored as a prefix plus an HMAC
  (accounts.credentials, kind "tkh"). `hardware` trust is reserved: a check constraint refuses it.
- `Job` belongs to the submitting team. Its request and result bodies are private to that team
  and to the host it is leased to.
- `AuditEntry` records every change an admin (or an operator command) makes to hosts and the
  catalog: who, what, when.

Hosts and jobs derive from accounts.tenancy.TeamOwned (`objects` is fail-closed); the
coordinator's own code (routing, leases, folding) reads them through benchmarks/network/system_wide.py,
because it acts for the network, not for a team.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import ClassVar

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from accounts.models import Team
from accounts.tenancy import TeamOwned, TeamScopedManager, TeamScopedQuerySet
from benchmarks import policy

# A catalog id: letters, digits, dots, hyphens and underscores, starting and ending with a letter
# or digit. Dots are allowed because model names carry versions (qwen2.5-0.5b-q8).
CATALOG_ID_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$"
validate_catalog_id = RegexValidator(
    CATALOG_ID_PATTERN,
    "A catalog id has letters, digits, dots, hyphens and underscores, and starts and ends "
    "with a letter or digit (e.g. qwen2.5-0.5b-q8).")


class CatalogModel(models.Model):
    """A model the network serves, at one quantization and context length."""

    id = models.CharField(primary_key=True, max_length=64, validators=[validate_catalog_id],
                          help_text="e.g. qwen2.5-0.5b-q8")
    display_name = models.CharField(max_length=100)
    quant = models.CharField(max_length=32, help_text="e.g. Q4_K_M")
    context_len = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    active = models.BooleanField(default=True, help_text="Inactive models refuse new jobs.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        verbose_name = "catalog model"

    def __str__(self) -> str:
        return self.id


class TrustLevel(models.TextChoices):
    NONE = "none", "None"
    SOFTWARE = "software", "Software"
    EDR = "edr", "EDR"
    HARDWARE = "hardware", "Hardware (reserved)"


# `hardware` is reserved: no code path may grant it (docs/security/trust-levels.md).
GRANTABLE_TRUST = (TrustLevel.NONE, TrustLevel.SOFTWARE, TrustLevel.EDR)


class HostQuerySet(TeamScopedQuerySet["Host"]):
    def online(self, now: datetime | None = None) -> HostQuerySet:
        """Hosts with a heartbeat in the last 45 s that are neither suspended nor revoked."""
        return self.filter(Host.online_q(now))

    def online_for(self, model_id: str, now: datetime | None = None) -> HostQuerySet:
        """Online hosts that also advertise this catalog id."""
        return self.online(now).filter(catalog_models=model_id)


# A from_queryset() class as a base is beyond django-stubs (it types Manager.from_queryset only).
class HostManager(TeamScopedManager.from_queryset(HostQuerySet)):  # type: ignore[misc]
    pass


HostUnscopedManager = models.Manager.from_queryset(HostQuerySet)  # what HostQuerySet.as_manager() builds


class Host(TeamOwned):
    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="hosts",
                             help_text="The team that operates this host.")
    name = models.CharField(max_length=100)
    # The prefix finds the row; the HMAC proves the token. Both are cleared on revocation.
    token_prefix = models.CharField(max_length=16, unique=True, null=True, blank=True, editable=False)
    token_hmac = models.CharField(max_length=64, blank=True, editable=False)
    token_issued_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    trust_level = models.CharField(max_length=10, choices=TrustLevel.choices, default=TrustLevel.NONE)
    suspended = models.BooleanField(default=False)
    connect_ready = models.BooleanField(
        default=False, help_text="The operator's payout account is ready (set by admins)."
    )

    # What the host last told us (heartbeat).
    last_heartbeat_at = models.DateTimeField(null=True, blank=True, editable=False)
    slots = models.PositiveSmallIntegerField(default=1, editable=False)
    advertised = models.JSONField(default=list, blank=True, editable=False,
                                  help_text="Catalog ids, sorted, as last advertised.")
    # The same ids as rows, so "online for a model" is a join. Rewritten only when they change.
    catalog_models = models.ManyToManyField(CatalogModel, related_name="hosts", blank=True,
                                            editable=False)
    gpu_model = models.CharField(max_length=100, blank=True, editable=False)
    vram_mb = models.PositiveIntegerField(null=True, blank=True, editable=False)
    cpu_model = models.CharField(max_length=100, blank=True, editable=False)
    ram_mb = models.PositiveIntegerField(null=True, blank=True, editable=False)

    # What the coordinator learned from the host's jobs (benchmarks/network/ewma.py).
    reputation = models.FloatField(default=0.5, editable=False)
    ttft_ewma_ms = models.FloatField(null=True, blank=True, editable=False)
    tps_ewma = models.FloatField(null=True, blank=True, editable=False)
    last_assigned_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    # TeamOwned's managers, with "online" added (still fail-closed through `objects`).
    objects: ClassVar[HostManager] = HostManager()
    dangerously_unscoped: ClassVar[HostUnscopedManager[Host]] = HostUnscopedManager()

    class Meta(TeamOwned.Meta):
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(trust_level__in=[t.value for t in GRANTABLE_TRUST]),
                name="host_trust_never_hardware",
                violation_error_message="Hardware trust is reserved and cannot be granted.",
            ),
            models.CheckConstraint(condition=Q(slots__gte=1), name="host_slots_positive"),
        ]
        # No index on last_heartbeat_at : every heartbeat rewrites it, and an indexed
        # column makes each of those UPDATEs write every index of the table; unindexed (and
        # with the table's fillfactor at 70, migration 0007) they are HOT updates that write
        # none. The online set is found through the catalog ids (the pass, a submission's
        # check) or by a scan of the table (the snapshot, every few minutes).

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def _online_span(now: datetime) -> tuple[datetime, datetime]:
        """Heartbeats stamped in [now - online window, now + slack] count. The server stamps
        them; the slack only covers web servers' clock differences and a heartbeat recorded while
        a snapshot was being read. A stamp further ahead is a broken clock and never counts."""
        window = timedelta(seconds=policy.value("NETWORK_ONLINE_WINDOW_S"))
        slack = timedelta(seconds=policy.value("NETWORK_HEARTBEAT_FUTURE_SLACK_S"))
        return now - window, now + slack

    @staticmethod
    def online_q(now: datetime | None = None) -> Q:
        oldest, newest = Host._online_span(now or timezone.now())
        return Q(suspended=False, revoked_at__isnull=True,
                 last_heartbeat_at__gte=oldest, last_heartbeat_at__lte=newest)

    def is_online(self, now: datetime | None = None) -> bool:
        oldest, newest = Host._online_span(now or timezone.now())
        return (
            not self.suspended
            and self.revoked_at is None
            and self.last_heartbeat_at is not None
            and oldest <= self.last_heartbeat_at <= newest
        )


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    LEASED = "leased", "Leased"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"


SETTLED = (JobStatus.COMPLETED, JobStatus.FAILED)
ACTIVE = (JobStatus.LEASED, JobStatus.RUNNING)  # holding one of a host's slots


class Job(TeamOwned):
    """One inference request. Timestamps are named per step (GuideLLM-style); every figure on
    the public page derives from them. Only completed and failed jobs are settled."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="jobs")
    model = models.ForeignKey(CatalogModel, on_delete=models.PROTECT, related_name="jobs")
    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.QUEUED)
    host = models.ForeignKey(Host, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="jobs")
    max_tokens = models.PositiveIntegerField()
    request_json = models.JSONField()  # private: the submitting team and the leasing host
    result_json = models.JSONField(null=True, blank=True)  # private, as above

    created_at = models.DateTimeField(default=timezone.now)
    queued_at = models.DateTimeField(default=timezone.now)  # last time it entered the queue
    leased_at = models.DateTimeField(null=True, blank=True)  # assigned to `host`
    delivered_at = models.DateTimeField(null=True, blank=True)  # handed out by /v1/hosts/lease
    lease_expires_at = models.DateTimeField(null=True, blank=True)  # start, then complete, by then
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)  # became completed or failed
    folded_at = models.DateTimeField(null=True, blank=True)  # its samples reached the host EWMAs

    ttft_ms = models.FloatField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    elapsed_ms = models.FloatField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    tried_hosts = models.JSONField(default=list, blank=True)  # host ids that held it before
    failure_reason = models.CharField(max_length=200, blank=True)
    # The job its completion handed the host with lease_next: a repeated completion (its
    # answer lost) gets that job again instead of another. An id, not a key: it is usually
    # another team's job, and nothing joins on it.
    next_job_id = models.UUIDField(null=True, blank=True)

    class Meta(TeamOwned.Meta):
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=JobStatus.values), name="job_status_valid"
            ),
            # Settled means completed or failed, and nothing else carries a settled_at.
            models.CheckConstraint(
                condition=(Q(status__in=SETTLED) & Q(settled_at__isnull=False))
                | (~Q(status__in=SETTLED) & Q(settled_at__isnull=True)),
                name="job_settled_iff_completed_or_failed",
            ),
            models.CheckConstraint(
                condition=~Q(status__in=ACTIVE) | Q(host__isnull=False), name="job_active_has_host"
            ),
        ]
        indexes = [
            # The assignment pass reads the queue first-in first-out.
            models.Index(fields=["created_at", "id"], condition=Q(status="queued"),
                         name="job_queue_fifo_idx"),
            # Slot counting and lease delivery look at one host's active jobs.
            models.Index(fields=["host", "leased_at"], condition=Q(status__in=["leased", "running"]),
                         name="job_host_active_idx"),
            # Lease expiry scans the active jobs by deadline.
            models.Index(fields=["lease_expires_at"], condition=Q(status__in=["leased", "running"]),
                         name="job_lease_expiry_idx"),
            # The fold task and the sweep look for settled jobs not yet folded, per host.
            models.Index(fields=["host", "settled_at"],
                         condition=Q(settled_at__isnull=False, folded_at__isnull=True),
                         name="job_unfolded_idx"),
            # The per-team cap on unsettled jobs counts one team's jobs not yet settled.
            models.Index(fields=["team"], condition=Q(settled_at__isnull=True),
                         name="job_team_unsettled_idx"),
            # Success rate and latency windows per model (the public figures) use
            # job_public_windows_idx (migration 0002): the same key and condition, covering.
        ]

    def __str__(self) -> str:
        return f"job {self.id} ({self.status})"

    @property
    def is_settled(self) -> bool:
        return self.status in SETTLED


class AuditEntry(models.Model):
    """One change made by an admin or an operator command to a host or a catalog model."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="+")
    actor_label = models.CharField(max_length=150, help_text="Who, as it read at the time.")
    target_type = models.CharField(max_length=20)  # "host" or "catalog model"
    target_id = models.CharField(max_length=64)
    target_label = models.CharField(max_length=150)
    action = models.CharField(max_length=40)
    changes = models.JSONField(default=dict, blank=True)  # field -> [old, new]

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action} {self.target_label}"
