"""Charts a person reads, pages that fit a phone, and a scan page that shows its progress, in a
real browser (Playwright driving Debian's Chromium, offline, on loopback).

Screenshots go to test-artifacts/ (ux-*.png). Skipped with the reason when /usr/bin/chromium
is missing, except under TOKVERA_REQUIRE_SERVICES=1 (CI), where that is a failure.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scans.models import Scan, ScanStatus
from scans.running import worker as scan_worker
from tests.conftest import build_world
from tests.helpers.browser import ARTIFACTS, offline
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_C, GRADE_A, GRADE_B, NO_LETTER, report_for, scan_at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE, DESKTOP = 390, 1400


def logged_in_page(browser, live_server, user, width: int = 1280):
    """A page whose browser context carries `user`'s session cookie."""
    client = Client()
    client.force_login(user)
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME,
                          "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                          "url": live_server.url}])
    page = context.new_page()
    return page, offline(page, live_server)


def endpoint_with_history(team):
    """An endpoint with an A at 100 points, a B, a capped C and a scan that measured nothing."""
    endpoint = make_endpoint(team, name="llama on the phone")
    now = timezone.now()
    scans = [scan_at(endpoint, now - timedelta(hours=hours), values)
             for hours, values in ((20, GRADE_A), (16, GRADE_B), (12, NO_LETTER),
                                   (8, CAPPED_C), (4, GRADE_A))]
    return endpoint, scans


def test_the_charts_name_their_checks_explain_their_lines_and_show_gaps_not_zeros(
        browser, live_server):
    world = build_world()
    endpoint, scans = endpoint_with_history(world.team)
    page, refused = logged_in_page(browser, live_server, world.owner)

    page.goto(f"{live_server.url}/endpoints/{endpoint.public_id}/?range=7d")

    # A human title first, the check id second.
    caption = page.locator("figure[data-check=error_rate] figcaption")
    assert caption.locator("strong").inner_text() == "Failed requests, all levels"
    assert caption.locator("code").inner_text() == "error_rate"
    # A legend names the pass and warn bounds the dashed lines stand for.
    chart = page.locator("svg[data-chart=check][data-check=inter_chunk_p95_at_concurrency_1]")
    legend = chart.locator(".legend.axis-wide .legend-item text").all_text_contents()
    assert legend[0].startswith("pass ≤ 50") and legend[1].startswith("warn ≤ 150"), legend
    assert chart.locator(".legend.axis-wide .legend-item[data-legend=unmeasured]").count() == 1
    # Time to first token's bounds grow with the prompt: no single line, the legend says so.
    ttft = page.locator("svg[data-chart=check][data-check=ttft_p95_at_concurrency_1]")
    assert ttft.locator(".legend.axis-wide .legend-item text").all_text_contents()[0] == (
        "bounds grow with the prompt's length")
    # The scan that measured nothing is a gap with its reason, not a point at zero.
    errors = page.locator("svg[data-check=error_rate]")
    gap = errors.locator("g.mark.unmeasured")
    assert gap.count() == 1
    assert gap.locator("circle").count() == 0
    assert gap.get_attribute("data-reason") == "no request completed"
    assert "not measured (no request completed)" in gap.locator("title").text_content()
    frame = errors.locator("rect.frame").bounding_box()
    line = gap.locator("line.gap").bounding_box()
    assert line["height"] == pytest.approx(frame["height"], abs=1)  # spans the plot, not at 0
    assert errors.locator("g.mark circle").count() == 4
    # A share axis stops at 100 %.
    assert float(errors.get_attribute("data-y-to")) <= 1.0
    # The grade chart runs 0–100 and no mark leaves it (an A at 100 points is whole).
    grades = page.locator("svg[data-chart=grades]")
    assert (grades.get_attribute("data-y-from"), grades.get_attribute("data-y-to")) == ("0", "100")
    box = grades.bounding_box()
    for circle in grades.locator("g.mark circle").all():
        mark = circle.bounding_box()
        assert mark["y"] >= box["y"] and mark["y"] + mark["height"] <= box["y"] + box["height"]
    # The x axis spans the chosen range, which the heading names.
    assert "last 7 days" in page.locator("#grades h2").inner_text()
    since = grades.get_attribute("data-since")
    assert timezone.now() - timedelta(days=7, minutes=5) < \
        timezone.datetime.fromisoformat(since) < timezone.now() - timedelta(days=6, hours=23)
    # Headline trends sit beside the checks.
    ttft = page.locator("svg[data-chart=ttft]")
    assert ttft.get_attribute("data-series") == "ttft_p50 ttft_p95"
    assert ttft.locator("g.mark[data-series=ttft_p95] circle").count() == 5
    page.locator("#grades").screenshot(path=str(ARTIFACTS / "ux-grade-chart.png"))
    page.locator("#checks").screenshot(path=str(ARTIFACTS / "ux-check-charts.png"))
    page.locator("#headline").screenshot(path=str(ARTIFACTS / "ux-headline-charts.png"))

    # Every point links to its scan.
    capped = scans[3]
    grades.locator(f"g.mark[data-scan='{capped.public_id}'] a").click()
    page.wait_for_url(f"{live_server.url}/scans/{capped.public_id}/")
    assert page.locator("h1").inner_text() == "llama on the phone"
    assert refused == []


