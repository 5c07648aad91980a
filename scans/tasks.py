"""Celery tasks. Each takes ids, is safe to run twice, and writes through services."""

from __future__ import annotations

import logging

from celery import shared_task

from audit import retention as audit_retention
from scans import sla
from scans.endpoints import scheduling
from scans.history import retention, rollups
from scans.liveness import dispatch as probe_dispatch
from scans.liveness import partitions as probe_partitions
from scans.liveness import worker as probe_worker
from scans.models import scan_partitions

# The alert delivery tasks live beside what they deliver; imported here so the worker, which
# autodiscovers scans.tasks, registers them (names unchanged: scans.tasks.send_alert, ...).
from scans.notify.alerts import send_alert, send_webhook
from scans.notify.channels.delivery import deliver_due_notifications, deliver_notification
from scans.running import dispatch, pushes, worker

# Status page news, beside its subscriptions (the alert path sends a signal, no task).
from scans.status_pages.subscriptions import mail_status_page_news

__all__ = ["deliver_due_notifications", "deliver_notification",
           "dispatch_probes", "enqueue_due_scans", "mail_sla_reports", "mail_status_page_news",
           "prove_pushed_report", "prune_reports", "reap_scans", "roll_up_scans", "run_probes", "run_scan",
           "send_alert", "send_webhook"]

log = logging.getLogger(__name__)


@shared_task
def enqueue_due_scans() -> int:
    """Every minute: one queued scan per due endpoint slot and location, then the queued scans
    due to be sent (new, waiting for a busy origin, or never taken): the first of each free
    origin, to its location's queue."""
    dispatch.enqueue_due()  # new scans are due to be sent at once: redispatch_due sends them
    return dispatch.send_due(dispatch.redispatch_due())


@shared_task
def dispatch_probes() -> int:
    """Every 10 seconds: the liveness probes due (each endpoint on its own interval), one task
    per batch and location (scans/liveness/dispatch.py)."""
    return probe_dispatch.dispatch_due()


@shared_task(bind=True)  # not acks_late: a lost batch is simply probed at its next slot
def run_probes(self, endpoint_ids: list[int]) -> int:
    """Probe a batch of endpoints from the location whose queue delivered it."""
    delivery = self.request.delivery_info or {}
    location = scheduling.location_of_queue(delivery.get("routing_key") or delivery.get("queue"))
    if location is None:
        log.warning("a probe batch arrived outside a scans.<location> queue; not run")
        return 0
    return probe_worker.probe_batch(endpoint_ids, location)


@shared_task(acks_late=True)  # idempotent: each team's month is claimed before it is mailed
def mail_sla_reports() -> int:
    return sla.mail_due_reports()


@shared_task(acks_late=True)  # idempotent: the conditional reaping UPDATE
def reap_scans() -> int:
    return worker.reap()


@shared_task(bind=True, acks_late=True)
def run_scan(self, scan_id: int) -> str:
    """Run one queued scan. A second delivery finds it claimed and does nothing; a scan whose
    origin is busy stays queued for the beat to send again (worker.run_queued). The queue
    that delivered it names this worker's location: another location's scan is not run."""
    delivery = self.request.delivery_info or {}
    queue = delivery.get("routing_key") or delivery.get("queue")
    location = scheduling.location_of_queue(queue)
    if location is None:
        # Not from a scan queue (an old message on the default queue, or run eagerly): the
        # scan is sent again to its own location's queue by the beat.
        log.warning("scan %s arrived on queue %r, not a scans.<location> queue; not run",
                    scan_id, queue)
        return "not a scan queue"
    return worker.run_queued(scan_id, location)


@shared_task(acks_late=True, queue=pushes.PROOF_QUEUE)  # idempotent: a conditional claim
def prove_pushed_report(scan_id: int) -> str:
    """Prove and store (or refuse) one uploaded report, on the proof workers (queue "proofs",
    scans/running/pushes.py): the CPU-heavy part of a push, kept off the web's request threads."""
    return pushes.prove_pending(scan_id)


@shared_task(acks_late=True)  # idempotent: a pruned scan is not pruned again; row locks only
def prune_reports() -> str:
    """Hourly: scans finished more than REPORT_RETENTION_DAYS ago keep only their summary
    (scans/history/retention.py), in batches, for at most a couple of minutes a pass; the days
    of probe rows past PROBE_RETENTION_DAYS and the months of scans past SCAN_RETENTION_DAYS
    are dropped (their partitions; their hours and rollups stay) and the coming days' and
    months' partitions made (scans/liveness/partitions.py, scans/models/scan_partitions.py),
    hourly rollups past HOURLY_ROLLUP_RETENTION_DAYS and audit log entries past
    AUDIT_RETENTION_DAYS are deleted (scans/history/rollups.py, audit/retention.py)."""
    # first: the probes' and the scans' paths need them
    probe_partitions.ensure_probe_partitions()
    scan_partitions.ensure_scan_partitions()
    pruned = retention.prune()
    probe_days = retention.prune_probes()
    scan_months = len(retention.prune_scans())
    scan_partitions.analyze_if_stale()  # the parents' statistics: autovacuum skips them
    rollup_hours = rollups.prune_hours()  # past HOURLY_ROLLUP_RETENTION_DAYS; days stay
    audit_entries = audit_retention.prune()  # past AUDIT_RETENTION_DAYS
    return (f"{pruned}; dropped {probe_days} days of probe rows and {scan_months} months of "
            f"scans, deleted {rollup_hours} hourly rollups and {audit_entries} audit entries")


@shared_task(acks_late=True)  # idempotent: each touched bucket is recomputed from its scans
def roll_up_scans() -> str:
    """Every 5 minutes: the hourly and daily rollups of the hours touched since the last pass
    (scans/history/rollups.py), which long chart ranges read."""
    return str(rollups.roll_up())
