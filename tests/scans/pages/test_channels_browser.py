"""The channels page in Chromium at 1,400 and 390 px: an admin adds an ntfy channel
through the form, presses "Send test", the stand-in receives it (tests/helpers/notify_services
.py) and the page shows the delivery as sent; a bad URL is an error at its field; nothing is
wider than the screen."""

from __future__ import annotations

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.conftest import build_world
from tests.helpers.browser import ARTIFACTS
from tests.helpers.notify_services import channel_urls, running_services
from tests.scans.pages.test_ux_browser import DESKTOP, PHONE, logged_in_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _width(page) -> tuple[int, int]:
    return tuple(page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]"))


def _fits(page) -> bool:
    """Nothing wider than the screen once the page has settled (loaded, styled, laid out): CI
    once measured 1,414 px at 1,400 the moment the form's error appeared, which no later look
    showed; an overflow that stays still fails, after 5 s."""
    page.wait_for_load_state("load")
    try:
        page.wait_for_function("document.documentElement.scrollWidth <= window.innerWidth",
                               timeout=5000)
    except PlaywrightTimeoutError:
        return False
    return True


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_an_admin_adds_a_channel_sends_a_test_and_sees_it_delivered(
    browser, live_server, settings, tmp_path, monkeypatch, width, eager_tasks
):
    world = build_world()
    with running_services(tmp_path) as services:
        settings.OUTBOUND_ALLOW = ["loopback"]
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(services.ca_path))
        page, refused = logged_in_page(browser, live_server, world.admin, width)
        page.goto(f"{live_server.url}/teams/{world.team.slug}/channels/")
        assert page.locator("h1").inner_text() == "Notification channels"
        assert page.locator("[data-kind=email] h2").inner_text() == "Email to owners and admins"
        page.get_by_role("link", name="Add a channel").click()

        page.select_option("#id_kind", "ntfy")
        page.fill("#id_name", "phone pager")
        page.fill("#id_url", "ntfy://10.9.9.9/secret-topic")  # refused: a private address
        page.get_by_role("button", name="Add channel").click()
        error = page.locator("[data-field=url] .error")
        assert "Not reachable from this site" in error.inner_text()
        # shown again in this answer only, to be fixed rather than retyped
        assert page.locator("#id_url").input_value() == "ntfy://10.9.9.9/secret-topic"
        assert _fits(page), _width(page)
        page.screenshot(path=str(ARTIFACTS / f"channel-form-error-{width}.png"), full_page=True)

        page.fill("#id_url", channel_urls(services.port)["ntfy"])
        page.get_by_role("button", name="Add channel").click()
        page.wait_for_selector("text=Channel phone pager added.")
        card = page.locator("section.channel", has_text="phone pager")
        assert "127.0.0.1" in card.inner_text() and "tokvera-alerts" not in card.inner_text()
        card.get_by_role("button", name="Send test").click()
        page.wait_for_selector("text=Test message sent to phone pager.")
        card = page.locator("section.channel", has_text="phone pager")
        row = card.locator("tr[data-delivery-status=sent]")
        assert "test message" in row.inner_text()
        assert _fits(page), _width(page)
        page.screenshot(path=str(ARTIFACTS / f"channels-page-{width}.png"), full_page=True)
    (message,) = services.of("ntfy")
    assert message.body["title"] == "[Tokvera] test message to phone pager"
    assert refused == []