def no_horizontal_scroll(page) -> tuple[int, int]:
    return page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_every_logged_in_page_fits_the_screen_without_sideways_scrolling(
        browser, live_server, width):
    world = build_world()
    endpoint, scans = endpoint_with_history(world.team)
    for n in range(3):  # a longer dashboard, with long names
        make_endpoint(world.team, name=f"a-rather-long-endpoint-name-number-{n}-in-the-lab")
    page, refused = logged_in_page(browser, live_server, world.owner, width)
    slug = world.team.slug
    pages = {
        "dashboard": reverse("team-dashboard", args=[slug]),
        "endpoint": reverse("endpoint-detail", args=[endpoint.public_id]),
        "scan": reverse("scan-detail", args=[scans[-1].public_id]),
        "compare": reverse("scan-compare", args=[scans[-1].public_id]),
        "endpoint-form": reverse("endpoint-edit", args=[endpoint.public_id]),
        "endpoint-new": reverse("endpoint-create", args=[slug]),
        "endpoint-delete": reverse("endpoint-delete", args=[endpoint.public_id]),
        "members": reverse("team-members", args=[slug]),
        "tokens": reverse("team-tokens", args=[slug]),
        "settings": reverse("team-settings", args=[slug]),
    }
    for name, path in pages.items():
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("load")
        page.screenshot(path=str(ARTIFACTS / f"ux-{name}-{width}.png"), full_page=True)
        scroll_width, viewport = no_horizontal_scroll(page)
        assert scroll_width <= viewport, f"{name} is {scroll_width} px wide at {viewport} px"
    # Tables keep their columns and scroll inside their card instead.
    page.goto(f"{live_server.url}{pages['endpoint']}")
    table = page.locator("table.scans")
    if width == PHONE:
        assert table.evaluate("t => getComputedStyle(t).overflowX") == "auto"
        assert table.evaluate("t => t.scrollWidth > t.clientWidth")
    assert refused == []


def test_the_scan_page_shows_live_progress_without_reloading(browser, live_server):
    world = build_world()
    endpoint = make_endpoint(world.team, name="llama being scanned")
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual")
    page, refused = logged_in_page(browser, live_server, world.owner)
    loads = []
    page.on("load", lambda: loads.append(page.url))

    page.goto(f"{live_server.url}/scans/{scan.public_id}/")
    progress = page.locator("[data-field=progress]")
    assert "Waiting for a worker" in progress.inner_text()
    assert page.locator("h1").inner_text() == "llama being scanned"

    # A worker picks it up: the page says so in place, without loading itself again.
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(
        status=ScanStatus.RUNNING, started_at=timezone.now())
    page.wait_for_function(
        "document.querySelector('[data-field=progress]').textContent.includes('Running for')",
        timeout=20_000)
    assert page.locator("[data-field=status]").inner_text() == "Running"
    assert page.locator("h1").get_attribute("data-status") == "running"
    assert len(loads) == 1
    page.screenshot(path=str(ARTIFACTS / "ux-scan-running.png"), full_page=True)

    # It finishes: the page shows the grade and the report, framed under the endpoint's name
    # and sized to its content.
    scan_worker.store_report(Scan.dangerously_unscoped.get(pk=scan.pk), report_for(GRADE_A))
    page.wait_for_selector("iframe.report", timeout=20_000)
    frame = page.locator("iframe.report")
    assert frame.get_attribute("title").startswith("Report of llama being scanned")
    page.frame_locator("iframe.report").locator("body").wait_for()
    page.wait_for_function(
        "(() => { const f = document.querySelector('iframe.report');"
        " return f.contentDocument && Math.abs(f.getBoundingClientRect().height -"
        " f.contentDocument.documentElement.scrollHeight) <= 2; })()", timeout=10_000)
    page.screenshot(path=str(ARTIFACTS / "ux-scan-finished.png"), full_page=True)
    assert refused == []


def test_the_app_the_public_pages_and_the_api_docs_link_to_each_other(browser, live_server):
    world = build_world()
    page, refused = logged_in_page(browser, live_server, world.owner)

    page.goto(f"{live_server.url}/teams/{world.team.slug}/")
    assert page.locator("link[rel=icon]").get_attribute("href").endswith("favicon.svg")
    page.click("nav.site-links >> text=Benchmarks")
    page.wait_for_url(f"{live_server.url}{reverse('benchmarks')}")
    assert page.locator("link[rel=icon]").count() == 1
    assert page.locator("a:has-text('API docs')").get_attribute("href") == "/api/docs/"
    page.click("text=Your dashboard")
    page.wait_for_load_state("load")
    assert page.locator("nav.site-links a:has-text('API docs')").count() == 1
    favicon = page.request.get(f"{live_server.url}{settings.STATIC_URL}favicon.svg")
    assert favicon.status == 200 and b"<svg" in favicon.body()
    assert refused == []
