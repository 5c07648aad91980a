"""Incidents in a real browser (Chromium, offline, on loopback): a member acknowledges an open
incident and posts a public update from its page, at a desktop's and a phone's width, and the
public status page shows the update."""

from __future__ import annotations

import pytest

from scans.models import Incident
from scans.notify import incidents
from scans.status_pages.settings import page_of, save_settings
from tests.conftest import build_world, clear_cache
from tests.helpers.browser import ARTIFACTS
from tests.helpers.factories import make_endpoint
from tests.scans.pages.test_ux_browser import logged_in_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [1400, 390])
def test_a_member_acknowledges_and_posts_a_public_update_the_status_page_shows(
        browser, live_server, width):
    world = build_world()
    endpoint = make_endpoint(world.team, name="llama-70b internal")
    status = page_of(world.team)
    save_settings(status, enabled=True, slug=status.slug, title="Acme status",
                  shown=[(endpoint, "Public API")])
    incident = incidents.open_manual(world.team, "Provider outage", [endpoint],
                                     status="investigating", text="looking", public=False)
    page, refused = logged_in_page(browser, live_server, world.member, width)
    page.goto(f"{live_server.url}/teams/{world.team.slug}/incidents/")
    page.get_by_role("link", name="Provider outage").click()
    page.get_by_role("button", name="Acknowledge").click()
    assert f"by {world.member.email}" in page.locator("[data-acknowledged]").inner_text()
    page.get_by_label("Status", exact=True).select_option("identified")
    page.get_by_label("What is happening").fill("A rack lost power; traffic moves to the spare.")
    page.get_by_label("Show on the public status page").check()
    page.get_by_role("button", name="Post the update").click()
    assert page.locator("[data-status]").inner_text() == "Identified"
    page.screenshot(path=str(ARTIFACTS / f"incident-{width}.png"), full_page=True)

    clear_cache()
    page.goto(f"{live_server.url}/status/{status.slug}/")
    update = page.locator("[data-public-update]").first.inner_text()
    assert "A rack lost power" in update
    assert "llama-70b internal" not in page.content() and "Provider outage" not in page.content()
    assert Incident.dangerously_unscoped.get(pk=incident.pk).acknowledged_at is not None
    assert refused == []
