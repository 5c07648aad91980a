"""In a real browser (Debian's Chromium, offline but for the live server): a down endpoint's
cause on the dashboard, the endpoint page and its alert; an SLO window in time with burn
rates; a compare of two scans that are not neighbours. Screenshots go to test-artifacts/."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connections
from django.utils import timezone

from scans.grader.scoring import CheckValue
from tests.conftest import build_world
from tests.helpers.browser import ARTIFACTS, offline
from tests.helpers.factories import make_endpoint, send_alert_now
from tests.scans.conftest import CAPPED_D, GRADE_A, scan_at, with_values
from tests.scans.pages.test_endpoint_state import _free_port, real_scan

PASSWORD = "correct horse battery staple"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _in_a_thread(function, *args):
    """Run a real scan outside Playwright's event loop (the grader runs its own)."""
    def run():
        try:
            return function(*args)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def _login(page, live_server, world):
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=login]", world.owner.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/teams/{world.team.slug}/")


def test_a_down_endpoint_shows_its_cause_on_the_dashboard_its_page_and_its_alert(
        browser, live_server, settings):
    settings.SITE_URL = live_server.url
    world = build_world()
    healthy = make_endpoint(world.team, name="a healthy box")
    scan_at(healthy, timezone.now() - timedelta(minutes=30), GRADE_A)
    dead = make_endpoint(world.team, name="dead box", alert_email=True,
                         base_url=f"http://127.0.0.1:{_free_port()}/v1")
    scan = _in_a_thread(real_scan, dead)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    refused = offline(page, live_server)

    _login(page, live_server, world)
    assert page.locator("[data-state-count=down]").inner_text() == "1 down"
    first_row = page.locator("table.endpoints tbody tr").first
    assert "dead box" in first_row.inner_text()  # problems first
    assert "connection refused" in first_row.locator("[data-cause]").inner_text()
    page.screenshot(path=str(ARTIFACTS / "dashboard-down-endpoint.png"), full_page=True)

    first_row.locator("a", has_text="dead box").click()
    page.wait_for_selector("#state[data-state=down]")
    assert "connection refused (nothing is listening there)" in page.locator(
        "#state [data-cause]").inner_text()
    assert "Down since" in page.locator("#state").inner_text()
    page.screenshot(path=str(ARTIFACTS / "endpoint-down.png"), full_page=True)

    send_alert_now(dead, scan, "below_floor", "grade F is below the floor B")
    (email,) = mail.outbox
    assert "State: down" in email.body and "connection refused" in email.body
    link = f"{live_server.url}/scans/{scan.public_id}/"
    assert link in email.body
    page.goto(link)  # the alert's link opens the scan
    assert page.locator("h1").count() >= 1
    assert refused == []


def test_the_slo_window_reads_in_time_with_burn_rates(browser, live_server):
    world = build_world()
    endpoint = make_endpoint(world.team, name="llama", slo_grade_floor="B", slo_objective=0.9,
                             interval_minutes=60)
    now = timezone.now()
    scan_at(endpoint, now - timedelta(hours=3), GRADE_A)
    scan_at(endpoint, now - timedelta(hours=2), GRADE_A)
    scan_at(endpoint, now - timedelta(hours=1), CAPPED_D)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    refused = offline(page, live_server)

    _login(page, live_server, world)
    page.goto(f"{live_server.url}/endpoints/{endpoint.public_id}/#slo")
    seven = page.locator('#slo .window[data-days="7"]')

    assert seven.locator("[data-allowance]").inner_text() == (
        "90% over 7 days allows 16 h 48 min of bad time")
    assert seven.locator("[data-budget-text]").inner_text() == "1 h used, 15 h 48 min left"
    assert "Scans cover 3 h of 7 d (1.8%)" in seven.inner_text()
    # 6 h and 30 min: 3.3x over 6 h and 10x over the last half hour; 6x pages
    assert seven.locator('[data-pair="21600-1800"] [data-rates]').inner_text() == "3.3× · 10.0×"
    # a third of the covered time bad: under the 90 % objective
    assert seven.locator("[data-slo]").inner_text() == "breaching"
    seven.screenshot(path=str(ARTIFACTS / "slo-window-in-time.png"))
    assert refused == []


def test_two_scans_that_are_not_neighbours_compare_in_the_browser(browser, live_server):
    world = build_world()
    endpoint = make_endpoint(world.team, name="llama")
    now = timezone.now()
    first = scan_at(endpoint, now - timedelta(hours=3),
                    with_values(GRADE_A, ttft_p95_at_concurrency_1=CheckValue(201.0)))
    scan_at(endpoint, now - timedelta(hours=2), GRADE_A)
    last = scan_at(endpoint, now - timedelta(hours=1),
                   with_values(GRADE_A, ttft_p95_at_concurrency_1=CheckValue(453.0)))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    refused = offline(page, live_server)

    _login(page, live_server, world)
    page.goto(f"{live_server.url}/scans/{last.public_id}/compare")
    page.select_option("select[name=with]", str(first.public_id))
    page.click("form[data-compare-with] button[type=submit]")
    page.wait_for_selector("[data-flag=ttft_p95_at_concurrency_1]")

    flagged = page.locator("[data-flag=ttft_p95_at_concurrency_1]").inner_text()
    assert "201.0 ms → 453.0 ms (+125 %)" in flagged and "still pass" in flagged
    assert page.locator(f'[data-before="{first.public_id}"]').is_visible()
    page.screenshot(path=str(ARTIFACTS / "compare-non-adjacent.png"), full_page=True)
    assert refused == []
