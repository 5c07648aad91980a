"""One form per kind in Chromium at 1,400 and 390 px: the Slack form shows its URL field and
example, no signing secret, and a refused URL comes back in its field to be fixed; nothing is
wider than the screen."""

from __future__ import annotations

import pytest

from tests.conftest import build_world
from tests.helpers.browser import ARTIFACTS
from tests.scans.pages.test_channels_browser import _fits
from tests.scans.pages.test_ux_browser import DESKTOP, PHONE, logged_in_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_the_slack_form_shows_its_fields_and_keeps_a_refused_url(browser, live_server, settings, width):
    settings.OUTBOUND_ALLOW = []
    world = build_world()
    page, _ = logged_in_page(browser, live_server, world.admin, width)
    page.goto(f"{live_server.url}/teams/{world.team.slug}/channels/new?kind=slack")
    assert page.locator("#id_url").is_visible() and page.locator("#id_secret").count() == 0
    page.fill("#id_name", "ops")
    page.fill("#id_url", "https://discord.com/api/webhooks/1234/abcd")
    page.get_by_role("button", name="Add channel").click()
    page.wait_for_selector("text=not a Slack one")
    assert page.locator("#id_url").input_value() == "https://discord.com/api/webhooks/1234/abcd"
    assert _fits(page)
    page.screenshot(path=str(ARTIFACTS / f"channel-form-slack-{width}.png"), full_page=True)
