"""What a scan worker does with a scan: claim it (and its origin's lock), run it through the
grader behind the outbound guard while its liveness is written, store its report (or its
failure), and reap the scans whose worker died.

Every state change is a conditional UPDATE whose row count says who won, so a task delivered
twice or two workers racing run exactly one scan. Dispatch: scans/running/dispatch.py; the plan an
endpoint gives and the site's limits: scans/endpoints/profile.py.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.models import Q
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from accounts import encryption
from common.system_passes import one_row
from scans import outbound
from scans.endpoints.profile import PLAN_PATHS, plan_for, worst_case_duration
from scans.grader import (
    PlanError,
    ScanProgress,
    ScanStopped,
    StreamBudget,
    is_down,
    parse_prompts_text,
    redact_report,
    redact_text,
    report_from_measurement,
    run_scan,
    server_text,
)
from scans.models import (
    CapacityOutcome,
    CheckResult,
    Endpoint,
    OriginLock,
    Scan,
    ScanStatus,
    ScanTrigger,
)
from scans.notify import alerts
from scans.origins import acquire_origin, origin_of, release_origin
from scans.running import live_progress as live
from scans.running.dispatch import QUEUED_GRACE, hand_off
from scans.system_wide import ALL_ENDPOINTS, ALL_PUSHED_BODIES, ALL_SCANS

log = logging.getLogger(__name__)


# Extra time a running scan gets beyond its worst case before it is presumed dead.
RUNNING_GRACE = timedelta(minutes=5)


def keep_waiting(scan_id: int) -> bool:
    """A queued scan is alive but its origin is busy: it stays a row (not a message held by a
    worker), the beat sends it again after SCAN_ORIGIN_BUSY_RETRY_S, and its start-by deadline
    moves on. False if it is no longer queued."""
    now = timezone.now()
    # Worker step: a scan id from our own queue; no team is known here.
    return bool(ALL_SCANS.filter(pk=scan_id, status=ScanStatus.QUEUED).update(
        deadline_at=now + QUEUED_GRACE,
        redispatch_at=now + timedelta(seconds=settings.SCAN_ORIGIN_BUSY_RETRY_S),
    ))


class _OriginBusy(Exception):
    pass


def claim(scan_id: int, now: datetime | None = None, *, location: str | None = None) -> Scan | None:
    """Move a queued scan to running and take its origin's lock, in one transaction (so a lock
    always belongs to a running scan). None if the scan is not queued (a duplicate delivery),
    belongs to another location than `location`, or its origin is busy (it stays queued)."""
    now = now or timezone.now()
    # Worker step: the scan's id came from our own queue; no team is known here.
    scan = ALL_SCANS.select_related("endpoint").filter(pk=scan_id).first()
    if scan is None:
        return None
    deadline = now + worst_case_duration(scan.endpoint) + RUNNING_GRACE
    mine = Q(pk=scan_id, status=ScanStatus.QUEUED)
    if location is not None:
        mine &= Q(location=location)  # a worker never runs another location's scan
    try:
        with transaction.atomic():
            won = Scan.objects.for_team(scan.endpoint.team_id).filter(mine).update(
                status=ScanStatus.RUNNING, started_at=now, deadline_at=deadline, heartbeat_at=now
            )
            if not won:
                return None
            if not acquire_origin(origin_of(scan.endpoint.base_url), scan_id, deadline - now):
                raise _OriginBusy
    except _OriginBusy:
        return None
    scan.refresh_from_db()
    return scan


def run_queued(scan_id: int, location: str | None = None) -> str:
    """What a worker does with a scan's message: claim it and run it. A scan whose origin is
    busy is left queued for the beat to send again; nothing waits inside the worker, so a
    killed worker loses only the scans it was running.

    `location` is the location whose queue delivered the message: a scan of another location
    is refused (it stays queued; the beat sends it to its own queue)."""
    if location is not None:
        # Worker step, no team known: only the scan's location is read.
        belongs = ALL_SCANS.filter(pk=scan_id).values_list("location", flat=True).first()
        if belongs is not None and belongs != location:
            log.warning("scan %s belongs to location %r; a worker of %r does not run it",
                        scan_id, belongs, location)
            return "another location's scan"
    claimed = claim(scan_id, location=location)
    if claimed is not None:
        return execute(claimed)
    if keep_waiting(scan_id):
        return "waiting for its origin"
    return "not queued"


@contextmanager
def liveness(scan_id: int, team_id: int, *, public_id=None, progress: ScanProgress | None = None,
             stop: threading.Event | None = None):
    """The scan's liveness: touch the running scan's row (of team `team_id`) every
    SCAN_HEARTBEAT_S from a thread
    (with its own database connection), so the reaper can tell a live scan from one whose worker
    died.

    With `public_id`, the same thread publishes `progress` every PUBLISH_EVERY_S for the scan
    page and watches for a cancel (scans/running/live_progress.py): a cancel flag, or a heartbeat that finds
    the row no longer running (cancelled, or reaped), sets `stop`."""
    done = threading.Event()
    tick = min(live.PUBLISH_EVERY_S, settings.SCAN_HEARTBEAT_S) if public_id else \
        settings.SCAN_HEARTBEAT_S

    def watch() -> None:
        if progress is not None:
            live.publish(public_id, progress.snapshot())
        if stop is not None and live.cancel_asked(public_id):
            stop.set()

    def beat():
        next_beat = time.monotonic() + settings.SCAN_HEARTBEAT_S
        try:
            if public_id is not None:
                watch()  # the page shows "checking the endpoint" at once, not after a tick
            while not done.wait(tick):
                if public_id is not None:
                    watch()
                if time.monotonic() < next_beat:
                    continue
                next_beat = time.monotonic() + settings.SCAN_HEARTBEAT_S
                try:
                    still_running = Scan.objects.for_team(team_id).filter(
                        pk=scan_id, status=ScanStatus.RUNNING).update(heartbeat_at=timezone.now())
                    if not still_running and stop is not None:
                        stop.set()  # cancelled (the cache missed it) or reaped: no use going on
                except DatabaseError as exc:  # the database is away; try again next beat
                    log.warning("scan %s: liveness not written: %s", scan_id, type(exc).__name__)
                    connection.close()
        finally:
            connection.close()

    thread = threading.Thread(target=beat, name=f"scan-{scan_id}-liveness", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=30)
        if public_id is not None:
            live.clear(public_id)


def endpoint_secrets(endpoint: Endpoint) -> list[str]:
    """The endpoint's stored secrets, decrypted in memory (to cut them out of what a scan
    stores); an unreadable one is skipped."""
    secrets = []
    for field in ("api_key_encrypted",):
        try:
            secret = encryption.decrypt(getattr(endpoint, field))
        except encryption.UnreadableSecret:
            continue
        if secret:
            secrets.append(secret)
    return secrets


def fail(scan_id: int, reason: str) -> bool:
    """Mark an unfinished scan errored (our side failed). False if it had already finished."""
    # Worker and reaper step: a scan id only; its endpoint names the team for what follows.
    endpoint = ALL_ENDPOINTS.filter(scans__pk=scan_id).first()
    if endpoint is None:
        return False
    reason = redact_text(reason, endpoint_secrets(endpoint))
    scans = Scan.objects.for_team(endpoint.team_id)
    won = scans.filter(
        pk=scan_id, status__in=[ScanStatus.QUEUED, ScanStatus.RUNNING]
    ).update(status=ScanStatus.ERRORED, error_reason=reason[:2000], finished_at=timezone.now())
    if won:
        alerts.after_scan(scans.get(pk=scan_id))
    return bool(won)


@dataclass(frozen=True)
class ScoreFields:
    grade: str
    points: object
    uncapped_grade: str
    scoring_version: str
    provisional: bool
    down: bool = False
    caps_applied: list[str] | None = None  # the ids of the caps the score applied


def score_fields(report: dict) -> ScoreFields:
    """The score as stored on the Scan row. A down scan (is_down) keeps no letter and no points
    there: down is a state, not a grade on the site; report.json keeps its F."""
    score = report["score"]
    down = is_down(report)
    return ScoreFields(
        grade="" if down else score["grade"],
        points=None if down else score.get("points"),
        uncapped_grade="" if down else score.get("uncapped_grade") or "",
        scoring_version=score["scoring_version"],
        provisional=bool(score["provisional"]),
        down=down,
        caps_applied=[str(cap.get("id", "")) for cap in score.get("caps_applied") or []
                      if isinstance(cap, dict)],
    )


def capacity_fields(report: dict) -> dict:
    """report.json's capacity as the Scan row's columns; nothing when the scan did
    not search. A pushed report's capacity is stored too (its page says it was pushed)."""
    found = report.get("capacity")
    if not isinstance(found, dict):
        return {}
    concurrency = found.get("concurrency")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        concurrency = None
    outcome = (CapacityOutcome.NONE_MET if concurrency is None else
               CapacityOutcome.MET_AT_HIGHEST if found.get("bound_reached") else
               CapacityOutcome.MET)
    unit = found.get("output_unit")
    return {"capacity_outcome": outcome, "capacity_concurrency": concurrency,
            "capacity_requests_per_s": _figure(found.get("requests_per_s")),
            "capacity_output_tokens_per_s": _figure(found.get("output_tokens_per_s")),
            "capacity_output_unit": unit[:12] if isinstance(unit, str) else ""}


