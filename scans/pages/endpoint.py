"""The endpoint's pages: create, edit, delete, scan now, its prompt sample and badge key, and
the endpoint page (state, history, per-check trends, SLO windows, scans).

Every team-owned object is fetched through tenancy.get_visible_or_404 (outsiders get 404), and
the role is checked after it is found (viewers get 403 on writes). Writes run in transactions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.identity import SignedInRequest
from accounts.tenancy import Access, require_manage, require_write
from accounts.views import team_to_create_in
from audit import record as audit
from scans import maintenance
from scans.endpoints import profile as load_profile
from scans.endpoints import service as endpoints
from scans.grader import describe_slo, goodput_text
from scans.history import slo_windows, state
from scans.history.capacity_history import capacity_history, latest_capacity
from scans.history.check_results import check_history, unmeasured_reasons
from scans.history.grades import grade_history
from scans.history.headlines import HeadlinePoint, headline_history
from scans.history.slo_wording import WindowWords, duration_text
from scans.liveness import history as probe_history
from scans.models import Endpoint, EndpointMode, ScanStatus, ScanTrigger, new_badge_key
from scans.pages import charts
from scans.pages.common import endpoint_or_404
from scans.pages.forms import EndpointForm
from scans.running import dispatch

# The endpoint page's chart ranges, shortest first: query value → (label, span).
RANGES = {"1h": ("1 hour", timedelta(hours=1)), "6h": ("6 hours", timedelta(hours=6)),
          "1d": ("24 hours", timedelta(days=1)), "7d": ("7 days", timedelta(days=7)),
          "30d": ("30 days", timedelta(days=30)), "90d": ("90 days", timedelta(days=90))}


def default_range(endpoint: Endpoint, now: datetime) -> str:
    """The shortest range that holds every scan of the endpoint (an endpoint with 40 minutes
    of scans opens at 1 hour, not as a smudge at the right edge of 30 days); the longest when
    the first scan is older than all of them, the shortest with no scan yet."""
    first = endpoint.scans.filter(status=ScanStatus.SUCCEEDED).order_by("queued_at").values_list(
        "queued_at", flat=True).first()
    if first is None:
        return next(iter(RANGES))
    age = now - first
    return next((key for key, (_, span) in RANGES.items() if age <= span), list(RANGES)[-1])


# The checks whose trends the endpoint page draws, in this order.
TREND_CHECKS = ("ttft_p95_at_concurrency_1", "error_rate", "ttft_p99_load_ratio",
                "generation_rate_load_ratio", "inter_chunk_p95_at_concurrency_1",
                "error_rate_at_peak")


# Points per chart on the endpoint page (downsampled in SQL beyond that): the grade history
# gets more room than each of the six check trends, which keeps the page light.
GRADE_CHART_POINTS, CHECK_CHART_POINTS = 200, 120


SCANS_PER_PAGE = 25


@login_required
def endpoint_create(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_to_create_in(request, slug)
    form = EndpointForm(request.POST or None, request.FILES or None, team=team)
    if request.method == "POST" and form.is_valid():
        try:
            saved = endpoints.create(team, form.endpoint_data(), Access.for_request(request))
        except endpoints.REFUSALS as exc:
            form.refused(exc)
        else:
            messages.success(request, f"Endpoint {saved.endpoint.name} added.")
            return redirect("endpoint-detail", public_id=saved.endpoint.public_id)
    return render(request, "scans/endpoint_form.html",
                  {"team": team, "form": form, "endpoint": None},
                  status=400 if form.is_bound else 200)


@login_required
def endpoint_edit(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    endpoint = endpoint_or_404(request, public_id)
    require_write(request, endpoint)
    form = EndpointForm(request.POST or None, request.FILES or None, instance=endpoint)
    if request.method == "POST" and form.is_valid():
        try:
            saved = endpoints.update(endpoint, form.endpoint_data(), Access.for_request(request))
        except endpoints.REFUSALS as exc:
            form.refused(exc)
        else:
            messages.success(request, f"Endpoint {saved.endpoint.name} saved.")
            for label in saved.dropped_secrets:
                messages.warning(request, f"The stored {label} was removed because its URL now "
                                          f"points at another server; enter it again if it "
                                          f"belongs there.")
            return redirect("endpoint-detail", public_id=saved.endpoint.public_id)
    if request.method == "POST":
        endpoint.refresh_from_db()  # the page shows what is stored, not the rejected input
    return render(request, "scans/endpoint_form.html",
                  {"team": endpoint.team, "form": form, "endpoint": endpoint},
                  status=400 if form.is_bound else 200)


@login_required
def endpoint_delete(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    """GET: a confirmation page; POST: delete the endpoint with its scans."""
    endpoint = endpoint_or_404(request, public_id)
    require_write(request, endpoint)
    team = endpoint.team
    if request.method == "POST":
        with transaction.atomic(), audit.track(endpoint):
            Endpoint.objects.for_team(team).filter(pk=endpoint.pk).delete()
        messages.success(request, f"Endpoint {endpoint.name} and its scans were deleted.")
        return redirect("team-dashboard", slug=team.slug)
    return render(request, "scans/endpoint_delete.html", {
        "team": team, "endpoint": endpoint, "scan_count": endpoint.scans.count()})


@login_required
@require_POST
def endpoint_prompt_sample_delete(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    endpoint = endpoint_or_404(request, public_id)
    require_write(request, endpoint)
    with transaction.atomic(), audit.track(endpoint):
        Endpoint.objects.for_team(endpoint.team_id).filter(pk=endpoint.pk).update(
            prompt_sample_encrypted="")
    messages.success(request, "The prompt sample was deleted.")
    return redirect("endpoint-edit", public_id=endpoint.public_id)


@login_required
@require_POST
def endpoint_badge_rotate(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    """A new badge key: the old badge URLs stop working at once (owners and admins)."""
    endpoint = endpoint_or_404(request, public_id)
    require_manage(request, endpoint)
    with transaction.atomic(), audit.track(endpoint):
        Endpoint.objects.for_team(endpoint.team_id).filter(pk=endpoint.pk).update(
            badge_key=new_badge_key())
    messages.success(request, "New badge URLs made; the old ones no longer work.")
    return redirect(reverse("endpoint-detail", kwargs={"public_id": endpoint.public_id})
                    + "#badges")


@login_required
@require_POST
def endpoint_scan_now(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    endpoint = endpoint_or_404(request, public_id)
    require_write(request, endpoint)
    try:
        scan = dispatch.scan_now(endpoint, ScanTrigger.MANUAL)
    except (dispatch.NotScannable, dispatch.ScanRateLimited) as exc:
        messages.error(request, str(exc))
        return redirect("endpoint-detail", public_id=endpoint.public_id)
    except dispatch.ScanNotQueued as exc:
        response = render(request, "scans/scan_not_queued.html",
                          {"endpoint": endpoint, "reason": str(exc)}, status=503)
        response["Retry-After"] = str(exc.retry_after_s)
        return response
    # Tagged so the scan page's script can take it away once the scan runs.
    messages.success(request, "Scan queued; this page follows it until it finishes.",
                     extra_tags="scan-queued")
    return redirect("scan-detail", public_id=scan.public_id)


@login_required
def endpoint_detail(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    endpoint = endpoint_or_404(request, public_id)
    until = timezone.now()
    range_key = request.GET.get("range", "")
    if range_key not in RANGES:
        range_key = default_range(endpoint, until)
    since = until - RANGES[range_key][1]
    # An endpoint scanned from several locations has one history per location: `?location=`.
    # (no ordering: the scans' default one made the DISTINCT return every scan)
    locations = sorted(set(endpoint.scans.order_by().values_list("location", flat=True)
                           .distinct()))
    location = request.GET.get("location") if len(locations) > 1 else None
    if location not in locations:
        location = None
    grades = grade_history(endpoint, since, until, max_points=GRADE_CHART_POINTS,
                                   location=location)
    # Every chart shades the endpoint's maintenance windows and marks load and URL changes.
    held = maintenance.maintenance_intervals(endpoint, since, until)
    changes = charts.changes(grades, versions=False)
    headlines = headline_history(endpoint, since, until, max_points=CHECK_CHART_POINTS,
                                 location=location)
    # Every chart's time axis spans the whole chosen range, so its title tells the truth.
    trends = []
    for check_id in TREND_CHECKS:
        points = check_history(endpoint, check_id, since, until,
                                       max_points=CHECK_CHART_POINTS, location=location)
        reasons = unmeasured_reasons(
            endpoint, check_id, [p.scan_id for p in points if p.value is None and p.scan_id])
        trends.append({"check_id": check_id, "label": charts.check_label(check_id),
                       "points": points,
                       "chart": charts.check_chart(points, check_id, since, until,
                                                   reasons=reasons, maintenance=held)})
    # Each window with its words: the figures and what the page says of them.
    windows = [(w, WindowWords(w)) for w in
               (slo_windows.window(endpoint, days, until, location) for days in slo_windows.WINDOW_DAYS)]
    # A list never loads reports (each up to REPORT_MAX_BYTES): the load is a column.
    page = Paginator(endpoint.scans.order_by("-queued_at").defer("report").annotate(
        **load_profile.plan_columns()), SCANS_PER_PAGE).get_page(request.GET.get("page"))
    for scan in page.object_list:  # the load each grade came from, as stored with its report
        setattr(scan, "load_profile",  # noqa: B010 - a page-only attribute, not a field
                load_profile.profile_of_row(vars(scan))
                if scan.status == ScanStatus.SUCCEEDED else None)
    latest = (endpoint.scans.filter(status=ScanStatus.SUCCEEDED).order_by("-queued_at")
              .annotate(**load_profile.plan_columns())
              .only("grade", "provisional", "scoring_version", "pushed", "queued_at", "down")
              .first())
    if latest is not None:
        setattr(latest, "load_profile",  # noqa: B010 - a page-only attribute, not a field
                load_profile.profile_of_row(vars(latest)))
    profiles = list(dict.fromkeys(p.profile for p in grades if p.profile))
    access = Access.for_request(request)
    badge_svg = request.build_absolute_uri(reverse("badge-svg", args=[endpoint.badge_key]))
    badge_json = request.build_absolute_uri(reverse("badge-json", args=[endpoint.badge_key]))
    return render(request, "scans/endpoint_detail.html", {
        "team": endpoint.team, "endpoint": endpoint,
        "ranges": [(key, label) for key, (label, _) in RANGES.items()], "range_key": range_key,
        "range_label": RANGES[range_key][0],
        "grades": grades,
        "grade_chart": charts.grade_chart(grades, since, until, maintenance=held),
        "headline_charts": _headline_charts(headlines, since, until, changes, held),
        "agent": _agent_load(endpoint, headlines, since, until, changes, held),
        "capacity": _capacity(endpoint, since, until, location, changes, held),
        "maintenance_shown": bool(held),
        "locations": locations if len(locations) > 1 else [], "location": location,
        "versions": list(dict.fromkeys(p.scoring_version for p in grades)),
        "trends": trends, "windows": windows, "page": page,
        "can_write": access.can_write(endpoint.team_id),
        "can_manage": access.can_manage(endpoint.team_id),
        "badge_svg": badge_svg, "badge_json": badge_json,
        "latest": latest, "profiles": profiles,
        "cooldown_minutes": int(dispatch.MANUAL_SCAN_COOLDOWN.total_seconds() // 60),
        "refresh_s": ENDPOINT_REFRESH_S, "refresh_version": _refresh_version(endpoint),
        "state": state.during_maintenance(
            [endpoint], {endpoint.pk: state.current(endpoint)}, until)[endpoint.pk],
        "headline": state.headline(endpoint),
        "liveness": _liveness(endpoint, since, until, held),
        "first_scan": _before_first_scan(endpoint),
        "maintenance": [{"occurrence": o, "when": maintenance.describe(o.window),
                         "now": o.covers(timezone.now())}
                        for o in maintenance.upcoming(endpoint.team_id, timezone.now(), endpoint)],
    })


# One colour per location on the probe chart, in the order of the endpoint's locations.
_LOCATION_COLOURS = ("#2e5aac", "#a86400", "#1f7a3d", "#7a3d9a", "#9a3d3d")


def _liveness(endpoint: Endpoint, since: datetime, until: datetime,
              held: Sequence[tuple[datetime, datetime]]) -> dict | None:
    """The probes between scans: each location's standing and latest probes, and their TTFT
    over the range (None for a pushed endpoint: the site cannot reach it)."""
    if endpoint.mode != EndpointMode.SCHEDULED:
        return None
    shown = probe_history.locations(endpoint)
    by_location = probe_history.series(endpoint, since, until, max_points=CHECK_CHART_POINTS)
    series = [charts.Series(
        f"probe-{index}", item.location, _LOCATION_COLOURS[index % len(_LOCATION_COLOURS)], "",
        [charts.SeriesPoint(at=p.at, last_at=p.last_at, scans=p.probes, value=p.ttft_ms,
                            counted="probes") for p in by_location.get(item.location, [])])
        for index, item in enumerate(shown)]
    answered = any(p.ttft_ms is not None for points in by_location.values() for p in points)
    return {"locations": shown, "several": len(shown) > 1, "answered": answered,
            "chart": charts.series_chart("probes", "Probe time to first token", "ms", series,
                                         since, until, maintenance=held)}


#: The endpoint page fetches itself this often and, when a scan changed, swaps itself in.
ENDPOINT_REFRESH_S = 15


def _refresh_version(endpoint: Endpoint) -> str:
    """What the page's self-refresh compares (static/page-refresh.js): the latest scans and
    their statuses, so the page is swapped in when a scan is queued, starts or ends."""
    recent = endpoint.scans.order_by("-queued_at").values_list("public_id", "status")[:5]
    # and the probes' verdict: down between scans shows without a reload
    return " ".join([*(f"{public_id}:{status}" for public_id, status in recent),
                     f"live:{endpoint.liveness}:{endpoint.liveness_cause}"])


def _headline_charts(points: Sequence[HeadlinePoint], since: datetime, until: datetime,
                     changes: Sequence[dict] = (),
                     held: Sequence[tuple[datetime, datetime]] = ()) -> list[dict]:
    """TTFT p50/p95 and tokens/s at one request at a time, over the range, beside the checks;
    `changes` (the grade history's load and URL changes) marked, `held` (maintenance) shaded."""

    def series(key: str, label: str, colour: str, dash: str = "") -> charts.Series:
        return charts.Series(key, label, colour, dash, [
            charts.SeriesPoint(at=p.at, last_at=p.last_at, scans=p.scans,
                               value=p.figures[key], scan_id=p.scan_id) for p in points])

    return [
        {"key": "ttft", "title": "Time to first token, one request at a time", "points": points,
         "chart": charts.series_chart(
             "ttft", "Time to first token", "ms",
             [series("ttft_p50", "p50", "#2e5aac"), series("ttft_p95", "p95", "#a86400", "6 3")],
             since, until, changes=changes, maintenance=held)},
        {"key": "tokens", "title": "Output speed per stream, one request at a time",
         "points": points,
         "chart": charts.series_chart(
             "tokens", "Output speed per stream", "tokens/s",
             [series("tokens_per_s", "tokens/s (median)", "#1f7a3d")], since, until,
             changes=changes, maintenance=held)},
    ]


def _agent_load(endpoint: Endpoint, points: Sequence[HeadlinePoint], since: datetime,
                until: datetime, changes: Sequence[dict],
                held: Sequence[tuple[datetime, datetime]]) -> dict | None:
    """An agent-shaped load's figures: each level's of the latest scan that sent one, and the
    top level's valid tool calls and JSON replies over the range. None when neither the
    endpoint's profile nor any scan in the range sent such a load."""
    latest = (endpoint.scans.filter(status=ScanStatus.SUCCEEDED, agent_figures__isnull=False)
              .order_by("-queued_at").only("public_id", "queued_at", "agent_figures").first())
    measured = [p for p in points if p.figures["tool_calls_valid"] is not None
                or p.figures["json_valid"] is not None]
    if latest is None and not measured and not endpoint.agent_workload:
        return None
    series = [charts.Series(key, label, colour, dash, [
        charts.SeriesPoint(at=p.at, last_at=p.last_at, scans=p.scans, value=p.figures[key],
                           scan_id=p.scan_id) for p in measured])
        for key, label, colour, dash in (("tool_calls_valid", "tool calls", "#2e5aac", ""),
                                         ("json_valid", "JSON replies", "#a86400", "6 3"))]
    return {"latest": latest, "levels": latest.agent_figures if latest else [],
            "measured": bool(measured),
            "chart": charts.series_chart("agent", "Valid at the top level", "share", series,
                                         since, until, changes=changes, maintenance=held)}


def _capacity(endpoint: Endpoint, since: datetime, until: datetime, location: str | None = None,
              changes: Sequence[dict] = (), held: Sequence[tuple[datetime, datetime]] = ()) -> dict:
    """Capacity within the SLO: what the latest scan that searched found, in words,
    and its trend over the range (a scan where no level met the SLO serves 0 streams)."""
    latest = latest_capacity(endpoint)
    found = getattr(latest, "capacity_found", None) if latest is not None else None
    found = found if isinstance(found, dict) else {}
    points = capacity_history(endpoint, since, until, max_points=CHECK_CHART_POINTS,
                                      location=location)
    series = [charts.Series("capacity", "streams within the SLO", "#3451d1", "", [
        charts.SeriesPoint(at=p.at, last_at=p.last_at, scans=p.scans, value=p.streams,
                           scan_id=p.scan_id) for p in points])]
    if endpoint.capacity_alert_below is not None and points:
        series.append(charts.Series(
            "alert_below", f"alert below {endpoint.capacity_alert_below}", "#d23b3b", "5 3",
            [charts.SeriesPoint(at=at, value=float(endpoint.capacity_alert_below))
             for at in (since, until)]))
    slo_found = found.get("slo")
    return {
        "latest": latest, "reason": str(found.get("reason") or ""),
        "levels_tried": "/".join(str(c) for c in found.get("levels_tried") or []),
        "slo_text": describe_slo(slo_found) if isinstance(slo_found, dict) else "",
        "goodput": goodput_text(
            latest.capacity_requests_per_s, latest.capacity_output_tokens_per_s,
            latest.capacity_output_unit) if latest is not None else "",
        "points": points,
        "chart": charts.series_chart("capacity", "Capacity within the SLO", "streams", series,
                                     since, until, changes=changes, maintenance=held),
    }


# The scans whose durations say how long a first scan takes, about (the team's latest).
def _before_first_scan(endpoint: Endpoint) -> dict | None:
    """For an endpoint no scan has finished for yet, what the page says in one place instead of
    an empty chart per section: the latest scan, if any, and how long its first scan should
    take by its own profile. None once a scan succeeded."""
    scans = endpoint.scans.order_by("-queued_at")
    if scans.filter(status=ScanStatus.SUCCEEDED).exists():
        return None
    latest = scans.only("public_id", "status", "queued_at", "started_at", "error_reason").first()
    running_s = ((timezone.now() - latest.started_at).total_seconds()
                 if latest is not None and latest.started_at else None)
    estimate = endpoints.expected_scan_s(endpoint)
    return {"scan": latest, "running_s": running_s, "estimate": estimate,
            "estimate_text": scan_time_text(estimate.seconds)}


def scan_time_text(seconds: float) -> str:
    """45 s, 3 min, 1 h 10 min: how long a scan takes, as a person reads it."""
    return f"{round(seconds)} s" if seconds < 90 else duration_text(seconds)
