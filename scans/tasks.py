"""Celery tasks. Each takes ids, is safe to run twice, and writes through services."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

log = logging.getLogger(__name__)

# One scan per target origin at a time (scanning.acquire_origin), so two endpoints on one
# server do not load it at once; a busy origin's scan waits this long and tries again.
ORIGIN_BUSY_RETRY_S = 30


@shared_task(acks_late=True)  # idempotent: deleting what is expired twice deletes nothing more
def delete_expired_invitations() -> int:
    from scans.models import Invitation

    deleted, _ = Invitation.dangerously_unscoped.filter(
        accepted_at__isnull=True, expires_at__lt=timezone.now()
    ).delete()
    return deleted


@shared_task
def enqueue_due_scans() -> int:
    """Every minute: one queued scan per due endpoint slot, each sent to a worker."""
    from scans import scanning

    scan_ids = scanning.enqueue_due()
    for scan_id in scan_ids:
        run_scan.delay(scan_id)
    return len(scan_ids)


@shared_task(acks_late=True)  # idempotent: the conditional reaping UPDATE
def reap_scans() -> int:
    from scans import scanning

    return scanning.reap()


@shared_task(bind=True, acks_late=True, max_retries=None)
def run_scan(self, scan_id: int) -> str:
    """Run one queued scan. A second delivery finds it claimed and does nothing."""
    from scans import scanning
    from scans.models import Scan, ScanStatus
    from tokvera_site.celery import check_countdown

    scan = Scan.dangerously_unscoped.select_related("endpoint").filter(pk=scan_id).first()
    if scan is None or scan.status != ScanStatus.QUEUED:
        return "not queued"
    origin = scanning.origin_of(scan.endpoint.base_url)
    hold = scanning.worst_case_duration(scan.endpoint) + scanning.RUNNING_GRACE
    if not scanning.acquire_origin(origin, scan_id, hold):
        # Another scan of this origin (or this very scan, delivered twice) is running.
        scanning.keep_waiting(scan_id)
        raise self.retry(countdown=check_countdown(ORIGIN_BUSY_RETRY_S))
    try:
        claimed = scanning.claim(scan_id)
        return "claimed elsewhere" if claimed is None else scanning.execute(claimed)
    finally:
        scanning.release_origin(origin, scan_id)


@shared_task(bind=True, max_retries=5, default_retry_delay=60)
def send_alert(self, endpoint_id: int, scan_id: int, kind: str, detail: str) -> None:
    """Email the team's owners and admins, and queue the webhook, for one alert event."""
    from scans import alerts

    try:
        alerts.notify(endpoint_id, scan_id, kind, detail)
    except OSError as exc:  # SMTP and socket errors: try again later
        raise self.retry(exc=exc) from None


@shared_task(bind=True, max_retries=5, default_retry_delay=60)
def send_webhook(self, endpoint_id: int, message: dict) -> int | None:
    from scans import alerts
    from scans.models import Endpoint

    endpoint = Endpoint.dangerously_unscoped.filter(pk=endpoint_id).first()
    if endpoint is None or not endpoint.webhook_url:
        return None
    try:
        status = alerts.deliver_webhook(endpoint, message)
    except Exception as exc:
        log.warning("webhook for endpoint %s failed: %s", endpoint_id, type(exc).__name__)
        raise self.retry(exc=exc) from None
    if status >= 500:
        raise self.retry()
    return status
