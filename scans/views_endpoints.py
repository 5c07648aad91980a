"""Endpoint and scan pages: the team dashboard, endpoint create/edit/delete, the endpoint page
(history, per-check trends, SLO windows, scans, scan now, badges), the scan page, "compare with
previous scan", and the public badges.

Every team-owned object is fetched through tenancy.get_visible_or_404 (outsiders get 404), and
the role is checked after it is found (viewers get 403 on writes). Writes run in transactions.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_GET, require_POST

from accounts.tenancy import Access, get_visible_or_404, require_manage, require_write
from accounts.views import team_for_request, team_to_create_in
from scans import charts, dispatch, history, slo, state
from scans.compare import FLAG_RELATIVE_CHANGE, compare
from scans.endpoint_forms import EndpointForm
from scans.grader.report import render_html
from scans.history import scoped_to_teams
from scans.models import Endpoint, Scan, ScanStatus, ScanTrigger, new_badge_key

# The endpoint page's chart ranges: query value → (label, days).
RANGES = {"1d": ("24 hours", 1), "7d": ("7 days", 7), "30d": ("30 days", 30),
          "90d": ("90 days", 90)}
DEFAULT_RANGE = "30d"
# The checks whose trends the endpoint page draws, in this order.
TREND_CHECKS = ("ttft_p95_at_concurrency_1", "error_rate", "ttft_p99_load_ratio",
                "generation_rate_load_ratio", "inter_chunk_p95_at_concurrency_1",
                "error_rate_at_peak")
SPARKLINE_SCANS = 30
# Points per chart on the endpoint page (downsampled in SQL beyond that): the grade history
# gets more room than each of the six check trends, which keeps the page light.
GRADE_CHART_POINTS, CHECK_CHART_POINTS = 200, 120
SCANS_PER_PAGE = 25
DASHBOARD_PAGE_SIZE = 50


def _endpoint(request, public_id) -> Endpoint:
    return get_visible_or_404(request, Endpoint, public_id=public_id)


def _can_write(request, team_id: int) -> bool:
    return Access.for_request(request).can_write(team_id)


# --- dashboard -------------------------------------------------------------------------------


@login_required
def team_dashboard(request, slug):
    """Every endpoint with its state and cause, latest grade, provisional marker, the sparkline
    of its last 30 grades, last and next scan, and its 7-day SLO status, a page at a time.

    A summary line counts the states; problems come first (worst state first) unless
    `?sort=` asks for name, grade or last scan. A fixed number of queries whatever the number
    of endpoints (states are read for the whole team so the order spans every page)."""
    team = team_for_request(request, slug)
    sort = request.GET.get("sort", "state")
    if sort not in DASHBOARD_SORTS:
        sort = "state"
    scans = Scan.objects.for_team(team).filter(endpoint=OuterRef("pk")).exclude(
        finished_at=None).order_by("-queued_at")
    everything = list(Endpoint.objects.for_team(team)
                      .annotate(last_finished_at=Subquery(scans.values("finished_at")[:1]),
                                last_status=Subquery(scans.values("status")[:1]))
                      .order_by("name", "pk"))
    states = state.states_for(everything)
    summary = {key: 0 for key in state.SEVERITY}
    for current in states.values():
        summary[current.state] += 1
    everything.sort(key=_dashboard_key(sort, states))
    page = Paginator(everything, DASHBOARD_PAGE_SIZE).get_page(request.GET.get("page"))
    endpoints = list(page.object_list)
    latest = history.latest_grades(endpoints, n=SPARKLINE_SCANS)
    windows = slo.windows_for(endpoints, 7)
    rows = []
    for endpoint in endpoints:
        grades = latest[endpoint.pk]
        rows.append({
            "endpoint": endpoint,
            "state": states[endpoint.pk],
            "latest": grades[-1] if grades else None,
            "sparkline": charts.sparkline(grades) if grades else None,
            "window": windows[endpoint.pk],
        })
    return render(request, "scans/endpoint_dashboard.html", {
        "team": team, "rows": rows, "page": page, "can_write": _can_write(request, team.pk),
        "summary": [(key, state.LABELS[key], summary[key]) for key in state.SEVERITY
                    if summary[key]],
        "sort": sort, "sorts": list(DASHBOARD_SORTS.items()),
    })


# The dashboard's orders: query value → label.
DASHBOARD_SORTS = {"state": "problems first", "name": "name", "grade": "grade",
                   "last_scan": "last scan"}


def _dashboard_key(sort: str, states: dict):
    def key(endpoint):
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


# --- create, edit, delete --------------------------------------------------------------------


@login_required
def endpoint_create(request, slug):
    team = team_to_create_in(request, slug)
    form = EndpointForm(request.POST or None, request.FILES or None, team=team)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            endpoint = form.save(commit=False)
            endpoint.team = team
            endpoint.save()
        messages.success(request, f"Endpoint {endpoint.name} added.")
        return redirect("endpoint-detail", public_id=endpoint.public_id)
    return render(request, "scans/endpoint_form.html",
                  {"team": team, "form": form, "endpoint": None},
                  status=400 if form.is_bound else 200)


@login_required
def endpoint_edit(request, public_id):
    endpoint = _endpoint(request, public_id)
    require_write(request, endpoint)
    form = EndpointForm(request.POST or None, request.FILES or None, instance=endpoint,
                        can_manage=Access.for_request(request).can_manage(endpoint.team_id))
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            form.save()
        messages.success(request, f"Endpoint {endpoint.name} saved.")
        for label in form.dropped_secrets:
            messages.warning(request, f"The stored {label} was removed because its URL now "
                                      f"points at another server; enter it again if it "
                                      f"belongs there.")
        return redirect("endpoint-detail", public_id=endpoint.public_id)
    if request.method == "POST":
        endpoint.refresh_from_db()  # the page shows what is stored, not the rejected input
    return render(request, "scans/endpoint_form.html",
                  {"team": endpoint.team, "form": form, "endpoint": endpoint},
                  status=400 if form.is_bound else 200)


@login_required
def endpoint_delete(request, public_id):
    """GET: a confirmation page; POST: delete the endpoint with its scans."""
    endpoint = _endpoint(request, public_id)
    require_write(request, endpoint)
    team = endpoint.team
    if request.method == "POST":
        with transaction.atomic():
            Endpoint.objects.for_team(team).filter(pk=endpoint.pk).delete()
        messages.success(request, f"Endpoint {endpoint.name} and its scans were deleted.")
        return redirect("team-dashboard", slug=team.slug)
    return render(request, "scans/endpoint_delete.html", {
        "team": team, "endpoint": endpoint, "scan_count": endpoint.scans.count()})


@login_required
@require_POST
def endpoint_prompt_sample_delete(request, public_id):
    endpoint = _endpoint(request, public_id)
    require_write(request, endpoint)
    with transaction.atomic():
        Endpoint.objects.for_team(endpoint.team_id).filter(pk=endpoint.pk).update(
            prompt_sample_encrypted="")
    messages.success(request, "The prompt sample was deleted.")
    return redirect("endpoint-edit", public_id=endpoint.public_id)


@login_required
@require_POST
def endpoint_badge_rotate(request, public_id):
    """A new badge key: the old badge URLs stop working at once (owners and admins)."""
    endpoint = _endpoint(request, public_id)
    require_manage(request, endpoint)
    with transaction.atomic():
        Endpoint.objects.for_team(endpoint.team_id).filter(pk=endpoint.pk).update(
            badge_key=new_badge_key())
    messages.success(request, "New badge URLs made; the old ones no longer work.")
    return redirect(reverse("endpoint-detail", kwargs={"public_id": endpoint.public_id})
                    + "#badges")


@login_required
@require_POST
def endpoint_scan_now(request, public_id):
    endpoint = _endpoint(request, public_id)
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
    messages.success(request, "Scan queued; it appears below when a worker picks it up.")
    return redirect("scan-detail", public_id=scan.public_id)


# --- the endpoint page -----------------------------------------------------------------------


@login_required
def endpoint_detail(request, public_id):
    endpoint = _endpoint(request, public_id)
    range_key = request.GET.get("range", DEFAULT_RANGE)
    if range_key not in RANGES:
        range_key = DEFAULT_RANGE
    until = timezone.now()
    since = until - timedelta(days=RANGES[range_key][1])
    # An endpoint scanned from several locations has one history per location: `?location=`.
    locations = sorted(set(endpoint.scans.values_list("location", flat=True).distinct()))
    location = request.GET.get("location") if len(locations) > 1 else None
    if location not in locations:
        location = None
    grades = history.grade_history(endpoint, since, until, max_points=GRADE_CHART_POINTS,
                                   location=location)
    # Every chart's time axis spans the whole chosen range, so its title tells the truth.
    trends = []
    for check_id in TREND_CHECKS:
        points = history.check_history(endpoint, check_id, since, until,
                                       max_points=CHECK_CHART_POINTS, location=location)
        reasons = history.unmeasured_reasons(
            endpoint, check_id, [p.scan_id for p in points if p.value is None and p.scan_id])
        trends.append({"check_id": check_id, "label": charts.check_label(check_id),
                       "points": points,
                       "chart": charts.check_chart(points, check_id, since, until,
                                                   reasons=reasons)})
    windows = [slo.window(endpoint, days, until, location) for days in slo.WINDOW_DAYS]
    page = Paginator(endpoint.scans.order_by("-queued_at"), SCANS_PER_PAGE).get_page(
        request.GET.get("page"))
    access = Access.for_request(request)
    badge_svg = request.build_absolute_uri(reverse("badge-svg", args=[endpoint.badge_key]))
    badge_json = request.build_absolute_uri(reverse("badge-json", args=[endpoint.badge_key]))
    return render(request, "scans/endpoint_detail.html", {
        "team": endpoint.team, "endpoint": endpoint,
        "ranges": [(key, label) for key, (label, _) in RANGES.items()], "range_key": range_key,
        "range_label": RANGES[range_key][0],
        "grades": grades, "grade_chart": charts.grade_chart(grades, since, until),
        "headline_charts": _headline_charts(endpoint, since, until, location),
        "locations": locations if len(locations) > 1 else [], "location": location,
        "versions": list(dict.fromkeys(p.scoring_version for p in grades)),
        "trends": trends, "windows": windows, "page": page,
        "can_write": access.can_write(endpoint.team_id),
        "can_manage": access.can_manage(endpoint.team_id),
        "badge_svg": badge_svg, "badge_json": badge_json,
        "latest": endpoint.scans.filter(status=ScanStatus.SUCCEEDED).order_by("-queued_at")
        .only("grade", "provisional", "pushed", "queued_at").first(),
        "cooldown_minutes": int(dispatch.MANUAL_SCAN_COOLDOWN.total_seconds() // 60),
        "state": state.current(endpoint), "headline": state.headline(endpoint),
    })


def _headline_charts(endpoint: Endpoint, since, until, location=None) -> list[dict]:
    """TTFT p50/p95 and tokens/s at one request at a time, over the range, beside the checks."""
    points = history.headline_history(endpoint, since, until, max_points=CHECK_CHART_POINTS,
                                      location=location)

    def series(key: str, label: str, colour: str, dash: str = "") -> charts.Series:
        return charts.Series(key, label, colour, dash, [
            charts.SeriesPoint(at=p.at, last_at=p.last_at, scans=p.scans,
                               value=p.figures[key], scan_id=p.scan_id) for p in points])

    return [
        {"key": "ttft", "title": "Time to first token, one request at a time", "points": points,
         "chart": charts.series_chart(
             "ttft", "Time to first token", "ms",
             [series("ttft_p50", "p50", "#2e5aac"), series("ttft_p95", "p95", "#a86400", "6 3")],
             since, until)},
        {"key": "tokens", "title": "Output speed per stream, one request at a time",
         "points": points,
         "chart": charts.series_chart(
             "tokens", "Output speed per stream", "tokens/s",
             [series("tokens_per_s", "tokens/s (median)", "#1f7a3d")], since, until)},
    ]


# --- scans -----------------------------------------------------------------------------------


def _scan(request, public_id) -> Scan:
    return get_visible_or_404(request, Scan, public_id=public_id)


def _previous(scan: Scan) -> Scan | None:
    """The endpoint's last succeeded scan before this one."""
    return (Scan.objects.for_team(scan.endpoint.team_id)
            .filter(endpoint_id=scan.endpoint_id, status=ScanStatus.SUCCEEDED,
                    queued_at__lt=scan.queued_at)
            .order_by("-queued_at").first())


