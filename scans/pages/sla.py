"""The team's SLA report: a month (the last whole one by default) or any range of UTC days,
as a page, CSV and PDF (scans/sla.py builds it). Any member reads it; outsiders get 404."""

from __future__ import annotations

from datetime import date, timedelta

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from accounts.identity import SignedInRequest
from accounts.views import team_for_request
from scans import sla
from scans.models import Endpoint

#: How many past months the page offers as links.
MONTHS_OFFERED = 12


def _months(today: date) -> list[str]:
    months, first = [], today.replace(day=1)
    for _ in range(MONTHS_OFFERED):
        months.append(first.strftime("%Y-%m"))
        first = (first - timedelta(days=1)).replace(day=1)
    return months


@login_required
@require_GET
def team_sla(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_for_request(request, slug)
    now = timezone.now()
    try:
        start, end = sla.parse_range(request.GET.get("month"), request.GET.get("since"),
                                     request.GET.get("until"), now.date())
    except sla.RangeError as exc:
        return render(request, "scans/sla.html", {"team": team, "error": str(exc),
                                                  "months": _months(now.date())}, status=400)
    endpoints = Endpoint.objects.for_team(team.pk).order_by("name", "pk")
    report = sla.sla_report(endpoints, start, end, now)
    name = f"sla-{team.slug}-{start:%Y-%m-%d}-to-{end - timedelta(days=1):%Y-%m-%d}"
    wanted = request.GET.get("format", "")
    if wanted == "csv":
        response = HttpResponse(sla.report_csv(report, team.name),
                                content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
        return response
    if wanted == "pdf":
        response = HttpResponse(sla.report_pdf(report, team.name), content_type="application/pdf")
        response["Content-Disposition"] = f'attachment; filename="{name}.pdf"'
        return response
    query = request.GET.copy()
    query.pop("format", None)
    return render(request, "scans/sla.html", {
        "team": team, "report": report, "total": report.team, "months": _months(now.date()),
        "month": start.strftime("%Y-%m") if request.GET.get("month") or not query else "",
        "since": start.isoformat(), "until": (end - timedelta(days=1)).isoformat(),
        "query": query.urlencode(),
    })