def _figure(value) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


#: The set of report columns a worker of this release writes (Scan.report_columns_version);
#: `manage.py fill_scan_columns` brings older rows up to it.
REPORT_COLUMNS_VERSION = 2


def report_columns(report: dict) -> dict:
    """What lists, charts and states read of a report, as the Scan row's columns (written once,
    as it is stored, so that none of them reads a report): the URL it reached, the load it ran,
    why it was down, the headline figures of its first level and its capacity section. The
    load's values are the text PostgreSQL's ->> gives, as the rollups and the migration that
    filled older scans read them (charts merge the two)."""
    preflight = report.get("preflight")
    preflight = preflight if isinstance(preflight, dict) else {}
    warnings = preflight.get("warnings")
    levels = report.get("levels")
    first = levels[0] if isinstance(levels, list) and levels and isinstance(levels[0], dict) else {}
    basis = _at(first, ("generation_rate", "basis"))
    capacity = report.get("capacity")
    return {
        "ttft_p50_ms": _figure(_at(first, ("ttft_ms", "p50"))),
        "ttft_p95_ms": _figure(_at(first, ("ttft_ms", "p95"))),
        "tokens_per_s": _figure(_at(first, ("generation_rate", "median"))),
        "tokens_basis": basis[:12] if isinstance(basis, str) else "",
        "first_answer_p50_ms": _figure(_at(first, ("time_to_first_answer_ms", "p50"))),
        "thinking_p50_ms": _figure(_at(first, ("thinking_ms", "p50"))),
        "capacity_found": capacity if isinstance(capacity, dict) else None,
        **agent_columns(levels),
        **server_columns(report.get("server")),
        "report_columns_version": REPORT_COLUMNS_VERSION,
        "load_plan": {f"pf_{name}": _json_text(_at(report.get("plan"), path))
                      for name, path in PLAN_PATHS.items()},
        "target_url": (_json_text(_at(report.get("target"), ("base_url",))) or "")[:500],
        "preflight_stopped": _json_text(preflight.get("stopped")) == "true",
        "preflight_cause": _json_text(preflight.get("cause")) or "",
        "failure_summary": _json_text(_at(report.get("failure_summary"), ("sentence",))) or "",
        "preflight_warnings": warnings,
    }


