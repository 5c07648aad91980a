"""Origins (scheme://host:port) and their locks: at most one running scan per origin, so a
team's scans never load one server twice at once and never measure each other."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction
from django.utils import timezone

from scans.models import OriginLock


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