@login_required
def scan_detail(request, public_id):
    """The scan under its endpoint's name: status, grade, and the report (framed, sized to its
    content). While queued or running, the page polls scan-status for live progress."""
    scan = _scan(request, public_id)
    endpoint = scan.endpoint
    report_html = None
    if scan.report:
        report_html = render_html(scan.report)
    return render(request, "scans/scan_detail.html", {
        "team": endpoint.team, "endpoint": endpoint, "scan": scan,
        "report_html": report_html, "previous": _previous(scan) if scan.report else None,
        "progress": _progress(scan),
    })


def _progress(scan: Scan, now=None) -> dict:
    """Where an unfinished scan stands, in words and seconds (scan page and scan-status)."""
    now = now or timezone.now()
    finished = scan.status in (ScanStatus.SUCCEEDED, ScanStatus.ERRORED, ScanStatus.REFUSED)
    if scan.status == ScanStatus.RUNNING and scan.started_at:
        seconds = int((now - scan.started_at).total_seconds())
        text = f"Running for {_duration(seconds)}; the page updates itself when it finishes."
    elif scan.status == ScanStatus.QUEUED:
        seconds = int((now - scan.queued_at).total_seconds())
        text = (f"Waiting for a worker for {_duration(seconds)}; the page updates itself when "
                f"the scan starts.")
    else:
        seconds, text = None, ""
    return {"finished": finished, "seconds": seconds, "text": text}


