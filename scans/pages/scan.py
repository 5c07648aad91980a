"""A scan's pages: the scan page with its live progress, its status as JSON, and its report."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_GET, require_POST

from accounts.identity import SignedInRequest
from accounts.tenancy import require_write
from scans.endpoints import profile as load_profile
from scans.endpoints import service as endpoints
from scans.grader import progress_text, render_html
from scans.history import retention
from scans.history import state as endpoint_state
from scans.models import Endpoint, Scan, ScanStatus
from scans.origins import origin_of
from scans.pages.common import can_write, previous_scan, scan_or_404
from scans.running import dispatch
from scans.running import live_progress as live


@login_required
def scan_detail(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    """The scan under its endpoint's name: status, grade, and the report (framed, sized to its
    content). While queued or running, the page polls scan-status for live progress."""
    scan = scan_or_404(request, public_id)
    endpoint = scan.endpoint
    report_html = pruned = None
    if scan.report and scan.report_pruned_at:
        # Past REPORT_RETENTION_DAYS only the summary is left (scans/history/retention.py): shown as
        # tables, not as a report whose histograms would read "no sample".
        pruned = {"sentence": retention.pruned_sentence(), "at": scan.report_pruned_at,
                  **retention.summary_tables(scan.report)}
    elif scan.report:
        report_html = render_html(scan.report, surface="site")
    return render(request, "scans/scan_detail.html", {
        "team": endpoint.team, "endpoint": endpoint, "scan": scan,
        "report_html": report_html, "pruned": pruned,
        "previous": previous_scan(scan) if scan.report else None,
        "progress": _progress(scan),
        # the load that produced this grade, from the report itself (not today's settings)
        "profile": load_profile.profile_of(scan.report.get("plan")) if scan.report else None,
        "down": _down(endpoint, scan),
        "regraded_from": regraded_from(scan),
        "status_label": status_label(scan),
        "can_write": can_write(request, endpoint.team_id),
    })


def regraded_from(scan: Scan) -> str:
    """The scoring version this scan was graded under before a re-grade from its stored numbers
    (`manage.py regrade_scans`, which marks it in the report's measurements), "" when it never
    was: a re-grade is said beside the grade, so nobody reads it as a new measurement."""
    measurements = (scan.report or {}).get("measurements")
    previous = (measurements.get("regraded_from_scoring_version")
                if isinstance(measurements, dict) else None)
    return previous if isinstance(previous, str) and previous != scan.scoring_version else ""


def status_label(scan: Scan) -> str:
    """The scan's status for people: a scan that ran to the end against an endpoint that never
    answered did not succeed at anything a reader cares about, so it says so."""
    if scan.status == ScanStatus.SUCCEEDED and scan.down:
        return "Down · no grade"
    return str(scan.get_status_display())


def _down(endpoint: Endpoint, scan: Scan) -> dict | None:
    """A down scan leads with its cause and since when (down is a state, not a grade): since
    the first scan of the current down run when this is the endpoint's latest scan, else
    since this scan."""
    if not scan.down:
        return None
    cause = endpoint_state.of_scan(endpoint, scan).cause
    now = endpoint_state.current(endpoint)
    since = now.since if now.scan_id == scan.public_id and now.state == "down" else scan.queued_at
    return {"cause": cause, "since": since, "latest": now.scan_id == scan.public_id}


#: The statuses a scan ends in; the scan page stops polling at them.
FINISHED = (ScanStatus.SUCCEEDED, ScanStatus.ERRORED, ScanStatus.REFUSED, ScanStatus.CANCELLED)


def _progress(scan: Scan, now: datetime | None = None) -> dict:
    """Where an unfinished scan stands, in words and seconds (scan page and scan-status): how
    long it has waited or run and, while it runs, its worker's live figures (the level, the
    requests done of its total, TTFT p50, output rate, time left; scans/running/live_progress.py)."""
    now = now or timezone.now()
    finished = scan.status in FINISHED
    figures = None
    if scan.status == ScanStatus.RUNNING and scan.started_at:
        seconds = int((now - scan.started_at).total_seconds())
        text = f"Running for {_duration(seconds)}."
        figures = live.read(scan.public_id)
    elif scan.status == ScanStatus.QUEUED:
        seconds = int((now - scan.queued_at).total_seconds())
        ahead = _running_ahead(scan)
        if ahead is not None:
            text = (f"Queued for {_duration(seconds)} behind the scan of this server started "
                    f"{ahead.started_at:%H:%M} UTC{_time_left(ahead, now)} (one scan of a "
                    f"server at a time); the page updates itself when this one starts.")
        else:
            text = (f"Waiting for a worker for {_duration(seconds)}; the page updates itself "
                    f"when the scan starts.")
    else:
        seconds, text = None, ""
    return {"finished": finished, "seconds": seconds, "text": text, "live": figures,
            "live_text": progress_text(figures),
            "cancellable": not finished and scan.trigger in dispatch.CANCELLABLE_TRIGGERS}


def _running_ahead(scan: Scan) -> Scan | None:
    """The running scan of the same team whose server (origin) this queued scan waits for.
    Only the team's own: another team's scan of the same server is never named to it."""
    origin = scan.origin or origin_of(scan.endpoint.base_url)
    return (Scan.objects.for_team(scan.endpoint.team_id)
            .filter(status=ScanStatus.RUNNING, started_at__isnull=False, origin=origin)
            .exclude(pk=scan.pk).select_related("endpoint").order_by("started_at").first())


def _time_left(running: Scan, now: datetime) -> str:
    """", about 3 min left": the running scan's own estimate, else what its endpoint's last
    scans took (before any, its profile's figure); empty before it started."""
    left = (live.read(running.public_id) or {}).get("scan_eta_s")
    if left is None:
        if running.started_at is None:
            return ""
        expected = endpoints.expected_scan_s(running.endpoint)
        left = expected.seconds - (now - running.started_at).total_seconds()
    if left <= 0:
        return ", due to finish any moment"
    if left < 60:
        return ", less than a minute left"
    return f", about {round(left / 60)} min left"


def _duration(seconds: int) -> str:
    seconds = max(0, seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60} s"


@login_required
@require_GET
def scan_status(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    """A scan's status as JSON, for the scan page's live progress (team-scoped like the page)."""
    scan = scan_or_404(request, public_id)
    progress = _progress(scan)

    def when(at: datetime | None) -> str | None:
        return at.isoformat() if at else None

    response = JsonResponse({
        "id": str(scan.public_id), "status": scan.status,
        "status_label": status_label(scan), "finished": progress["finished"],
        "progress": progress["text"], "seconds": progress["seconds"],
        "live": progress["live"], "live_text": progress["live_text"],
        "cancellable": progress["cancellable"],
        "queued_at": when(scan.queued_at), "started_at": when(scan.started_at),
        "finished_at": when(scan.finished_at),
        "grade": scan.grade or None,
        "scoring_version": scan.scoring_version or None,  # the version beside the grade
        "points": float(scan.points) if scan.points is not None else None,
        "down": scan.down,
        "error_reason": scan.error_reason if scan.status in (ScanStatus.ERRORED,
                                                             ScanStatus.CANCELLED) else None,
    })
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_GET
@xframe_options_sameorigin
def scan_report_html(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    """The stored report as the CLI's self-contained report.html (shown framed on the scan
    page, or on its own)."""
    scan = scan_or_404(request, public_id)
    if not scan.report:
        raise Http404("This scan has no report.")
    if scan.report_pruned_at:
        return HttpResponse(retention.pruned_sentence(), status=410,
                            content_type="text/plain; charset=utf-8")
    response = HttpResponse(render_html(scan.report, surface="site"), content_type="text/html; charset=utf-8")
    # The report is self-contained: it needs no script and loads nothing from anywhere.
    response["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'")
    return response


@login_required
@require_POST
def scan_cancel(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    """Cancel a queued or running manual/API scan (team members who may write; 404 to other
    teams, 403 to read-only members). The page then shows it cancelled, with no grade."""
    scan = scan_or_404(request, public_id)
    require_write(request, scan.endpoint)
    try:
        dispatch.cancel(scan, by=request.user.email or request.user.get_username())
    except dispatch.NotCancellable as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Scan cancelled: it has no grade and counts in no SLO window.")
    return redirect("scan-detail", public_id=scan.public_id)
