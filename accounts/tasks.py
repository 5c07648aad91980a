"""Celery tasks of accounts. Each takes ids, is safe to run twice, and writes through services."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from accounts.models import Invitation

__all__ = ["delete_expired_invitations"]


# The registered name predates this module and is stored in beat's rows: it stays.
@shared_task(name="scans.tasks.delete_expired_invitations",
             acks_late=True)  # idempotent: deleting what is expired twice deletes nothing more
def delete_expired_invitations() -> int:
    # System-wide cleanup: every team's expired invitations.
    deleted, _ = Invitation.dangerously_unscoped.filter(
        accepted_at__isnull=True, expires_at__lt=timezone.now()
    ).delete()
    return deleted
