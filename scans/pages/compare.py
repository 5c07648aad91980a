"""Compare pages: a scan against another of its endpoint, and endpoints of a team side by side
(what moved is computed in scans/history/compare.py)."""

from __future__ import annotations

from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render

from accounts.identity import SignedInRequest
from accounts.views import team_for_request
from scans.history.compare import FLAG_RELATIVE_CHANGE, compare
from scans.models import Endpoint, Scan, ScanStatus
from scans.pages.common import previous_scan, scan_or_404

COMPARE_CHOICES = 50  # the most recent succeeded scans offered to compare with


@login_required
def scan_compare(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    """This scan against another succeeded scan of the same endpoint: `?with=<scan id>`, any
    one (not only the previous), else the previous. The earlier of the two is "before"."""
    scan = scan_or_404(request, public_id)
    endpoint = scan.endpoint
    other_id = request.GET.get("with", "")
    other: Scan | None
    if other_id:
        other = scan_or_404(request, _uuid_or_404(other_id))
        if other.endpoint_id != endpoint.pk:
            raise Http404("That scan is of another endpoint.")
    else:
        other = previous_scan(scan) if scan.report else None
    comparison = before = after = None
    before_label, after_label = "previous scan", "this scan"
    if other is not None and other.report and scan.report and other.pk != scan.pk:
        before, after = sorted((other, scan), key=lambda s: (s.queued_at, s.pk))
        before_label = ("this scan" if before == scan else
                        "previous scan" if not other_id else "earlier scan")
        after_label = "this scan" if after == scan else "later scan"
        comparison = compare(before.report or {}, after.report or {},  # both have one
                             labels=(_named(before_label), _named(after_label)))
    choices = (Scan.objects.for_team(endpoint.team_id)
               .filter(endpoint=endpoint, status=ScanStatus.SUCCEEDED).exclude(pk=scan.pk)
               .order_by("-queued_at")
               .only("public_id", "queued_at", "grade", "down")[:COMPARE_CHOICES])
    return render(request, "scans/scan_compare.html", {
        "team": endpoint.team, "endpoint": endpoint, "scan": scan, "previous": other,
        "before": before, "after": after, "comparison": comparison, "choices": choices,
        "chosen": other_id, "flag_share": FLAG_SHARE,
        "before_label": before_label, "after_label": after_label,
    })


def _named(label: str) -> str:
    """A side of the comparison as a sentence names it: "this scan", "the previous scan"."""
    return label if label == "this scan" else f"the {label}"


def _uuid_or_404(value: str) -> UUID:
    import uuid

    try:
        return uuid.UUID(value)
    except ValueError:
        raise Http404("Not a scan id.") from None


@login_required
def endpoints_compare(request: SignedInRequest, slug: str) -> HttpResponse:
    """Two endpoints of the team side by side: their latest succeeded scans compared
    (`?a=<endpoint id>&b=<endpoint id>`)."""
    team = team_for_request(request, slug)
    endpoints = list(Endpoint.objects.for_team(team).order_by("name", "pk"))
    by_id = {str(e.public_id): e for e in endpoints}
    left, right = by_id.get(request.GET.get("a", "")), by_id.get(request.GET.get("b", ""))
    latest = {}
    for endpoint in (left, right):
        if endpoint is not None:
            latest[endpoint.pk] = (Scan.objects.for_team(team)
                                   .filter(endpoint=endpoint, status=ScanStatus.SUCCEEDED)
                                   .order_by("-queued_at").first())
    before = latest.get(left.pk) if left else None
    after = latest.get(right.pk) if right else None
    comparison = (compare(before.report, after.report, between="endpoints",
                          labels=(left.name, right.name))
                  if left and right and before and after and before.report and after.report
                  else None)
    return render(request, "scans/endpoint_compare.html", {
        "team": team, "endpoints": endpoints, "left": left, "right": right,
        "before": before, "after": after, "comparison": comparison, "flag_share": FLAG_SHARE,
    })


FLAG_SHARE = round(FLAG_RELATIVE_CHANGE * 100)