#: A level's agent-shaped figures (report.json; scans.grader's agent load).
AGENT_FIGURES = ("turns", "tool_calls", "structured_output")


def agent_columns(levels: Any) -> dict:
    """Each level's agent-shaped figures, and the top level's valid shares, as the Scan row's
    columns; all None for a scan that sent no such load."""
    shaped = [{"concurrency": level.get("concurrency"),
               **{name: level[name] for name in AGENT_FIGURES if level.get(name) is not None}}
              for level in (levels if isinstance(levels, list) else [])
              if isinstance(level, dict) and any(level.get(name) for name in AGENT_FIGURES)]
    top = levels[-1] if shaped and isinstance(levels[-1], dict) else {}
    return {"agent_figures": shaped or None,
            "tool_calls_valid_share": _figure(_at(top, ("tool_calls", "valid_share"))),
            "json_valid_share": _figure(_at(top, ("structured_output", "valid_share")))}


#: The facts of report.server a scan row keeps (not which URL said each, nor what was asked).
SERVER_FACTS = ("engine", "engine_version", "model", "hardware")


def server_columns(server: Any) -> dict:
    """report.server as the Scan row's columns; a report without one (older grader) says
    nothing of its server."""
    if not isinstance(server, dict):
        return {"server_identity": None, "server_label": ""}
    return {"server_identity": {fact: server.get(fact) for fact in SERVER_FACTS},
            "server_label": server_text(server)[:300]}


