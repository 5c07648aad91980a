"""Which host runs which job (documented in docs/routing.md).

Assignment is the coordinator's (push). An assignment pass takes queued jobs first-in
first-out by `created_at` (then id), whoever submitted them, and gives each one to the
best-ranked eligible host:

- eligible: online (heartbeat within 45 s, not suspended, not revoked), advertises the job's
  catalog id, has a free slot (`slots` minus its leased and running jobs), and has not held
  this job before (an expired job goes to a different host);
- ranked by `score()` (higher is better), then by least recently assigned (never assigned
  first), then by host id: a total order, so the same facts always give the same host.

`score()` sees only the host's own facts and the job's catalog id: never the buyer's team,
account, User-Agent or IP. Nothing in this module receives them.

A pass runs in a Celery worker (`tasks.assign_queued_jobs`), queued by a submission, by a
completion or by a host with no assigned job asking for work while jobs are queued, and every
few seconds from Celery beat (never inside a heartbeat or a request). One pass assigns many
jobs to many hosts. Passes do not overlap: on PostgreSQL a pass takes a transaction-level
advisory lock; the worker's pass waits for one in flight, a pass that must not wait returns.
The queued rows are read with SELECT … FOR UPDATE SKIP LOCKED and each assignment is a
conditional UPDATE (status still queued), so no job is ever given to two hosts.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Count, F, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from benchmarks import policy
from benchmarks.models import ACTIVE, Host, JobStatus, TrustLevel
from benchmarks.network import wakeup
from benchmarks.network.system_wide import ALL_HOSTS, ALL_JOBS

# --- the one scoring formula -----------------------------------------------------------------

WEIGHTS = {
    "reputation": 0.35,
    "ttft": 0.25,
    "tps": 0.20,
    "trust": 0.10,
    "connect": 0.05,
    "idle": 0.05,
}
TTFT_HALF_MS = 1000.0  # a TTFT EWMA of 1 s scores 0.5 on the TTFT term
TPS_HALF = 50.0  # a TPS EWMA of 50 tokens/s scores 0.5 on the TPS term
NO_SAMPLE = 0.5  # a host with no EWMA yet is scored as if it sat at the half-way marks
IDLE_FULL_S = 300.0  # the idle term reaches 1 after five minutes without an assignment
TRUST_POINTS: dict[str, float] = {
    TrustLevel.NONE: 0.0,
    TrustLevel.SOFTWARE: 0.5,
    TrustLevel.EDR: 1.0,
    TrustLevel.HARDWARE: 1.0,  # reserved; never granted today
}
SCORE_DECIMALS = 9  # scores are compared rounded, so float noise never decides a tie


@dataclass(frozen=True)
class HostFacts:
    """What routing may know about a host. Nothing about any buyer is in here."""

    host_id: int
    models: frozenset[str]
    reputation: float
    ttft_ewma_ms: float | None
    tps_ewma: float | None
    trust_level: str
    connect_ready: bool
    last_assigned_at: datetime | None
    idle_s: float | None  # seconds since the last assignment at the time of the pass; None: never

    @classmethod
    def of(cls, host: Host, now: datetime) -> HostFacts:
        last = host.last_assigned_at
        return cls(
            host_id=host.pk,
            models=frozenset(host.advertised or ()),
            reputation=host.reputation,
            ttft_ewma_ms=host.ttft_ewma_ms,
            tps_ewma=host.tps_ewma,
            trust_level=host.trust_level,
            connect_ready=host.connect_ready,
            last_assigned_at=last,
            idle_s=None if last is None else max(0.0, (now - last).total_seconds()),
        )


def score(host: HostFacts, model_id: str) -> float | None:
    """The host's score for a job of this catalog id, in [0, 1]; None if it does not serve it.

        score = 0.35·R + 0.25·T + 0.20·P + 0.10·K + 0.05·C + 0.05·I

    R reputation (0–1); T = 1000 / (1000 + TTFT EWMA ms); P = TPS EWMA / (TPS EWMA + 50);
    T and P are 0.5 while the host has no EWMA; K trust (none 0, software 0.5, edr 1);
    C 1 when the operator's payout account is ready; I = min(idle s, 300) / 300, 1 if never
    assigned.
    """
    if model_id not in host.models:
        return None
    t = NO_SAMPLE if host.ttft_ewma_ms is None else TTFT_HALF_MS / (TTFT_HALF_MS + host.ttft_ewma_ms)
    p = NO_SAMPLE if host.tps_ewma is None else host.tps_ewma / (host.tps_ewma + TPS_HALF)
    k = TRUST_POINTS.get(host.trust_level, 0.0)
    c = 1.0 if host.connect_ready else 0.0
    i = 1.0 if host.idle_s is None else min(host.idle_s, IDLE_FULL_S) / IDLE_FULL_S
    r = min(1.0, max(0.0, host.reputation))
    return (
        WEIGHTS["reputation"] * r + WEIGHTS["ttft"] * t + WEIGHTS["tps"] * p
        + WEIGHTS["trust"] * k + WEIGHTS["connect"] * c + WEIGHTS["idle"] * i
    )


def rank_key(host: HostFacts, model_id: str) -> tuple:
    """Sort key, smallest first: best score, then least recently assigned, then host id."""
    value = score(host, model_id)
    if value is None:
        raise ValueError(f"host {host.host_id} does not serve {model_id}")
    never = host.last_assigned_at is None
    last = 0.0 if host.last_assigned_at is None else host.last_assigned_at.timestamp()
    return (-round(value, SCORE_DECIMALS), 0 if never else 1, last, host.host_id)


def rank(hosts: list[HostFacts], model_id: str) -> list[HostFacts]:
    """The hosts that serve this model, best first."""
    return sorted((h for h in hosts if model_id in h.models), key=lambda h: rank_key(h, model_id))


# --- the assignment pass ---------------------------------------------------------------------

_PASS_LOCK_KEY = 0x746B76_7061_7373  # "tkv" "pass": one advisory lock id for the whole site


def _take_pass_lock(wait: bool) -> bool:
    """The site-wide pass lock: waited for (`wait`, in a worker), or False at once when
    another pass holds it."""
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_PASS_LOCK_KEY])
            return True
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_PASS_LOCK_KEY])
        return bool(cursor.fetchone()[0])


def assignment_pass(now: datetime | None = None, wait: bool = False) -> int:
    """Assign queued jobs to hosts (at most NETWORK_PASS_BATCH). Returns how many.

    At most one pass is in flight across the site. With `wait` (the Celery task, which the web
    tier queues) a pass that finds another one running waits for it, then takes what that one
    left, so a job queued while a pass was reading the queue is never left for the tick;
    without it the pass returns 0 at once. The hosts that got work are woken after the commit
    (benchmarks/network/wakeup.py). Lease expiry and the queue deadline are enforced by the caller
    first (jobs.housekeeping).
    """
    now = now or timezone.now()
    if not ALL_JOBS.filter(status=JobStatus.QUEUED).exists():
        return 0
    with transaction.atomic():
        if not _take_pass_lock(wait):
            return 0  # another pass is running; it (or the next one) takes these jobs
        assigned = _assign(now)
        if assigned:
            transaction.on_commit(lambda: wakeup.announce(assigned), robust=True)
        return sum(assigned.values())


def assign_queued(now: datetime | None = None) -> int:
    """Passes until the queue holds nothing a free host could take (each pass takes at most
    NETWORK_PASS_BATCH jobs). Returns how many jobs were assigned."""
    total = 0
    while True:
        count = assignment_pass(now, wait=True)
        total += count
        if count < policy.value("NETWORK_PASS_BATCH"):
            return total
        now = None


def _assign(now: datetime) -> dict[int, int]:
    """One pass: {host id: jobs given to it}."""
    queued_jobs = ALL_JOBS.filter(status=JobStatus.QUEUED)
    model_ids = set(queued_jobs.order_by().values_list("model_id", flat=True).distinct())
    if not model_ids:
        return {}
    # Hosts first: when every host is busy (a saturated network) the pass ends here, before it
    # reads or locks a single queued row. Only hosts with a free slot, counted in SQL, read as
    # tuples (no model instances: a pass may look at thousands of hosts).
    active = (
        ALL_JOBS.filter(host=OuterRef("pk"), status__in=ACTIVE)
        .order_by().values("host").annotate(n=Count("id")).values("n")
    )
    rows = (
        ALL_HOSTS.online(now)
        .filter(catalog_models__in=model_ids)
        .annotate(active=Coalesce(Subquery(active), 0))
        .filter(slots__gt=F("active"))
        .order_by()
        .distinct()
        .values_list("id", "advertised", "slots", "active", "reputation", "ttft_ewma_ms", "tps_ewma",
                     "trust_level", "connect_ready", "last_assigned_at")
    )
    free: dict[int, int] = {}
    facts: dict[int, HostFacts] = {}
    for (host_id, advertised, slots, busy, reputation, ttft, tps, trust, connect, last) in rows:
        free[host_id] = slots - busy
        facts[host_id] = HostFacts(
            host_id=host_id, models=frozenset(advertised or ()), reputation=reputation,
            ttft_ewma_ms=ttft, tps_ewma=tps, trust_level=trust, connect_ready=connect,
            last_assigned_at=last,
            idle_s=None if last is None else max(0.0, (now - last).total_seconds()),
        )
    servable = model_ids & {m for f in facts.values() for m in f.models}
    if not servable:
        return {}
    # First in, first out among the jobs some free host could take (the others could not be
    # assigned in this pass anyway, so skipping them changes no job's turn).
    queued = list(
        queued_jobs.filter(model_id__in=servable)
        .order_by("created_at", "id")
        .select_for_update(skip_locked=True)
        .only("id", "model_id", "created_at", "attempts", "tried_hosts")[: policy.value("NETWORK_PASS_BATCH")]
    )
    model_ids = servable

    # One heap per model. Assigning a job only ever lowers a host's rank (its idle term drops
    # to 0), so a stale heap entry is re-ranked when it surfaces (lazy re-insertion).
    heaps: dict[str, list] = {}
    for model_id in model_ids:
        heap = [(rank_key(f, model_id), f.host_id) for f in facts.values() if model_id in f.models]
        heapq.heapify(heap)
        heaps[model_id] = heap

    assigned_hosts: dict[int, int] = {}
    lease_until = now + timedelta(seconds=policy.value("NETWORK_LEASE_TIMEOUT_S"))
    for job in queued:
        heap = heaps[job.model_id]
        tried = set(job.tried_hosts or ())
        passed_over = []
        chosen = None
        while heap:
            key, host_id = heapq.heappop(heap)
            if free.get(host_id, 0) <= 0:
                continue  # full: drop it from this model's heap
            current = rank_key(facts[host_id], job.model_id)
            if current != key:
                heapq.heappush(heap, (current, host_id))
                continue
            if host_id in tried:
                passed_over.append((key, host_id))
                continue
            chosen = host_id
            break
        for entry in passed_over:
            heapq.heappush(heap, entry)
        if chosen is None:
            continue  # stays queued; later jobs (other models, other hosts) still go
        won = ALL_JOBS.filter(pk=job.pk, status=JobStatus.QUEUED).update(
            status=JobStatus.LEASED, host_id=chosen, leased_at=now, delivered_at=None,
            lease_expires_at=lease_until, attempts=job.attempts + 1,
            tried_hosts=[*job.tried_hosts, chosen],
        )
        if not won:
            continue
        free[chosen] -= 1
        facts[chosen] = replace(facts[chosen], last_assigned_at=now, idle_s=0.0)
        assigned_hosts[chosen] = assigned_hosts.get(chosen, 0) + 1
        if free[chosen] > 0:
            heapq.heappush(heap, (rank_key(facts[chosen], job.model_id), chosen))
    if assigned_hosts:
        ALL_HOSTS.filter(pk__in=sorted(assigned_hosts)).update(last_assigned_at=now)
    return assigned_hosts
