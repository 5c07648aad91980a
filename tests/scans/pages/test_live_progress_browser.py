"""The scan page follows a real scan while it runs, a running manual scan can be cancelled, and
the dashboard keeps its rows current: Debian's Chromium (offline, on loopback) against the live
server, a real Celery worker (the run command's threads pool, heartbeat every second) and a
slow `tokvera target` on loopback.

Screenshots go to test-artifacts/ (live-*.png).
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from scans.grader.demo_server import MODEL_ID, TargetConfig, running_target
from scans.models import OriginLock, Scan, ScanStatus, ScanTrigger
from scans.pages import dashboard as dashboard_page
from scans.pages import endpoint as endpoint_page
from scans.running import dispatch
from scans.running import worker as scan_worker
from tests.conftest import build_world
from tests.helpers import workers
from tests.helpers.browser import ARTIFACTS
from tests.helpers.factories import make_endpoint
from tests.helpers.processes import wait_for
from tests.helpers.workers import stop
from tests.scans.conftest import GRADE_A, report_for
from tests.scans.pages.test_ux_browser import PHONE, logged_in_page, no_horizontal_scroll
from tokvera_site.celery import app

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

REQUESTS = re.compile(r"Level (\d+) of (\d+), concurrency (\d+): (\d+) of (\d+) requests")


@pytest.fixture
def scan_worker_process(settings, tmp_path):
    """One real worker running one scan at a time, so a scan that ends frees it for the next."""
    from tests.helpers import fast_scan_settings as fast

    for name in ("SCAN_HEARTBEAT_S", "SCAN_STALE_AFTER_S", "SCAN_ORIGIN_BUSY_RETRY_S"):
        setattr(settings, name, getattr(fast, name))
    app.control.purge()
    worker = workers.start("--concurrency", "1", log=tmp_path / "worker.log")
    yield worker
    stop(worker)
    app.control.purge()


def _scan(scan_id: int) -> Scan:
    return Scan.dangerously_unscoped.get(pk=scan_id)


def _figures(page) -> str:
    """The live figures line, or "" (also while the page is loading itself again)."""
    try:
        box = page.locator("[data-field=live]")
        return box.inner_text(timeout=500) if box.count() and box.is_visible() else ""
    except Exception:  # the page is navigating: nothing to read this instant
        return ""


def test_the_scan_page_shows_the_workers_progress_while_it_runs_then_the_result(
    browser, live_server, scan_worker_process
):
    world = build_world()
    # About 0.4 s a request: 10 at concurrency 1, then 10 at 2, about 7 s of load.
    with running_target(TargetConfig(ttft_ms=300, itl_ms=10, tokens=8)) as (_, port):
        endpoint = make_endpoint(
            world.team,
            name="llama being watched",
            base_url=f"http://127.0.0.1:{port}/v1",
            model=MODEL_ID,
            levels=[1, 2],
            requests_per_level=10,
            max_tokens=8,
            timeout_s=30,
        )
        page, refused = logged_in_page(browser, live_server, world.owner, width=1400)
        loads: list[str] = []
        page.on("load", lambda: loads.append(page.url))

        page.goto(f"{live_server.url}/endpoints/{endpoint.public_id}/")
        page.click("[data-action=scan-now]")
        page.wait_for_url(re.compile(r".*/scans/[0-9a-f-]+/$"))
        scan = Scan.dangerously_unscoped.get(endpoint=endpoint)
        scan_page = page.url
        # Until the worker has it, the page says "Scan queued"; once it runs, that flash goes.
        page.wait_for_function("document.querySelector('h1').dataset.status === 'running'", timeout=60_000)
        page.wait_for_function("!document.querySelector('.flash.scan-queued')", timeout=10_000)
        assert page.locator("[data-field=status]").inner_text() == "Running"

        # The worker's figures change in place while it runs: requests done goes up.
        seen: list[tuple[int, int]] = []
        screenshots = False
        while _scan(scan.pk).status in (ScanStatus.QUEUED, ScanStatus.RUNNING):
            match = REQUESTS.search(_figures(page))
            if match:
                level, levels, _, done, total = map(int, match.groups())
                assert levels == 2 and total == 10
                if not seen or seen[-1] != (level, done):
                    seen.append((level, done))
                text = _figures(page)
                assert "TTFT p50" in text or done == 0
                if not screenshots and done >= 2:
                    screenshots = True
                    page.screenshot(path=str(ARTIFACTS / "live-scan-running-1400.png"), full_page=True)
                    page.set_viewport_size({"width": PHONE, "height": 900})
                    scroll_width, viewport = no_horizontal_scroll(page)
                    assert scroll_width <= viewport, f"{scroll_width} px wide at {viewport} px"
                    page.screenshot(path=str(ARTIFACTS / "live-scan-running-390.png"), full_page=True)
                    page.set_viewport_size({"width": 1400, "height": 900})
            time.sleep(0.2)
        assert len(seen) >= 3, seen  # it changed at least twice
        assert seen == sorted(seen), seen  # and only forwards
        assert [url for url in loads if url == scan_page] == [scan_page]  # no reload meanwhile

        # It finished: the page loads itself once and shows the grade and the report.
        page.wait_for_selector("iframe.report", timeout=30_000)
        assert page.locator("[data-field=status]").inner_text() == "Succeeded"
        assert page.locator("h1").get_attribute("data-status") == "succeeded"
        assert page.locator("[data-field=live]").count() == 0
        assert [url for url in loads if url == scan_page] == [scan_page, scan_page]
    assert _scan(scan.pk).status == ScanStatus.SUCCEEDED
    assert refused == []


def test_a_running_manual_scan_can_be_cancelled_and_the_worker_takes_the_next(
    browser, live_server, scan_worker_process
):
    world = build_world()
    with running_target(TargetConfig(ttft_ms=300, itl_ms=10, tokens=8)) as (_, port):
        base_url = f"http://127.0.0.1:{port}/v1"
        # 60 requests of about 0.4 s: it would run for about 25 s if nobody stopped it.
        slow = make_endpoint(
            world.team,
            name="llama to stop",
            base_url=base_url,
            model=MODEL_ID,
            levels=[1],
            requests_per_level=60,
            max_tokens=8,
            timeout_s=30,
        )
        quick = make_endpoint(
            world.team,
            name="llama next in line",
            base_url=base_url,
            model=MODEL_ID,
            levels=[1],
            requests_per_level=2,
            max_tokens=8,
            timeout_s=30,
        )
        page, refused = logged_in_page(browser, live_server, world.owner, width=1400)
        scan = dispatch.scan_now(slow, ScanTrigger.MANUAL)
        page.goto(f"{live_server.url}/scans/{scan.public_id}/")
        page.wait_for_function(
            "(document.querySelector('[data-field=live]') || {}).textContent?.includes(' of 60 requests')",
            timeout=60_000,
        )

        page.click("[data-cancel] button")
        page.wait_for_selector("[data-cancelled]", timeout=10_000)
        assert page.locator("[data-field=status]").inner_text() == "Cancelled"
        assert "Cancelled by" in page.locator("[data-cancelled]").inner_text()
        assert page.locator("[data-grade], iframe.report, [data-cancel]").count() == 0
        assert "Scan cancelled" in page.locator(".flash").inner_text()
        page.screenshot(path=str(ARTIFACTS / "live-scan-cancelled.png"), full_page=True)

        # The worker let go of the scan (its origin lock is freed) and runs the next one.
        wait_for(lambda: not OriginLock.objects.exists(), 30, "the cancelled scan's origin lock")
        following = dispatch.scan_now(quick, ScanTrigger.MANUAL)
        wait_for(
            lambda: _scan(following.pk).status == ScanStatus.SUCCEEDED, 60, "the next scan on the same worker"
        )
    cancelled = _scan(scan.pk)
    assert cancelled.status == ScanStatus.CANCELLED
    assert cancelled.report is None and cancelled.grade == "" and cancelled.points is None
    assert refused == []


def test_the_dashboard_refreshes_its_rows_by_itself(browser, live_server, monkeypatch):
    monkeypatch.setattr(dashboard_page, "DASHBOARD_REFRESH_S", 1)
    world = build_world()
    endpoint = make_endpoint(
        world.team, name="llama on the wall", next_scan_at=timezone.now() + timedelta(minutes=30)
    )
    page, refused = logged_in_page(browser, live_server, world.owner, width=1400)
    loads: list[str] = []
    page.on("load", lambda: loads.append(page.url))
    page.goto(f"{live_server.url}/teams/{world.team.slug}/")
    row = page.locator(f"tr[data-endpoint='{endpoint.public_id}']")
    assert "no scan yet" in row.inner_text()
    assert row.locator("[data-running]").count() == 0

    # A scan starts: the row says so instead of the next scan's time...
    scan = Scan.dangerously_unscoped.create(
        endpoint=endpoint, trigger=ScanTrigger.SCHEDULE, status=ScanStatus.RUNNING, started_at=timezone.now()
    )
    row.locator("[data-running]").wait_for(timeout=15_000)
    assert "running now" in row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "live-dashboard-running-1400.png"), full_page=True)
    page.set_viewport_size({"width": PHONE, "height": 900})
    page.screenshot(path=str(ARTIFACTS / "live-dashboard-running-390.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    # ...and when it is stored, its grade appears, all without loading the page again.
    scan_worker.store_report(scan, report_for(GRADE_A))
    # (One refresh may straddle the store, its queries on both sides: the next one is whole.)
    page.wait_for_function(
        f"(() => {{ const row = document.querySelector(\"tr[data-endpoint='{endpoint.public_id}']\");"
        " return row.querySelector('[data-grade]') && !row.querySelector('[data-running]'); })()",
        timeout=15_000,
    )
    assert row.locator("[data-grade]").first.get_attribute("data-grade") == "A"
    assert len(loads) == 1
    assert refused == []


def test_the_endpoint_page_refreshes_itself_when_a_scan_starts_and_ends(
        browser, live_server, monkeypatch):
    monkeypatch.setattr(endpoint_page, "ENDPOINT_REFRESH_S", 1)
    world = build_world()
    endpoint = make_endpoint(world.team, name="llama watched",
                             next_scan_at=timezone.now() + timedelta(minutes=30))
    page, refused = logged_in_page(browser, live_server, world.owner, width=1400)
    loads: list[str] = []
    page.on("load", lambda: loads.append(page.url))
    page.goto(f"{live_server.url}/endpoints/{endpoint.public_id}/")
    assert page.locator("[data-first-scan]").get_attribute("data-first-scan") == "none"

    # A scan starts, then is stored: the page follows both without being loaded again.
    scan = Scan.dangerously_unscoped.create(
        endpoint=endpoint, trigger=ScanTrigger.SCHEDULE, status=ScanStatus.RUNNING,
        started_at=timezone.now())
    page.wait_for_function(
        "document.querySelector('[data-first-scan]')"
        " && document.querySelector('[data-first-scan]').dataset.firstScan === 'running'",
        timeout=15_000)
    scan_worker.store_report(scan, report_for(GRADE_A))
    page.wait_for_function(
        "document.querySelector('[data-latest-source] [data-grade]') !== null", timeout=15_000)
    assert page.locator("[data-latest-source] [data-grade]").first.get_attribute(
        "data-grade") == "A"
    assert len(loads) == 1
    assert refused == []
