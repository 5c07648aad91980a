"""A pruned scan's page in a real browser: the sentence that the full report
was removed, the summary's tables, and nothing wider than a phone's or a desktop's screen.
Screenshots go to test-artifacts/ (pruned-scan-*.png)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.history import retention
from scans.models import CheckResult, Scan
from tests.conftest import build_world
from tests.helpers.browser import ARTIFACTS
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_C, scan_at
from tests.scans.pages.test_ux_browser import DESKTOP, PHONE, logged_in_page, no_horizontal_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_a_pruned_scan_says_what_was_removed_and_fits_the_screen(browser, live_server, width):
    world = build_world()
    endpoint = make_endpoint(world.team, name="llama kept for a year")
    scan = scan_at(endpoint, timezone.now() - timedelta(days=100), CAPPED_C)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(
        finished_at=timezone.now() - timedelta(days=100))
    CheckResult.dangerously_unscoped.filter(scan=scan).update(
        measured_at=timezone.now() - timedelta(days=100))
    assert retention.prune().scans == 1
    page, _ = logged_in_page(browser, live_server, world.owner, width)

    page.goto(f"{live_server.url}{reverse('scan-detail', args=[scan.public_id])}")

    card = page.locator("#report-pruned")
    assert "removed after 90 days" in card.inner_text()
    assert card.locator("tr[data-check]").count() == 10
    assert card.locator("tr[data-level]").count() == 2
    page.screenshot(path=str(ARTIFACTS / f"pruned-scan-{width}.png"))
    scroll_width, viewport = no_horizontal_scroll(page)
    assert scroll_width <= viewport, f"the scan page is {scroll_width} px wide at {viewport}"
