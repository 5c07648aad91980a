"""The maintenance page in Chromium: a writer adds a window through the form
at phone and desktop widths, nothing wider than the screen; a bad end shows its error at the
field; the endpoint page then lists the window. Screenshots: test-artifacts/maintenance-*.png."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.models import MaintenanceWindow
from tests.conftest import build_world
from tests.helpers.browser import ARTIFACTS
from tests.helpers.factories import make_endpoint
from tests.scans.pages.test_ux_browser import DESKTOP, PHONE, logged_in_page, no_horizontal_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_a_writer_adds_a_window_in_the_browser_and_the_pages_fit_the_screen(browser, live_server, width):
    world = build_world()
    endpoint = make_endpoint(world.team, name="a-rather-long-endpoint-name-in-the-lab")
    page, refused = logged_in_page(browser, live_server, world.owner, width)
    day = (timezone.now() + timedelta(days=2)).date().isoformat()  # within the page's 14 days
    page.goto(f"{live_server.url}{reverse('maintenance-create', args=[world.team.slug])}")

    page.fill("#id_name", "driver update")
    page.select_option("#id_endpoint", str(endpoint.public_id))
    page.check("input[name=kind][value=once]")
    page.fill("#id_starts_at", f"{day}T10:00")
    page.fill("#id_ends_at", f"{day}T09:00")  # before it starts
    page.select_option("#id_timezone", "Europe/Berlin")
    page.click("form.maintenance-form button[type=submit]")

    error = page.locator('[data-field="ends_at"] .error')
    assert "ends before it starts" in error.inner_text()
    page.screenshot(path=str(ARTIFACTS / f"maintenance-form-error-{width}.png"), full_page=True)
    scroll_width, viewport = no_horizontal_scroll(page)
    assert scroll_width <= viewport, f"the form is {scroll_width} px wide at {viewport} px"
    assert not MaintenanceWindow.dangerously_unscoped.filter(team=world.team).exists()

    page.fill("#id_ends_at", f"{day}T12:00")
    page.click("form.maintenance-form button[type=submit]")
    page.wait_for_url(f"{live_server.url}{reverse('team-maintenance', args=[world.team.slug])}")
    card = page.locator("section.maintenance-window")
    assert "driver update" in card.inner_text()
    assert f"once, {day} 10:00 to 12:00 (Europe/Berlin)" in card.inner_text()
    page.screenshot(path=str(ARTIFACTS / f"maintenance-list-{width}.png"), full_page=True)
    scroll_width, viewport = no_horizontal_scroll(page)
    assert scroll_width <= viewport, f"the list is {scroll_width} px wide at {viewport} px"

    page.goto(f"{live_server.url}{reverse('endpoint-detail', args=[endpoint.public_id])}")
    assert "driver update" in page.locator("#maintenance").inner_text()
    scroll_width, viewport = no_horizontal_scroll(page)
    assert scroll_width <= viewport
    assert refused == []