def _at(value: Any, path: tuple[str, ...]) -> Any:
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value


def _json_text(value: Any) -> str | None:
    """A JSON value as PostgreSQL's ->> writes it: a string as itself, null as None, anything
    else as its JSON text (jsonb's spacing: "[1, 4, 16]")."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(_in_jsonb_order(value), ensure_ascii=False)


def _in_jsonb_order(value: Any) -> Any:
    """Objects' keys in the order jsonb keeps them (shorter first, then by their bytes), so
    that a dict's text is the same whether this module or PostgreSQL wrote it."""
    if isinstance(value, dict):
        return {key: _in_jsonb_order(value[key])
                for key in sorted(value, key=lambda k: (len(k.encode()), k.encode()))}
    if isinstance(value, list):
        return [_in_jsonb_order(item) for item in value]
    return value


def store_report(scan: Scan, report: dict, *, pushed: bool = False) -> Scan:
    """Record a finished scan's report, its denormalized score and one row per check."""
    report = redact_report(report, endpoint_secrets(scan.endpoint))  # echoed keys stay out
    fields = score_fields(report)
    finished = timezone.now()
    team = scan.endpoint.team_id
    # Its month names the partition that holds the row (by id alone, each one is searched).
    this_scan = Scan.objects.for_team(team).filter(partition_month=scan.partition_month)
    with transaction.atomic():
        updated = this_scan.filter(
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
            down=fields.down,
            caps_applied=fields.caps_applied,
            pushed=pushed,
            **({"location": "pushed"} if pushed else {}),  # measured inside the team's network
            tool_version=str(report.get("tool_version", ""))[:40],
            **capacity_fields(report),
            **report_columns(report),
        )
        if not updated:
            scan.refresh_from_db()
            return scan  # the reaper got there first; keep its verdict
        CheckResult.objects.for_team(team).bulk_create(
            CheckResult(
                scan_id=scan.pk,
                partition_month=scan.partition_month,
                endpoint_id=scan.endpoint_id,
                check_id=check["id"],
                value=_numeric(check.get("value")),
                status=check["status"],
                counted=bool(check["counted"]),
                measured_at=finished,
                scoring_version=fields.scoring_version,
                reason=check_reason(check),
            )
            for check in report["checks"]
        )
    # The report just written is not read back (it was most of the read): it is deferred, loaded
    # only if the caller asks. The endpoint is not either, so its cached row stays.
    scan.refresh_from_db(from_queryset=this_scan, fields=_READ_BACK)
    vars(scan).pop("report", None)
    alerts.after_scan(scan)
    return scan


_READ_BACK = [field.attname for field in Scan._meta.concrete_fields
              if field.name not in ("report", "endpoint")]


def check_reason(check: dict) -> str:
    """Why a check was not measured or not counted, as the report says it ("" when it was)."""
    reason = check.get("reason")
    return reason if isinstance(reason, str) else ""


