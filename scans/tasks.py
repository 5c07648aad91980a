"""Celery tasks. Each takes ids, is safe to run twice, and writes through services."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

log = logging.getLogger(__name__)


@shared_task(acks_late=True)  # idempotent: deleting what is expired twice deletes nothing more
def delete_expired_invitations() -> int:
    from accounts.models import Invitation

    deleted, _ = Invitation.dangerously_unscoped.filter(
        accepted_at__isnull=True, expires_at__lt=timezone.now()
    ).delete()
    return deleted


@shared_task
def enqueue_due_scans() -> int:
    """Every minute: one queued scan per due endpoint slot, and the queued scans due to be sent
    again (waiting for a busy origin, or never taken), each sent to a worker."""
    from scans import scanning

    scan_ids = scanning.enqueue_due() + scanning.redispatch_due()
    for scan_id in scan_ids:
        scanning.send(scan_id)
    return len(scan_ids)


@shared_task(acks_late=True)  # idempotent: the conditional reaping UPDATE
def reap_scans() -> int:
    from scans import scanning

    return scanning.reap()


@shared_task(acks_late=True)
def run_scan(scan_id: int) -> str:
    """Run one queued scan. A second delivery finds it claimed and does nothing; a scan whose
    origin is busy stays queued for the beat to send again (scanning.run_queued)."""
    from scans import scanning

    return scanning.run_queued(scan_id)


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