def _duration(seconds: int) -> str:
    seconds = max(0, seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60} s"


@login_required
@require_GET
def scan_status(request, public_id):
    """A scan's status as JSON, for the scan page's live progress (team-scoped like the page)."""
    scan = _scan(request, public_id)
    progress = _progress(scan)

    def when(at):
        return at.isoformat() if at else None

    response = JsonResponse({
        "id": str(scan.public_id), "status": scan.status,
        "status_label": scan.get_status_display(), "finished": progress["finished"],
        "progress": progress["text"], "seconds": progress["seconds"],
        "queued_at": when(scan.queued_at), "started_at": when(scan.started_at),
        "finished_at": when(scan.finished_at),
        "grade": scan.grade or None,
        "points": float(scan.points) if scan.points is not None else None,
        "error_reason": scan.error_reason if scan.status == ScanStatus.ERRORED else None,
    })
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_GET
@xframe_options_sameorigin
def scan_report_html(request, public_id):
    """The stored report as the CLI's self-contained report.html (shown framed on the scan
    page, or on its own)."""
    scan = _scan(request, public_id)
    if not scan.report:
        raise Http404("This scan has no report.")
    response = HttpResponse(render_html(scan.report), content_type="text/html; charset=utf-8")
    # The report is self-contained: it needs no script and loads nothing from anywhere.
    response["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'")
    return response