def _numeric(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    return float(value)


def reap(now: datetime | None = None) -> int:
    """Error out scans whose worker died (silent heartbeat, or past the deadline) or that never
    started, and free every origin lock not held by a running scan."""
    now = now or timezone.now()
    # System-wide reaper: every team's unfinished scans.
    running = ALL_SCANS.filter(status=ScanStatus.RUNNING)
    silent_for = settings.SCAN_STALE_AFTER_S
    silent = list(running.filter(heartbeat_at__lt=now - timedelta(seconds=silent_for))
                  .values_list("pk", flat=True))
    overdue = list(running.filter(deadline_at__lt=now).exclude(pk__in=silent)
                   .values_list("pk", flat=True))
    # A queued scan's deadline is when it must have started; a scan waiting for its busy
    # origin has it pushed back on every retry (keep_waiting), so only lost ones pass it.
    lost = list(
        ALL_SCANS.filter(status=ScanStatus.QUEUED)  # system-wide, as above
        .filter(Q(deadline_at__lt=now) | Q(deadline_at__isnull=True, queued_at__lt=now - QUEUED_GRACE))
        .values_list("pk", flat=True)
    )
    pushed = set(ALL_SCANS.filter(pk__in=lost, trigger=ScanTrigger.PUSH).values_list("pk", flat=True))
    reasons = [(scan_id, f"the worker stopped heartbeating (no sign of life for over "
                         f"{silent_for} s): it died, or lost the database") for scan_id in silent]
    reasons += [(scan_id, "the worker stopped before the scan finished (it ran past its "
                          "deadline: every request timing out in turn, plus 5 minutes)")
                for scan_id in overdue]
    reasons += [(scan_id, "no proof worker took the pushed report in time; push it again"
                 if scan_id in pushed else "no worker picked the scan up within 30 minutes")
                for scan_id in lost]
    count = 0
    for scan_id, reason in reasons:
        # A scan that cannot be failed (its team's alerts cannot be worked out) is logged and
        # reaped again at the next pass; the other teams' scans are reaped all the same.
        with one_row(log, f"scan {scan_id}"):
            count += fail(scan_id, reason)
    # A pushed report's bytes are kept only while its proof is pending (a reaped one included).
    ALL_PUSHED_BODIES.exclude(scan__status__in=[ScanStatus.QUEUED, ScanStatus.RUNNING]).delete()
    # A dead scan's lock (or one its worker could not delete) would block its origin until it
    # expires. Locks are taken in the same transaction that starts their scan (claim()).
    OriginLock.objects.exclude(scan_id__in=running.values("pk")).delete()
    return count


def prompt_sample(endpoint: Endpoint):
    """The team's prompt sample, decrypted in memory; it only feeds repeat_prompt_share."""
    text = encryption.decrypt(endpoint.prompt_sample_encrypted)
    return parse_prompts_text(text, source="the endpoint's prompt sample") if text else None


def execute(scan: Scan) -> str:
    """Run a claimed scan with the grader, through the site's outbound guard, store it and
    free its origin; the scan heartbeats all along.

    An unreachable target is the endpoint's result (succeeded, graded F); an address the guard
    refuses, or our own failure, is an errored scan with the reason."""
    origin = origin_of(scan.endpoint.base_url)
    try:
        progress = ScanProgress()
        stop = threading.Event()
        with liveness(scan.pk, scan.endpoint.team_id, public_id=scan.public_id,
                      progress=progress, stop=stop):
            return _measure_and_store(scan, progress, stop)
    finally:
        try:
            release_origin(origin, scan.pk)
            hand_off(scan.origin or origin, scan.location)
        except DatabaseError:  # the reaper frees a lock whose scan is not running
            log.warning("scan %s: origin lock left for the reaper (database unreachable)", scan.pk)
        except BrokerUnreachable:  # the beat sends the waiting scan at its next pass
            log.warning("scan %s: next scan of %s left for the beat (broker unreachable)",
                        scan.pk, origin)


def _measure_and_store(scan: Scan, progress: ScanProgress | None = None,
                       stop: threading.Event | None = None) -> str:

    endpoint = scan.endpoint
    try:
        plan = plan_for(endpoint).validate()
        if progress is not None:
            progress.expect(plan)  # "level 2 of 3", and how long the whole scan has left
        outbound.check_url(plan.base_url)
        # Many scans share this worker process (one per pool thread, each on its own event
        # loop), so the process-wide GC tuning is done once at worker start
        # (tokvera_site.celery), not per scan, and their levels share one stream budget. Each
        # scan's own loop-lag monitor still sees a neighbour's CPU and GIL use, and marks the
        # level client-bound.
        measurement = run_scan(plan, progress, connect_guard=outbound.guard, tune_gc=False,
                               stream_budget=stream_budget(),
                               rate_progress=progress.rate if progress else None, stop=stop)
        refused = outbound.refusal_in(measurement)
        if refused:
            return _errored(scan, refused)
        report = report_from_measurement(plan, measurement, prompt_sample(endpoint))
    except ScanStopped:
        return _stopped(scan)
    except (PlanError, outbound.OutboundRefused, encryption.UnreadableSecret) as exc:
        return _errored(scan, str(exc))
    except Exception as exc:
        log.exception("scan %s failed on our side", scan.pk)
        return _errored(scan, f"internal error while scanning: {type(exc).__name__}")
    try:
        # The finished report stays in this worker until the database takes it.
        return _when_database_returns(lambda: store_report(scan, report).status)
    except DatabaseUnreachable:
        reason = (f"the database was unreachable for {settings.SCAN_STORE_RETRY_S} s after the "
                  "scan finished, so its report could not be stored")
        try:
            fail(scan.pk, reason)
        except DatabaseError:  # still away: the reaper errors the silent scan later
            log.error("scan %s: %s; not even its error could be written", scan.pk, reason)
        raise


_budgets: dict[int, StreamBudget] = {}


_budgets_lock = threading.Lock()


def stream_budget() -> StreamBudget:
    """The stream budget every scan of this process shares (SCAN_STREAMS_PER_WORKER)."""
    streams = settings.SCAN_STREAMS_PER_WORKER
    with _budgets_lock:  # one per size: a test that changes the setting gets its own
        if streams not in _budgets:
            # Half the grace a running scan gets past its worst case: waiting for the budget
            # can make a scan later, never overdue (reaped) or past its origin lock.
            _budgets[streams] = StreamBudget(streams, scan_wait_s=RUNNING_GRACE.total_seconds() / 2)
        return _budgets[streams]


def _stopped(scan: Scan) -> str:
    """The scan was stopped because its row stopped being running (a cancel, or the reaper):
    the row already holds the verdict; nothing measured is kept."""
    status = _when_database_returns(
        lambda: ALL_SCANS.filter(pk=scan.pk).values_list("status", flat=True).first())
    log.info("scan %s stopped: %s", scan.pk, status)
    return str(status or "deleted")


def _errored(scan: Scan, reason: str) -> str:
    _when_database_returns(lambda: fail(scan.pk, reason))
    return "errored"


class DatabaseUnreachable(Exception):
    pass


def _when_database_returns(write):
    """Run a database write; while the database is unreachable, retry with backoff (1 s
    doubling to 30 s) for up to SCAN_STORE_RETRY_S, then raise DatabaseUnreachable. Only
    connection failures are retried: the writes here are conditional, so one that did commit
    before its connection dropped changes nothing the second time."""
    give_up_at = time.monotonic() + settings.SCAN_STORE_RETRY_S
    pause = 1.0
    while True:
        try:
            return write()
        except (OperationalError, InterfaceError) as exc:
            if time.monotonic() + pause > give_up_at:
                raise DatabaseUnreachable(str(exc)) from exc
            log.warning("the database is unreachable (%s); retrying in %.0f s",
                        type(exc).__name__, pause)
            connection.close()
            time.sleep(pause)
            pause = min(pause * 2, 30.0)
