from celery import shared_task
from django.utils import timezone


@shared_task(acks_late=True)  # idempotent: deleting what is expired twice deletes nothing more
def delete_expired_invitations() -> int:
    from scans.models import Invitation

    deleted, _ = Invitation.dangerously_unscoped.filter(
        accepted_at__isnull=True, expires_at__lt=timezone.now()
    ).delete()
    return deleted