COMPARE_CHOICES = 50  # the most recent succeeded scans offered to compare with


@login_required
def scan_compare(request, public_id):
    """This scan against another succeeded scan of the same endpoint: `?with=<scan id>`, any
    one (not only the previous), else the previous. The earlier of the two is "before"."""
    scan = _scan(request, public_id)
    endpoint = scan.endpoint
    other_id = request.GET.get("with", "")
    other: Scan | None
    if other_id:
        other = _scan(request, _uuid_or_404(other_id))
        if other.endpoint_id != endpoint.pk:
            raise Http404("That scan is of another endpoint.")
    else:
        other = _previous(scan) if scan.report else None
    comparison = before = after = None
    if other is not None and other.report and scan.report and other.pk != scan.pk:
        before, after = sorted((other, scan), key=lambda s: (s.queued_at, s.pk))
        comparison = compare(before.report or {}, after.report or {})  # both have one (checked above)
    choices = (Scan.objects.for_team(endpoint.team_id)
               .filter(endpoint=endpoint, status=ScanStatus.SUCCEEDED).exclude(pk=scan.pk)
               .order_by("-queued_at").only("public_id", "queued_at", "grade")[:COMPARE_CHOICES])
    return render(request, "scans/scan_compare.html", {
        "team": endpoint.team, "endpoint": endpoint, "scan": scan, "previous": other,
        "before": before, "after": after, "comparison": comparison, "choices": choices,
        "chosen": other_id, "flag_share": FLAG_SHARE,
        "before_label": ("this scan" if before == scan else
                         "previous scan" if not other_id else "earlier scan"),
        "after_label": "this scan" if after == scan else "later scan",
    })


