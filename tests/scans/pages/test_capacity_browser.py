"""Capacity within the SLO in a real browser: the endpoint page's sentence and trend
chart and the dashboard's capacity beside the grade, at a phone's and a desktop's width, with
no sideways scrolling. Screenshots go to test-artifacts/ (capacity-*.png)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.conftest import build_world
from tests.helpers.browser import ARTIFACTS
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import scan_at
from tests.scans.pages.test_capacity_page import AT_HIGHEST, MET, NONE_MET, searched_scan
from tests.scans.pages.test_ux_browser import DESKTOP, PHONE, logged_in_page, no_horizontal_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_the_capacity_reads_and_fits_on_a_phone_and_a_desktop(browser, live_server, width):
    from django.utils import timezone

    world = build_world()
    endpoint = make_endpoint(
        world.team,
        name="llama with six slots",
        capacity_search=True,
        slo_ttft_p95_ms=80.0,
        capacity_alert_below=8,
    )
    for hours, capacity in (
        (30, MET),
        (20, {**MET, "concurrency": 9}),
        (12, NONE_MET),
        (6, {**MET, "concurrency": 7}),
        (2, MET),
    ):
        searched_scan(endpoint, capacity, hours_ago=hours)
    other = make_endpoint(world.team, name="never searched")
    scan_at(other, timezone.now() - timezone.timedelta(hours=1))
    bounded = make_endpoint(world.team, name="roomy", capacity_search=True, slo_error_rate=0.01)
    searched_scan(bounded, AT_HIGHEST)
    page, refused = logged_in_page(browser, live_server, world.owner, width)

    page.goto(f"{live_server.url}{reverse('endpoint-detail', args=[endpoint.public_id])}?range=7d")
    section = page.locator("#capacity")
    assert "Serves up to 6 concurrent streams within its SLO." in section.inner_text()
    assert section.locator("svg[data-chart='capacity']").is_visible()
    section.screenshot(path=str(ARTIFACTS / f"capacity-endpoint-{width}.png"))
    scroll_width, viewport = no_horizontal_scroll(page)
    assert scroll_width <= viewport, f"the endpoint page is {scroll_width} px wide at {viewport}"

    page.goto(f"{live_server.url}{reverse('team-dashboard', args=[world.team.slug])}")
    row = page.locator(f"tr[data-endpoint='{endpoint.public_id}']")
    assert "up to 6 streams within the SLO" in row.inner_text()
    assert (
        "≥ 256 streams within the SLO"
        in page.locator(f"tr[data-endpoint='{bounded.public_id}']").inner_text()
    )
    page.screenshot(path=str(ARTIFACTS / f"capacity-dashboard-{width}.png"), full_page=True)
    scroll_width, viewport = no_horizontal_scroll(page)
    assert scroll_width <= viewport, f"the dashboard is {scroll_width} px wide at {viewport}"
    assert refused == []
