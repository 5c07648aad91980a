"""A down scan tells one truth on the site: its scan page's status and its report (framed and
at report.html) say "down · no grade" with the cause, never "Succeeded" alone or a red F with
points; report.json keeps the F the scoring spec gives. The report is a real scan's, of a
loopback port where nothing listens."""

from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from scans.grader import ScanPlan, run_scan
from scans.grader.report import report_from_measurement
from scans.models import Scan
from scans.running import worker as scan_worker
from tests.helpers.servers import raw_server

pytestmark = pytest.mark.django_db


def _down_report() -> dict:
    with raw_server(lambda r, w: None) as port:
        pass  # nothing listens there any more
    plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="tiny", levels=(1,),
                    requests=2, max_tokens=8, timeout_s=5).validate()
    return report_from_measurement(plan, run_scan(plan), None)


def _text(markup: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", markup)))


def test_a_down_scans_page_and_report_say_down_no_grade_not_succeeded(owner_client, endpoint):
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint)
    scan_worker.store_report(scan, _down_report())
    scan.refresh_from_db()
    assert scan.down and scan.report["score"]["grade"] == "F"  # report.json keeps its F

    page = owner_client.get(reverse("scan-detail", args=[scan.public_id])).content.decode()
    status = re.search(r'data-field="status">([^<]*)<', page).group(1)
    assert status == "Down · no grade"
    framed = html.unescape(re.search(r'srcdoc="([^"]*)"', page).group(1))
    alone = owner_client.get(reverse("scan-report-html", args=[scan.public_id]))
    for report_html in (framed, alone.content.decode()):
        summary = report_html[report_html.index('<section class="summary">'):]
        summary = _text(summary[:summary.index("</section>")])
        assert "down · no grade" in summary
        assert "Down: could not connect to 127.0.0.1" in summary
        assert "Points:" not in summary
        assert 'class="grade g-F"' not in report_html

    live = owner_client.get(reverse("scan-status", args=[scan.public_id])).json()
    assert live["status"] == "succeeded" and live["status_label"] == "Down · no grade"
