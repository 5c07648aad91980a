"""Scan services: turning an endpoint into a plan, scheduling, claiming, storing and reaping.

Every state change of a scan is a conditional UPDATE whose row count says who won, so a beat
that fires twice, a task delivered twice or two workers racing make exactly one scan.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from scans import encryption
from scans.models import (
    CheckResult,
    Endpoint,
    EndpointMode,
    OriginLock,
    Scan,
    ScanStatus,
    ScanTrigger,
)

log = logging.getLogger(__name__)

# How long a queued scan may wait for a worker before the reaper calls it lost.
QUEUED_GRACE = timedelta(minutes=30)
# Extra time a running scan gets beyond its worst case before it is presumed dead.
RUNNING_GRACE = timedelta(minutes=5)
# Manual "scan now" at most this often per endpoint.
MANUAL_SCAN_COOLDOWN = timedelta(minutes=2)


class ScanRateLimited(Exception):
    def __init__(self, retry_after: timedelta):
        self.retry_after = retry_after
        super().__init__(f"a scan was started recently; try again in {int(retry_after.total_seconds())} s")


def next_slot(after: datetime, interval_minutes: int) -> datetime:
    """The next schedule slot: `after` plus the interval, truncated to the minute."""
    return (after + timedelta(minutes=interval_minutes)).replace(second=0, microsecond=0)


# --- scheduling ------------------------------------------------------------------------------


def due_endpoints(now: datetime):
    return Endpoint.dangerously_unscoped.filter(
        enabled=True, mode=EndpointMode.SCHEDULED, next_scan_at__lte=now
    ).only("pk", "next_scan_at", "interval_minutes")


def enqueue_due(now: datetime | None = None) -> list[int]:
    """Create one queued scan per due endpoint slot and return their ids (to send to workers).

    Safe to run twice at once: advancing next_scan_at is conditional on its old value, and the
    (endpoint, slot) unique constraint refuses a second scan for the same slot."""
    now = now or timezone.now()
    created = []
    for endpoint in due_endpoints(now).iterator(chunk_size=500):
        slot = endpoint.next_scan_at
        following = next_slot(max(slot, now), endpoint.interval_minutes)
        won = Endpoint.dangerously_unscoped.filter(pk=endpoint.pk, next_scan_at=slot).update(
            next_scan_at=following
        )
        if not won:
            continue  # another beat advanced it first
        try:
            with transaction.atomic():
                scan = Scan.dangerously_unscoped.create(
                    endpoint_id=endpoint.pk, trigger=ScanTrigger.SCHEDULE, slot=slot,
                    deadline_at=now + QUEUED_GRACE,
                )
        except IntegrityError:
            continue  # this slot was scanned already; the schedule still moved on
        created.append(scan.pk)
    return created


def request_scan(endpoint: Endpoint, trigger: str, now: datetime | None = None) -> Scan:
    """A manual or API scan, at most one per MANUAL_SCAN_COOLDOWN per endpoint."""
    now = now or timezone.now()
    cutoff = now - MANUAL_SCAN_COOLDOWN
    with transaction.atomic():
        won = Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).filter(
            _no_manual_scan_since(cutoff)
        ).update(last_manual_scan_at=now)
        if not won:
            endpoint.refresh_from_db(fields=["last_manual_scan_at"])
            raise ScanRateLimited(endpoint.last_manual_scan_at + MANUAL_SCAN_COOLDOWN - now)
        return Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=trigger,
                                                deadline_at=now + QUEUED_GRACE)


def _no_manual_scan_since(cutoff: datetime):
    return Q(last_manual_scan_at__isnull=True) | Q(last_manual_scan_at__lte=cutoff)


# --- running ---------------------------------------------------------------------------------


def worst_case_duration(endpoint: Endpoint) -> timedelta:
    """An upper bound on how long the scan may run: every request of every level timing out
    one after another, at that level's concurrency."""
    from scans.engine.plan import default_requests

    seconds = 60.0  # probes (metrics, GPU) and bookkeeping
    for level in endpoint.levels or [1]:
        count = endpoint.requests_per_level or default_requests(level)
        waves = -(-count // level)
        seconds += waves * endpoint.timeout_s
    return timedelta(seconds=seconds)


def origin_of(base_url: str) -> str:
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def acquire_origin(origin: str, scan_id: int, hold: timedelta) -> bool:
    """Take the origin's lock for this scan; False while any live scan holds it (including
    this scan itself: a second delivery must not run it twice)."""
    now = timezone.now()
    try:
        with transaction.atomic():
            OriginLock.objects.create(origin=origin, scan_id=scan_id, expires_at=now + hold)
        return True
    except IntegrityError:
        # Held already; take it over only once its holder's time is up.
        taken = OriginLock.objects.filter(origin=origin, expires_at__lt=now).update(
            scan_id=scan_id, expires_at=now + hold
        )
        return bool(taken)


def release_origin(origin: str, scan_id: int) -> None:
    OriginLock.objects.filter(origin=origin, scan_id=scan_id).delete()


# What the site will run for a team: our workers must not become anyone's load generator.
SITE_MAX_LEVEL = 256
SITE_MAX_LEVELS = 8
SITE_MAX_REQUESTS_PER_SCAN = 2000
SITE_MAX_TIMEOUT_S = 300.0
SITE_MAX_TOKENS = 4096
SITE_MAX_SCAN_DURATION = timedelta(hours=2)


def validate_profile(endpoint: Endpoint) -> None:
    """Raise PlanError (one line) when the endpoint's scan profile cannot run here: the
    engine's own rules, then the site's limits. Forms and the API both call this."""
    from scans.engine.plan import PlanError, default_requests

    plan_for(endpoint).validate()
    levels = endpoint.levels or [1]
    if len(levels) > SITE_MAX_LEVELS:
        raise PlanError(f"at most {SITE_MAX_LEVELS} concurrency levels")
    if max(levels) > SITE_MAX_LEVEL:
        raise PlanError(f"a concurrency level can be at most {SITE_MAX_LEVEL} here")
    total = sum(endpoint.requests_per_level or default_requests(level) for level in levels)
    if total > SITE_MAX_REQUESTS_PER_SCAN:
        raise PlanError(f"{total} requests per scan; at most {SITE_MAX_REQUESTS_PER_SCAN} here")
    if endpoint.timeout_s > SITE_MAX_TIMEOUT_S:
        raise PlanError(f"the timeout can be at most {SITE_MAX_TIMEOUT_S:g} s here")
    if endpoint.max_tokens > SITE_MAX_TOKENS:
        raise PlanError(f"max tokens can be at most {SITE_MAX_TOKENS} here")
    worst = worst_case_duration(endpoint)
    if worst > SITE_MAX_SCAN_DURATION:
        hours = worst.total_seconds() / 3600
        raise PlanError(f"if every request timed out this scan would run {hours:.1f} h; "
                        f"lower the timeout or the requests (at most 2 h)")


def keep_waiting(scan_id: int) -> None:
    """A queued scan is alive but its origin is busy: move its start-by deadline on."""
    Scan.dangerously_unscoped.filter(pk=scan_id, status=ScanStatus.QUEUED).update(
        deadline_at=timezone.now() + QUEUED_GRACE
    )


def claim(scan_id: int, now: datetime | None = None) -> Scan | None:
    """Move a queued scan to running; None if someone else already did (duplicate delivery)."""
    now = now or timezone.now()
    scan = Scan.dangerously_unscoped.select_related("endpoint").filter(pk=scan_id).first()
    if scan is None:
        return None
    deadline = now + worst_case_duration(scan.endpoint) + RUNNING_GRACE
    won = Scan.dangerously_unscoped.filter(pk=scan_id, status=ScanStatus.QUEUED).update(
        status=ScanStatus.RUNNING, started_at=now, deadline_at=deadline
    )
    if not won:
        return None
    scan.refresh_from_db()
    return scan


def fail(scan_id: int, reason: str) -> bool:
    """Mark an unfinished scan errored (our side failed). False if it had already finished."""
    from scans.redaction import endpoint_secrets, redact_text

    endpoint = Endpoint.dangerously_unscoped.filter(scans__pk=scan_id).first()
    reason = redact_text(reason, endpoint_secrets(endpoint) if endpoint else ())
    won = Scan.dangerously_unscoped.filter(
        pk=scan_id, status__in=[ScanStatus.QUEUED, ScanStatus.RUNNING]
    ).update(status=ScanStatus.ERRORED, error_reason=reason[:2000], finished_at=timezone.now())
    if won:
        from scans import alerts

        alerts.after_scan(Scan.dangerously_unscoped.get(pk=scan_id))
    return bool(won)


@dataclass(frozen=True)
class ScoreFields:
    grade: str
    points: object
    uncapped_grade: str
    scoring_version: str
    provisional: bool


def score_fields(report: dict) -> ScoreFields:
    score = report["score"]
    return ScoreFields(
        grade=score["grade"],
        points=score.get("points"),
        uncapped_grade=score.get("uncapped_grade") or "",
        scoring_version=score["scoring_version"],
        provisional=bool(score["provisional"]),
    )


def store_report(scan: Scan, report: dict, *, pushed: bool = False) -> Scan:
    """Record a finished scan's report, its denormalized score and one row per check."""
    from scans.redaction import endpoint_secrets, redact_report

    report = redact_report(report, endpoint_secrets(scan.endpoint))  # echoed keys stay out
    fields = score_fields(report)
    finished = timezone.now()
    with transaction.atomic():
        updated = Scan.dangerously_unscoped.filter(
            pk=scan.pk, status__in=[ScanStatus.QUEUED, ScanStatus.RUNNING]
        ).update(
            status=ScanStatus.SUCCEEDED,
            finished_at=finished,
            report=report,
            grade=fields.grade,
            points=fields.points,
            uncapped_grade=fields.uncapped_grade,
            scoring_version=fields.scoring_version,
            provisional=fields.provisional,
            pushed=pushed,
            tool_version=str(report.get("tool_version", ""))[:40],
        )
        if not updated:
            scan.refresh_from_db()
            return scan  # the reaper got there first; keep its verdict
        CheckResult.dangerously_unscoped.bulk_create(
            CheckResult(
                scan_id=scan.pk,
                endpoint_id=scan.endpoint_id,
                check_id=check["id"],
                value=_numeric(check.get("value")),
                status=check["status"],
                counted=bool(check["counted"]),
                measured_at=finished,
                scoring_version=fields.scoring_version,
            )
            for check in report["checks"]
        )
    scan.refresh_from_db()
    from scans import alerts

    alerts.after_scan(scan)
    return scan


def _numeric(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    return float(value)


def reap(now: datetime | None = None) -> int:
    """Error out scans whose worker died (running past the deadline) or that never started."""
    now = now or timezone.now()
    dead = list(
        Scan.dangerously_unscoped.filter(status=ScanStatus.RUNNING, deadline_at__lt=now)
        .values_list("pk", flat=True)
    )
    # A queued scan's deadline is when it must have started; a scan waiting for its busy
    # origin has it pushed back on every retry (keep_waiting), so only lost ones pass it.
    lost = list(
        Scan.dangerously_unscoped.filter(status=ScanStatus.QUEUED)
        .filter(Q(deadline_at__lt=now) | Q(deadline_at__isnull=True, queued_at__lt=now - QUEUED_GRACE))
        .values_list("pk", flat=True)
    )
    count = 0
    for scan_id in dead:
        count += fail(scan_id, "the worker stopped before the scan finished (reaped after its deadline)")
    # A dead scan's origin lock would otherwise block the origin until it expires.
    OriginLock.objects.filter(scan_id__in=dead).delete()
    for scan_id in lost:
        count += fail(scan_id, "no worker picked the scan up within 30 minutes")
    return count


def prompt_sample(endpoint: Endpoint):
    """The team's prompt sample, decrypted in memory; it only feeds repeat_prompt_share."""
    from scans.engine.prompts import parse_prompts_text

    text = encryption.decrypt(endpoint.prompt_sample_encrypted)
    return parse_prompts_text(text, source="the endpoint's prompt sample") if text else None


def execute(scan: Scan) -> str:
    """Run a claimed scan with the engine, through the site's outbound guard, and store it.

    An unreachable target is the endpoint's result (succeeded, graded F); an address the guard
    refuses, or our own failure, is an errored scan with the reason."""
    from scans import outbound
    from scans.engine import PlanError, run_scan
    from scans.report import report_from_measurement

    endpoint = scan.endpoint
    try:
        plan = plan_for(endpoint).validate()
        outbound.check_url(plan.base_url)
        measurement = run_scan(plan, connect_guard=outbound.guard)
        refused = outbound.refusal_in(measurement)
        if refused:
            fail(scan.pk, refused)
            return "errored"
        report = report_from_measurement(plan, measurement, prompt_sample(endpoint))
    except (PlanError, outbound.OutboundRefused, encryption.UnreadableSecret) as exc:
        fail(scan.pk, str(exc))
        return "errored"
    except Exception as exc:
        log.exception("scan %s failed on our side", scan.pk)
        fail(scan.pk, f"internal error while scanning: {type(exc).__name__}")
        return "errored"
    store_report(scan, report)
    return "succeeded"


def plan_for(endpoint: Endpoint):
    """The engine's plan for an endpoint (the API key decrypted in memory only)."""
    from scans.engine.plan import DEFAULT_LEVELS, ScanPlan

    return ScanPlan(
        base_url=endpoint.base_url,
        model=endpoint.model,
        levels=tuple(endpoint.levels or DEFAULT_LEVELS),
        requests=endpoint.requests_per_level,
        max_tokens=endpoint.max_tokens,
        timeout_s=endpoint.timeout_s,
        api_key=encryption.decrypt(endpoint.api_key_encrypted) or None,
        use_nvidia_smi=False,  # the site's workers never sample their own GPUs
        price_input_per_mtok=endpoint.price_input_per_mtok,
        price_output_per_mtok=endpoint.price_output_per_mtok,
    )

