"""Scan dispatch: which scans exist and which worker queue they are sent to.

The beat creates one queued scan per due schedule slot and location (enqueue_due) and sends
queued scans whose origin is free (redispatch_due); a worker that frees an origin hands it to
the next scan waiting for it (hand_off); a person or a token starts one now (scan_now). Every
step is a conditional UPDATE or a unique row, so a beat that fires twice makes one scan.
What happens to a scan once a worker has it: scans/running/worker.py.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from celery import current_app as celery_app  # the site's app (tokvera_site/celery.py)
from django.db import IntegrityError, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from common import time_partitions
from common.system_passes import one_row
from scans import maintenance
from scans.endpoints import scheduling
from scans.models import Endpoint, EndpointMode, OriginLock, Scan, ScanStatus, ScanTrigger
from scans.origins import origin_of
from scans.running import live_progress as progress
from scans.system_wide import ALL_ENDPOINTS, ALL_SCANS

log = logging.getLogger(__name__)

RUN_SCAN_TASK = "scans.tasks.run_scan"  # the task a queued scan is sent to (scans/tasks.py)


# How long a queued scan may wait for a worker before the reaper calls it lost.
QUEUED_GRACE = timedelta(minutes=30)


# Manual "scan now" at most this often per endpoint.
MANUAL_SCAN_COOLDOWN = timedelta(minutes=2)


# A queued scan already sent to a worker is sent again after this long if no worker has taken
# it (its message was lost with a killed worker, or the broker refused it); a duplicate
# delivery of a claimed scan does nothing.
REDISPATCH_AFTER = timedelta(minutes=5)


# What a scan-now answers when the broker is unreachable: try again after this many seconds.
BROKER_RETRY_AFTER_S = 30


class ScanRateLimited(Exception):
    def __init__(self, retry_after: timedelta):
        self.retry_after = retry_after
        super().__init__(f"a scan was started less than {int(MANUAL_SCAN_COOLDOWN.total_seconds() // 60)} "
                         f"minutes ago; try again in {self.retry_after_s} s")

    @property
    def retry_after_s(self) -> int:
        return max(1, int(self.retry_after.total_seconds()))


class NotScannable(Exception):
    """The site does not start scans of this endpoint (it is pushed)."""


class ScanNotQueued(Exception):
    """The task queue could not take the scan: nothing was saved and no cooldown was spent."""

    retry_after_s = BROKER_RETRY_AFTER_S


def due_endpoints(now: datetime):
    # System-wide beat task: every team's due endpoints (no team is known here).
    return ALL_ENDPOINTS.filter(
        enabled=True, mode=EndpointMode.SCHEDULED, next_scan_at__lte=now
    ).only("pk", "team", "next_scan_at", "interval_minutes", "locations", "base_url")


def enqueue_due(now: datetime | None = None) -> list[int]:
    """Create one queued scan per due endpoint slot and location and return their ids (to send
    to workers).

    Safe to run twice at once: advancing next_scan_at is conditional on its old value, and the
    (endpoint, location, slot) unique constraint refuses a second scan for the same slot."""
    now = now or timezone.now()
    created: list[int] = []
    for endpoint in due_endpoints(now).iterator(chunk_size=500):
        # One endpoint that fails (a row of its team that cannot be read) is logged and left
        # due; the other teams' endpoints are queued all the same.
        with one_row(log, f"endpoint {endpoint.pk} of team {endpoint.team_id}"):
            created += _enqueue_slot(endpoint, now)
    return created


def _enqueue_slot(endpoint: Endpoint, now: datetime) -> list[int]:
    slot = endpoint.next_scan_at
    if slot is None:
        return []  # not due (due_endpoints reads only endpoints with a slot)
    following = scheduling.next_slot(max(slot, now), endpoint.interval_minutes)
    # The conditional UPDATE says which beat won this slot.
    won = Endpoint.objects.for_team(endpoint.team_id).filter(
        pk=endpoint.pk, next_scan_at=slot).update(next_scan_at=following)
    if not won:
        return []  # another beat advanced it first
    if maintenance.scans_paused(endpoint, now):
        return []  # a maintenance window pauses its scans: this slot is skipped
    created = []
    month = time_partitions.month_start(slot)  # one scan per slot: the slot fixes its month
    for location in scheduling.locations_of(endpoint):
        if _still_waiting_or_running(endpoint, location):
            # Its last scan has not ended: the slot is stretched to the next one rather than
            # queue a scan behind it (scans of one endpoint would pile up and measure each
            # other's queue). The form refuses an interval shorter than its scans take.
            log.info("endpoint %s: slot %s at %s skipped, its previous scan has not ended",
                     endpoint.pk, slot, location)
            continue
        try:
            with transaction.atomic():
                # The scan belongs to the endpoint's team.
                scan = Scan.objects.for_team(endpoint.team_id).create(
                    endpoint_id=endpoint.pk, trigger=ScanTrigger.SCHEDULE, slot=slot,
                    partition_month=month, location=location,
                    origin=origin_of(endpoint.base_url),
                    # due to be sent at once (redispatch_due: one per free origin)
                    deadline_at=now + QUEUED_GRACE, redispatch_at=now,
                )
        except IntegrityError:
            continue  # this slot was scanned already; the schedule still moved on
        created.append(scan.pk)
    return created


def _still_waiting_or_running(endpoint: Endpoint, location: str) -> bool:
    return Scan.objects.for_team(endpoint.team_id).filter(
        endpoint_id=endpoint.pk, location=location, trigger=ScanTrigger.SCHEDULE,
        status__in=(ScanStatus.QUEUED, ScanStatus.RUNNING)).exists()


def redispatch_due(now: datetime | None = None) -> list[int]:
    """Queued scans the beat must send (again): those whose origin was busy and whose wait is
    over, and those a worker never took (see REDISPATCH_AFTER). Sending one twice is harmless.

    Only the longest-waiting scan of each free origin (and location) is sent, and none for an
    origin with a scan on its way already: the others would find it busy again. Scans of an
    origin that is busy now are alive, not lost: their start-by deadline moves on, and the
    worker that frees the origin hands it to the next one (hand_off)."""
    now = now or timezone.now()
    busy = OriginLock.objects.filter(expires_at__gt=now).values("origin")
    # System-wide beat task: every team's waiting scans.
    queued = ALL_SCANS.filter(status=ScanStatus.QUEUED)
    queued.filter(origin__in=busy).update(deadline_at=now + QUEUED_GRACE)
    # A scan sent and not yet taken (or told to wait) is on its way for that origin already.
    sent = queued.filter(redispatch_at__gt=now).exclude(origin="").values("origin")
    candidates = (queued.filter(redispatch_at__lte=now).exclude(origin__in=busy)
                  .exclude(origin__in=sent)
                  .order_by("queued_at").values_list("pk", "origin", "location")[:5000])
    firsts: dict[tuple[str, str], int] = {}
    for pk, origin, location in candidates:
        key = (origin, location) if origin else ("", str(pk))  # a scan from before origins
        firsts.setdefault(key, pk)
    due = []
    for pk in firsts.values():
        # Conditional: of two beats racing, one sends it.
        if queued.filter(pk=pk, redispatch_at__lte=now).update(redispatch_at=now + REDISPATCH_AFTER):
            due.append(pk)
    return due


def send(scan_id: int, location: str | None = None) -> None:
    """Hand a queued scan to its location's workers, queue scans.<location> (raises
    BrokerUnreachable when the broker is down)."""
    if location is None:
        # Called by the beat and by tests with an id only; the row says where it runs.
        location = ALL_SCANS.filter(pk=scan_id).values_list("location", flat=True).first()
        if location is None:
            return  # deleted meanwhile
    queue = scheduling.queue_for(location)
    # The routing key names the queue in the task's delivery info, also when tasks run eagerly.
    # By name: the task module imports this one (the services its tasks run).
    celery_app.tasks[RUN_SCAN_TASK].apply_async((scan_id,), queue=queue, routing_key=queue)


def send_due(scan_ids: list[int]) -> int:
    """Send the scans redispatch_due chose. If the broker refuses one (Redis restarting), it
    and the rest are due again at the beat's next pass instead of after REDISPATCH_AFTER:
    a broker back within seconds must not leave scans waiting five minutes. Returns how many
    were sent."""
    for sent, scan_id in enumerate(scan_ids):
        try:
            send(scan_id)
        except BrokerUnreachable as exc:
            unsent = scan_ids[sent:]
            log.warning("%d queued scan(s) not sent, the broker is unreachable (%s); "
                        "sent again at the next pass", len(unsent), exc)
            ALL_SCANS.filter(pk__in=unsent, status=ScanStatus.QUEUED).update(
                redispatch_at=timezone.now())
            return sent
    return len(scan_ids)


def hand_off(origin: str, location: str) -> int | None:
    """The origin was just freed: send the longest-waiting queued scan of this origin and
    location at once instead of at the beat's next pass (which still sends it if this
    message is lost). Returns the scan sent, if any."""
    now = timezone.now()
    with transaction.atomic():
        # System-wide worker step: the next scan of this origin, whatever its team.
        waiting = (ALL_SCANS.select_for_update(skip_locked=True)
                   .filter(status=ScanStatus.QUEUED, origin=origin, location=location)
                   .order_by("queued_at").values_list("pk", flat=True).first())
        if waiting is None:
            return None
        ALL_SCANS.filter(pk=waiting).update(  # the row just locked above
            redispatch_at=now + REDISPATCH_AFTER)
    send(waiting, location)
    return waiting


def scan_now(endpoint: Endpoint, trigger: str, now: datetime | None = None) -> Scan:
    """A manual or API scan, at most one per MANUAL_SCAN_COOLDOWN per endpoint, sent to a
    worker at once. Call it outside a transaction: the scan must be committed before a worker
    can see it. If the broker refuses it, the scan is deleted and the cooldown given back
    (ScanNotQueued), so the caller can simply try again."""
    if endpoint.mode != EndpointMode.SCHEDULED:
        raise NotScannable("This endpoint is pushed: its scans are uploaded from inside its "
                           "network (tokvera scan --publish, or POST …/reports), not started here.")
    now = now or timezone.now()
    location = scheduling.locations_of(endpoint)[0]
    month = time_partitions.month_start(now)
    with transaction.atomic():
        # The caller checked access to `endpoint`; these rows are its team's own.
        endpoints = Endpoint.objects.for_team(endpoint.team_id)
        scans = Scan.objects.for_team(endpoint.team_id)
        previous = (endpoints.select_for_update().filter(pk=endpoint.pk)
                    .values_list("last_manual_scan_at", flat=True).get())
        if previous is not None and previous > now - MANUAL_SCAN_COOLDOWN:
            raise ScanRateLimited(previous + MANUAL_SCAN_COOLDOWN - now)
        endpoints.filter(pk=endpoint.pk).update(last_manual_scan_at=now)
        scan = scans.create(endpoint=endpoint, trigger=trigger, location=location,
                            partition_month=month,
                            origin=origin_of(endpoint.base_url), deadline_at=now + QUEUED_GRACE,
                            redispatch_at=now + REDISPATCH_AFTER)
    try:
        send(scan.pk, location)
    except BrokerUnreachable as exc:
        log.warning("scan-now of endpoint %s not queued: the broker is unreachable (%s)",
                    endpoint.pk, exc)
        with transaction.atomic():
            scans.filter(pk=scan.pk, status=ScanStatus.QUEUED).delete()
            endpoints.filter(pk=endpoint.pk, last_manual_scan_at=now).update(
                last_manual_scan_at=previous)
        raise ScanNotQueued("The task queue is unreachable, so the scan was not started (nothing "
                            f"was saved); try again in {BROKER_RETRY_AFTER_S} s.") from None
    return scan


# Scans a person started (the page's button, the API): those a person may stop. A scheduled
# scan is the SLO's evidence and runs to its end.
CANCELLABLE_TRIGGERS = (ScanTrigger.MANUAL, ScanTrigger.API)


class NotCancellable(Exception):
    """The scan cannot be cancelled: it was not started by a person, or it already ended."""


def cancel(scan: Scan, by: str, now: datetime | None = None) -> None:
    """Cancel a queued or running manual/API scan: its row says cancelled at once (who and
    when in error_reason), so a worker that finishes it anyway cannot store a grade (the
    store's UPDATE is conditional), and its worker is told through the cache
    (scans/running/live_progress.py) and stops within about a second, at its next heartbeat without the
    cache. No alert: a cancelled scan is not a measurement. The scan-now cooldown is not given
    back (a cancel is not a way around it)."""
    if scan.trigger not in CANCELLABLE_TRIGGERS:
        raise NotCancellable("Only a scan started by hand or through the API can be cancelled; "
                             "scheduled scans run to their end (they are the SLO's evidence).")
    now = now or timezone.now()
    # The caller checked access to the scan; the row is its team's own.
    won = Scan.objects.for_team(scan.endpoint.team_id).filter(
        pk=scan.pk, trigger__in=CANCELLABLE_TRIGGERS,
        status__in=[ScanStatus.QUEUED, ScanStatus.RUNNING],
    ).update(status=ScanStatus.CANCELLED, finished_at=now,
             error_reason=f"Cancelled by {by} at {now:%Y-%m-%d %H:%M:%S} UTC."[:2000])
    if not won:
        raise NotCancellable("The scan had already finished, so there was nothing to cancel.")
    progress.ask_to_cancel(scan.public_id)
