"""The public status page in Debian's Chromium (offline but for the live server), at 1,400 and
390 px: a down endpoint reads Down with its incident, 90 day cells share the width without
overflowing, another team's names never appear; and its settings page fits a phone too.
Screenshots go to test-artifacts/."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scans.models import Scan
from scans.status_pages.settings import page_of, save_settings
from tests.conftest import build_world, clear_cache
from tests.helpers.browser import ARTIFACTS, offline
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, GRADE_B, scan_at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"
WIDTHS = (1400, 390)
OVERFLOW = """() => [document.documentElement.scrollWidth, innerWidth,
  [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > innerWidth + 1)
    .slice(0, 5).map(e => e.tagName + '.' + e.className)]"""


def _world_with_a_down_endpoint():
    world = build_world()
    now = timezone.now()
    dead = make_endpoint(world.team, name="internal-gpu-7", interval_minutes=30)
    for hours in range(30, 1, -1):
        scan_at(dead, now - timedelta(hours=hours), GRADE_B)
    for minutes in (90, 60, 30, 0):
        scan = scan_at(dead, now - timedelta(minutes=minutes), GRADE_A)
        Scan.dangerously_unscoped.filter(pk=scan.pk).update(down=True, grade="", points=None)
    healthy = make_endpoint(world.team, name="staging", interval_minutes=60)
    for hours in range(50, 0, -1):
        scan_at(healthy, now - timedelta(hours=hours), GRADE_A)
    rival = make_endpoint(world.other_team, name="globex rival", interval_minutes=60)
    scan_at(rival, now - timedelta(hours=1), GRADE_A)
    save_settings(
        page_of(world.other_team),
        enabled=True,
        slug="globex-status",
        title="Globex status",
        shown=[(rival, "")],
    )
    page = save_settings(
        page_of(world.team),
        enabled=True,
        slug="example-status",
        title="Example Inc. service status",
        shown=[(dead, "Chat completions API"), (healthy, "Embeddings API")],
    )
    return world, page


def test_the_status_page_shows_a_down_endpoint_and_its_incident_at_both_widths(browser, live_server):
    clear_cache()
    world, page = _world_with_a_down_endpoint()
    for width in WIDTHS:
        tab = browser.new_page(viewport={"width": width, "height": 900})
        refused = offline(tab, live_server)
        tab.goto(f"{live_server.url}/status/{page.slug}/")
        service = tab.locator("[data-service-state=down]")
        assert "Chat completions API" in service.inner_text()
        assert service.locator("[data-state=down]").inner_text() == "Down"
        assert tab.locator("[data-service-state=up]").count() == 1
        assert service.locator(".cell").count() == 90
        incident = tab.locator("[data-incident]").first
        assert "Down since" in incident.inner_text() and "Chat completions API" in incident.inner_text()
        body = tab.locator("body").inner_text()
        assert body.lstrip().startswith("Example Inc. service status")  # no stray template text
        for secret in ("internal-gpu-7", "staging", world.team.name, "Globex", "globex rival"):
            assert secret not in body
        scroll, inner, past = tab.evaluate(OVERFLOW)
        assert scroll <= inner and not past, (width, past)
        # The cells keep a visible width even on a phone.
        assert service.locator(".cell").first.evaluate("c => c.getBoundingClientRect().width") >= 2
        tab.screenshot(path=str(ARTIFACTS / f"status-page-{width}.png"), full_page=True)
        assert not refused
        tab.close()


def test_the_settings_page_fits_a_phone_and_publishes_the_page(browser, live_server):
    clear_cache()
    world = build_world()
    endpoint = make_endpoint(world.team, name="a rather long endpoint name for a phone screen")
    scan_at(endpoint, timezone.now() - timedelta(minutes=10), GRADE_A)
    for width in WIDTHS:
        tab = browser.new_page(viewport={"width": width, "height": 900})
        offline(tab, live_server)
        tab.goto(f"{live_server.url}/login/")
        tab.fill("input[name=login]", world.owner.username)
        tab.fill("input[name=password]", PASSWORD)
        tab.click("button[type=submit]")
        tab.wait_for_url(f"{live_server.url}/teams/{world.team.slug}/")
        tab.goto(f"{live_server.url}/teams/{world.team.slug}/status-page/")
        scroll, inner, past = tab.evaluate(OVERFLOW.replace("body *", "main *"))
        assert scroll <= inner, (width, past)
        tab.check("input[name=enabled]")
        tab.check(f"input[name=show_{endpoint.public_id}]")
        tab.fill(f"input[name=name_{endpoint.public_id}]", "Public API")
        tab.click(".status-page-form button[type=submit]")
        tab.wait_for_selector("[data-public-url]")
        tab.screenshot(path=str(ARTIFACTS / f"status-page-settings-{width}.png"), full_page=True)
        public = tab.locator("[data-public-url]").get_attribute("href")
        tab.goto(public)
        assert "Public API" in tab.locator(".service h2").inner_text()
        tab.close()
