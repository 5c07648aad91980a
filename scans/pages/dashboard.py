"""The team dashboard: every endpoint with its state, grade and sparkline, problems first."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import OuterRef, Subquery
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.identity import SignedInRequest
from accounts.tenancy import Access
from accounts.views import team_for_request, team_to_create_in
from scans.endpoints import service as endpoints
from scans.history import slo_windows, state
from scans.history.grades import latest_grades
from scans.history.slo_wording import WindowWords
from scans.models import Endpoint, EndpointMode, Scan, ScanStatus
from scans.notify.alerts import SLO_ALERT_WINDOW_DAYS
from scans.pages import charts
from scans.pages.common import can_write

SPARKLINE_SCANS = 30


DASHBOARD_PAGE_SIZE = 50

#: The dashboard fetches itself this often and swaps in its rows (static/page-refresh.js).
DASHBOARD_REFRESH_S = 15


@login_required
def team_dashboard(request: SignedInRequest, slug: str) -> HttpResponse:
    """Every endpoint with its state and cause, latest grade, provisional marker, the sparkline
    of its last 30 grades, last and next scan, and its SLO status, a page at a time. An
    endpoint no scan has finished for has one empty state across those cells (its first scan
    running, queued or when it is due) instead of "no scan yet" in each.

    The SLO column is judged on the window the burn-rate alerts use (7 days) unless the viewer
    picks another of the endpoint page's windows (`?slo=30`): the header names the window
    shown, so a status is never read against a window it was not judged on.

    A summary line counts the states; problems come first (worst state first) unless
    `?sort=` asks for name, grade or last scan. A fixed number of queries whatever the number
    of endpoints (states are read for the whole team so the order spans every page)."""
    team = team_for_request(request, slug)
    sort = request.GET.get("sort", "state")
    if sort not in DASHBOARD_SORTS:
        sort = "state"
    slo_days = SLO_ALERT_WINDOW_DAYS
    if request.GET.get("slo", "").isdigit() and int(request.GET["slo"]) in slo_windows.WINDOW_DAYS:
        slo_days = int(request.GET["slo"])
    scans = Scan.objects.for_team(team).filter(endpoint=OuterRef("pk")).exclude(
        finished_at=None).exclude(status=ScanStatus.CANCELLED).order_by("-queued_at")
    # A scan under way replaces "next scan" in its row (it said "Next scan 18:37"
    # while a scan ran).
    running = Scan.objects.for_team(team).filter(
        endpoint=OuterRef("pk"), status=ScanStatus.RUNNING).order_by("-started_at")
    waiting = Scan.objects.for_team(team).filter(
        endpoint=OuterRef("pk"), status=ScanStatus.QUEUED).order_by("queued_at")
    # capacity beside the grade: the latest scan that searched
    searched = scans.filter(status=ScanStatus.SUCCEEDED).exclude(capacity_outcome="")
    everything = list(Endpoint.objects.for_team(team)
                      .annotate(last_finished_at=Subquery(scans.values("finished_at")[:1]),
                                last_status=Subquery(scans.values("status")[:1]),
                                running_scan=Subquery(running.values("public_id")[:1]),
                                running_since=Subquery(running.values("started_at")[:1]),
                                queued_scan=Subquery(waiting.values("public_id")[:1]),
                                capacity_outcome=Subquery(searched.values("capacity_outcome")[:1]),
                                capacity_streams=Subquery(
                                    searched.values("capacity_concurrency")[:1]))
                      .order_by("name", "pk"))
    # A window covering an endpoint now shows it in maintenance, not down (alerts are held).
    states = state.during_maintenance(everything, state.states_for(everything), timezone.now())
    summary = {key: 0 for key in state.SEVERITY}
    for current in states.values():
        summary[current.state] += 1
    everything.sort(key=_dashboard_key(sort, states))
    page = Paginator(everything, DASHBOARD_PAGE_SIZE).get_page(request.GET.get("page"))
    endpoints = list(page.object_list)
    latest = latest_grades(endpoints, n=SPARKLINE_SCANS)
    windows = slo_windows.windows_for(endpoints, slo_days)
    now = timezone.now()
    rows = []
    for endpoint in endpoints:
        grades = latest[endpoint.pk]
        first_scan = "" if grades or endpoint.last_finished_at else _before_first_scan(endpoint)
        rows.append({
            "endpoint": endpoint,
            "state": states[endpoint.pk],
            "latest": grades[-1] if grades else None,
            "sparkline": charts.sparkline(grades) if grades else None,
            "window": windows[endpoint.pk],
            "slo_words": WindowWords(windows[endpoint.pk]),
            "first_scan": first_scan,
            # the time alone within the coming day, else its date too
            "first_scan_format": "H:i T" if first_scan == "due" and
            endpoint.next_scan_at - now < timedelta(hours=20) else "Y-m-d H:i T",
        })
    return render(request, "scans/endpoint_dashboard.html", {
        "team": team, "rows": rows, "page": page, "can_write": can_write(request, team.pk),
        "summary": [(key, state.SHOWN_LABELS[key], summary[key]) for key in state.SEVERITY
                    if summary[key]],
        "sort": sort, "sorts": list(DASHBOARD_SORTS.items()),
        "refresh_s": DASHBOARD_REFRESH_S,
        "demo_target_url": settings.DEMO_TARGET_URL,
        "slo_days": slo_days, "slo_choices": slo_windows.WINDOW_DAYS, "alert_days": SLO_ALERT_WINDOW_DAYS,
        "slo_query": "" if slo_days == SLO_ALERT_WINDOW_DAYS else f"&slo={slo_days}",
    })


# An endpoint row of team_dashboard: an Endpoint annotated with its latest scans.
DashboardRow = Any


def _before_first_scan(endpoint: DashboardRow) -> str:
    """What a row with no finished scan says instead of its grade, history and SLO: its first
    scan running, queued, or due (at next_scan_at); pushed, paused, or nothing scheduled."""
    if endpoint.running_scan:
        return "running"
    if endpoint.queued_scan:
        return "queued"
    if endpoint.mode == EndpointMode.PUSHED:
        return "pushed"
    if not endpoint.enabled:
        return "paused"
    return "due" if endpoint.next_scan_at else "none"


# The dashboard's orders: query value → label.
DASHBOARD_SORTS = {"state": "problems first", "name": "name", "grade": "grade",
                   "last_scan": "last scan"}


def _dashboard_key(sort: str, states: dict) -> Callable[[DashboardRow], tuple]:
    def key(endpoint: DashboardRow) -> tuple:
        current = states[endpoint.pk]
        name = (endpoint.name.lower(), endpoint.pk)
        if sort == "name":
            return name
        if sort == "grade":  # best points first, no grade last
            return (current.points is None, -(current.points or 0.0), *name)
        if sort == "last_scan":  # most recent first, never scanned last
            at = endpoint.last_finished_at
            return (at is None, -(at.timestamp() if at else 0.0), *name)
        return (current.severity, *name)
    return key


# What the one-click demo endpoint scans: a light profile, so the demo target stays green
# (the seeded demo endpoint's, scans/management/commands/seed_demo.py).
@login_required
@require_POST
def add_demo_endpoint(request: SignedInRequest, slug: str) -> HttpResponse:
    """An empty team's first endpoint in one click: the run command's demo target. Offered
    only where the run command started one (DEMO_TARGET_URL) and only while the team has no
    endpoint, so a second click adds nothing."""
    team = team_to_create_in(request, slug)
    if Endpoint.objects.for_team(team.pk).exists():
        messages.info(request, "The demo target is offered to a team without endpoints only.")
        return redirect("team-dashboard", slug=team.slug)
    if not settings.DEMO_TARGET_URL:
        raise Http404("no demo target here")
    saved = endpoints.create(team, endpoints.demo_endpoint_fields(settings.DEMO_TARGET_URL),
                             Access.for_request(request))
    messages.success(request, "The demo target was added; its first scan starts within a "
                              "minute.")
    return redirect("endpoint-detail", public_id=saved.endpoint.public_id)
