"""The pages in a real browser: Playwright driving Debian's Chromium, headless, on loopback.

Log in, create an endpoint through the form, see it on the dashboard, open its page with
seeded scans (charts render, the version break shows), a scan page with the framed report, the
compare page, the rate-limited "scan now" and the badge. Screenshots go to test-artifacts/.

Skipped with the reason when /usr/bin/chromium is missing, except under
TOKVERA_REQUIRE_SERVICES=1 (CI), where that is a failure.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.utils import timezone

from scans.models import Endpoint
from tests.conftest import build_world
from tests.helpers.browser import ARTIFACTS, offline
from tests.scans.conftest import CAPPED_C, GRADE_A, GRADE_B, NO_LETTER, scan_at

PASSWORD = "correct horse battery staple"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_team_member_tracks_an_endpoint_through_the_pages(browser, live_server):
    world = build_world()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    refused = offline(page, live_server)

    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=login]", world.owner.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/teams/{world.team.slug}/")
    assert page.locator("text=No endpoints yet").is_visible()

    # Create an endpoint through the form; the API key is write-only.
    page.click("text=New endpoint")
    page.fill("input[name=name]", "llama in the lab")
    page.fill("input[name=base_url]", "http://127.0.0.1:9/v1")
    page.fill("input[name=model]", "tiny-llama")
    page.fill("input[name=api_key]", "sk-browser-secret-123")
    page.click("details.advanced summary")  # the schedule is under "Advanced"
    page.fill("input[name=interval_minutes]", "2")  # below the minimum: a clear error
    page.click("form.endpoint-form .form-actions button[type=submit]")
    assert page.locator("[data-field=interval_minutes] .error").is_visible()
    assert "sk-browser-secret-123" not in page.content()
    page.screenshot(path=str(ARTIFACTS / "endpoint-form.png"), full_page=True)
    page.fill("input[name=interval_minutes]", "15")
    page.fill("input[name=api_key]", "sk-browser-secret-123")
    page.fill("input[name=slo_ttft_p95_ms]", "800")
    page.click("form.endpoint-form .form-actions button[type=submit]")
    page.wait_for_selector("h1[data-endpoint]")
    assert "sk-browser-secret-123" not in page.content()
    assert page.locator("#first-scan h2").inner_text().startswith("First scan")
    endpoint = Endpoint.dangerously_unscoped.get(team=world.team, name="llama in the lab")
    assert endpoint.has_api_key and endpoint.interval_minutes == 15

    # Seed a history: a capped scan, one with no letter, a change of scoring version, an error.
    now = timezone.now()
    for hours, values in ((30, GRADE_A), (26, GRADE_B), (22, CAPPED_C), (18, NO_LETTER),
                          (14, GRADE_A), (10, GRADE_A)):
        scan_at(endpoint, now - timedelta(hours=hours), values, version="0.9.0")
    scan_at(endpoint, now - timedelta(hours=8), status="errored",
            error_reason="refused to connect to 10.1.2.3: a private address")
    latest = scan_at(endpoint, now - timedelta(hours=6), GRADE_B, version="1.0.0")
    for hours in (4, 2):
        scan_at(endpoint, now - timedelta(hours=hours), GRADE_A, version="1.0.0")

    page.reload()
    chart = page.locator("svg[data-chart=grades]")
    assert chart.get_attribute("data-breaks") == "1"
    assert chart.get_attribute("data-versions") == "0.9.0 1.0.0"
    assert chart.get_attribute("data-capped") == "1"
    assert page.locator("svg[data-chart=grades] .version-break").count() == 1
    for check_id in ("ttft_p95_at_concurrency_1", "error_rate", "ttft_p99_load_ratio",
                     "generation_rate_load_ratio"):
        assert page.locator(f"svg[data-chart=check][data-check={check_id}]").is_visible()
    assert page.locator(".version-note").first.is_visible()
    assert page.locator(".window[data-days='7'] [data-slo]").count() == 1
    assert page.locator("tr[data-status=errored]").count() == 1
    page.screenshot(path=str(ARTIFACTS / "endpoint-page.png"), full_page=True)
    page.locator("#grades").screenshot(path=str(ARTIFACTS / "grade-history.png"))
    page.locator("#checks").screenshot(path=str(ARTIFACTS / "check-trends.png"))

    # The dashboard: the latest grade, provisional or not, and a sparkline.
    page.click("nav.subnav >> text=Endpoints")
    row = page.locator(f"tr[data-endpoint='{endpoint.public_id}']")
    assert row.locator(".latest [data-grade]").inner_text() == "A"
    assert row.locator("svg[data-chart=sparkline]").get_attribute("data-count") == "9"
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

    # A scan page with the framed report, then the comparison across versions.
    page.goto(f"{live_server.url}/scans/{latest.public_id}/")
    frame = page.frame_locator("iframe.report")
    assert "Tokvera report" in page.locator("iframe.report").get_attribute("srcdoc")
    frame.locator("body").wait_for()
    page.screenshot(path=str(ARTIFACTS / "scan-page.png"), full_page=True)
    page.click("text=Compare with the previous scan")
    note = page.locator(".version-note")
    assert "not comparable" in note.inner_text()
    assert page.locator("[data-same-version=false]").count() == 1
    page.screenshot(path=str(ARTIFACTS / "compare.png"), full_page=True)

    # "Scan now" right after another manual scan is refused with a clear message.
    Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(last_manual_scan_at=now)
    page.goto(f"{live_server.url}/endpoints/{endpoint.public_id}/")
    page.click("[data-action=scan-now]")
    assert "try again in" in page.locator(".flash").inner_text()

    # The public badge, from a fresh context without the session.
    anonymous = browser.new_context().new_page()
    offline(anonymous, live_server)
    response = anonymous.goto(f"{live_server.url}/badge/{endpoint.badge_key}.svg")
    assert response.status == 200
    assert response.headers["cache-control"] == "public, max-age=300"
    assert anonymous.locator("svg.badge").get_attribute("data-grade") == "A"
    assert anonymous.locator("svg.badge").get_attribute("data-provisional") == "false"

    assert refused == [], f"pages asked for something off this server: {refused}"
    assert os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE") == "true"
