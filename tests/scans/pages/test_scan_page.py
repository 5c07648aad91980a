"""The scan page: status, the error reason of an errored scan, and the stored report rendered
by the CLI's report template (framed, and on its own at report.html)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.models import Scan
from scans.origins import origin_of
from scans.running import worker as scan_worker
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_C, GRADE_A, NOW, report_for, scan_at

pytestmark = pytest.mark.django_db


def get(client, name, scan):
    return client.get(reverse(name, args=[scan.public_id]))


def test_a_succeeded_scan_shows_its_grade_and_the_framed_report(owner_client, endpoint):
    scan = scan_at(endpoint, NOW - timedelta(hours=1), CAPPED_C)

    response = get(owner_client, "scan-detail", scan)

    body = response.content.decode()
    assert response.status_code == 200
    assert 'data-status="succeeded"' in body
    assert "capped from B" in body and "87.0 points" in body
    assert f'<h1 data-scan="{scan.public_id}" data-status="succeeded">llama on box</h1>' in body
    assert ('<iframe class="report" title="Report of llama on box, '
            in body)
    assert 'sandbox="allow-same-origin" srcdoc="&lt;!DOCTYPE html&gt;' in body
    assert "ttft_at_concurrency_1_failed" in body  # inside the escaped report
    assert reverse("scan-report-html", args=[scan.public_id]) in body
    assert "No earlier scan to compare with" in body


def test_the_report_html_is_the_cli_template_served_self_contained(owner_client, endpoint):
    from scans.grader.report_html import render_html

    scan = scan_at(endpoint, NOW - timedelta(hours=1), GRADE_A)

    response = get(owner_client, "scan-report-html", scan)

    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert response.content.decode() == render_html(scan.report, surface="site")
    assert "default-src 'none'" in response["Content-Security-Policy"]
    assert response["X-Frame-Options"] == "SAMEORIGIN"


def test_an_errored_scan_says_why_and_has_no_report(owner_client, endpoint):
    scan = scan_at(endpoint, NOW - timedelta(hours=1), status="errored",
                   error_reason="refused to connect to 169.254.169.254: a link-local address")

    body = get(owner_client, "scan-detail", scan).content.decode()

    assert "Why it errored:" in body and "169.254.169.254: a link-local address" in body
    assert "left out of the SLO windows" in body
    assert "<iframe" not in body
    assert get(owner_client, "scan-report-html", scan).status_code == 404


def test_a_queued_scan_polls_its_status_instead_of_reloading(owner_client, endpoint):
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual")

    body = get(owner_client, "scan-detail", scan).content.decode()

    assert 'http-equiv="refresh"' not in body
    assert f'data-live-status="/scans/{scan.public_id}/status.json"' in body
    assert "Waiting for a worker for" in body


def _running_since(endpoint, started):
    """A running scan holding its server, as dispatch leaves it (its origin recorded)."""
    scan = scan_at(endpoint, started, status="running")
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(
        started_at=started, origin=origin_of(endpoint.base_url))
    return scan


def test_a_scan_queued_behind_its_servers_running_scan_says_so_and_how_long_is_left(
        world, owner_client, endpoint):
    # Two endpoints of one server (one origin): the second waits for the first's scan.
    sibling = make_endpoint(world.team, name="same box, other model",
                            base_url=endpoint.base_url.replace("/v1", "/v2"))
    for minutes in (30, 20, 10):  # the server's last scans took six minutes each
        took = scan_at(endpoint, NOW - timedelta(minutes=minutes), GRADE_A)
        Scan.dangerously_unscoped.filter(pk=took.pk).update(
            started_at=NOW - timedelta(minutes=minutes + 6),
            finished_at=NOW - timedelta(minutes=minutes))
    running = _running_since(endpoint, timezone.now() - timedelta(minutes=2))
    queued = Scan.dangerously_unscoped.create(endpoint=sibling, trigger="manual")

    progress = get(owner_client, "scan-status", queued).json()["progress"]

    assert progress.startswith("Queued for ")
    assert (f"behind the scan of this server started {running.started_at:%H:%M} UTC, about "
            "4 min left" in progress)


def test_another_teams_scan_of_the_same_server_is_never_named(world, owner_client, endpoint):
    theirs = make_endpoint(world.other_team, name="their model", base_url=endpoint.base_url)
    _running_since(theirs, timezone.now() - timedelta(minutes=2))
    queued = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual")

    progress = get(owner_client, "scan-status", queued).json()["progress"]

    assert progress.startswith("Waiting for a worker for ")
    assert "behind" not in progress


def test_the_status_json_says_where_a_scan_stands(owner_client, endpoint):
    scan = scan_at(endpoint, NOW - timedelta(hours=1), status="running")

    running = get(owner_client, "scan-status", scan)

    assert running.status_code == 200 and running["Cache-Control"] == "no-store"
    assert running.json()["status"] == "running" and running.json()["finished"] is False
    assert running.json()["progress"].startswith("Running for ")
    done = get(owner_client, "scan-status", scan_at(endpoint, NOW, CAPPED_C)).json()
    assert (done["status"], done["finished"], done["grade"], done["points"]) == (
        "succeeded", True, "C", 87.0)


def test_report_text_cannot_break_out_of_the_frame(owner_client, endpoint):
    report = report_for(GRADE_A, model='"><script>alert(1)</script>')
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="push")
    scan_worker.store_report(scan, report, pushed=True)

    body = get(owner_client, "scan-detail", scan).content.decode()

    assert "<script>alert(1)" not in body
    assert "&lt;script&gt;" not in body.split("<iframe", 1)[0]  # the model is not on the page


def test_a_pushed_scan_says_it_was_uploaded_and_regraded(owner_client, endpoint):
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="push")
    scan_worker.store_report(scan, report_for(GRADE_A), pushed=True)

    body = get(owner_client, "scan-detail", scan).content.decode()

    assert "uploaded by tokvera 0.1.0, re-graded here" in body
