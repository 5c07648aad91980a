"""What every team page needs: the endpoint or scan a URL names (404 for other teams), and
whether the caller may write to a team."""

from __future__ import annotations

from uuid import UUID

from django.http import HttpRequest

from accounts.tenancy import Access, get_visible_or_404
from scans.models import Endpoint, Scan, ScanStatus


def endpoint_or_404(request: HttpRequest, public_id: UUID | str) -> Endpoint:
    return get_visible_or_404(request, Endpoint, public_id=public_id)


def can_write(request: HttpRequest, team_id: int) -> bool:
    return Access.for_request(request).can_write(team_id)


def scan_or_404(request: HttpRequest, public_id: UUID | str) -> Scan:
    return get_visible_or_404(request, Scan, public_id=public_id)


def previous_scan(scan: Scan) -> Scan | None:
    """The endpoint's last succeeded scan before this one."""
    return (Scan.objects.for_team(scan.endpoint.team_id)
            .filter(endpoint_id=scan.endpoint_id, status=ScanStatus.SUCCEEDED,
                    queued_at__lt=scan.queued_at)
            .order_by("-queued_at").first())