def _uuid_or_404(value: str):
    import uuid

    try:
        return uuid.UUID(value)
    except ValueError:
        raise Http404("Not a scan id.") from None


@login_required
def endpoints_compare(request, slug):
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
    comparison = (compare(before.report, after.report)
                  if before and after and before.report and after.report else None)
    return render(request, "scans/endpoint_compare.html", {
        "team": team, "endpoints": endpoints, "left": left, "right": right,
        "before": before, "after": after, "comparison": comparison, "flag_share": FLAG_SHARE,
    })


FLAG_SHARE = round(FLAG_RELATIVE_CHANGE * 100)


# --- public badges ---------------------------------------------------------------------------

BADGE_LABEL = "tokvera"
BADGE_CACHE = "public, max-age=300"


def _badge_endpoint(key: str) -> Endpoint:
    # Public and unauthenticated: no request has a team here. The unguessable key is the whole
    # credential, and the badge shows nothing but a grade.
    endpoint = (Endpoint.dangerously_unscoped.filter(badge_key=key).select_related("team")
                .only("pk", "team_id", "team__badge_site_measured_only").first())
    if endpoint is None:
        raise Http404("No such badge.")
    return endpoint


def _badge_state(key: str) -> dict:
    """The latest grade and where it came from: measured by the site, or pushed (a report
    whose checks the site recomputed from its samples). A team can keep pushed grades off."""
    endpoint = _badge_endpoint(key)
    scans = (scoped_to_teams(Scan, [endpoint.team_id])
             .filter(endpoint_id=endpoint.pk, status=ScanStatus.SUCCEEDED))
    site_only = endpoint.team.badge_site_measured_only
    if site_only:
        scans = scans.filter(pushed=False)
    latest = scans.order_by("-queued_at").values("grade", "provisional", "pushed").first()
    if latest is None:
        return {"message": "no grade", "grade": None, "provisional": False, "source": None,
                "colour": charts.NO_GRADE_COLOUR,
                "title": "no scan by the site yet" if site_only else "no scan yet"}
    source = "pushed" if latest["pushed"] else "site"
    source_text = ("pushed from inside its network" if latest["pushed"]
                   else "measured by the site")
    grade = latest["grade"] if latest["grade"] in charts.BAND_COLOURS else None
    provisional = bool(latest["provisional"])
    if grade is None:
        return {"message": "no grade", "grade": None, "provisional": provisional,
                "source": source, "colour": charts.NO_GRADE_COLOUR,
                "title": f"no grade: insufficient evidence ({source_text})"}
    notes = [word for word, on in (("provisional", provisional), ("pushed", latest["pushed"]))
             if on]
    message = f"{grade} ({', '.join(notes)})" if notes else grade
    return {"message": message, "grade": grade, "provisional": provisional, "source": source,
            "colour": charts.BAND_COLOURS[grade], "title": f"grade {message}, {source_text}"}


def _public(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = BADGE_CACHE
    response["X-Content-Type-Options"] = "nosniff"
    response["Access-Control-Allow-Origin"] = "*"
    return response


@require_GET
def badge_svg(request, key):
    state = _badge_state(key)
    svg = charts.badge(BADGE_LABEL, state["message"], state["colour"],
                       grade=state["grade"], provisional=state["provisional"],
                       source=state["source"],
                       title=f"{BADGE_LABEL}: {state['title']}")
    response = HttpResponse(svg, content_type="image/svg+xml; charset=utf-8")
    response["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'"
    return _public(response)


@require_GET
def badge_json(request, key):
    """The shields.io endpoint format: schemaVersion, label, message, color."""
    state = _badge_state(key)
    return _public(JsonResponse({
        "schemaVersion": 1, "label": BADGE_LABEL, "message": state["message"],
        "color": state["colour"].lstrip("#"), "cacheSeconds": 300,
    }))
