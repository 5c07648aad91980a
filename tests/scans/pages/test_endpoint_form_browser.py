"""The endpoint form in a real browser (Playwright driving Debian's Chromium, offline, on
loopback): on a 390 px phone nothing is wider than the screen, the target comes first with the
rest folded under "advanced", and "Test connection" fills the model list from the server's
/models without a page load; the endpoint it saves opens on its one empty state.

Screenshots go to test-artifacts/ (form-*.png)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client

from scans.grader.demo_server import MODEL_ID, TargetConfig, running_target
from scans.models import Endpoint
from tests.conftest import build_world
from tests.helpers.browser import ARTIFACTS, offline

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE, DESKTOP = 390, 1400


def _page(browser, live_server, user, width: int):
    client = Client()
    client.force_login(user)
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": live_server.url,
            }
        ]
    )
    page = context.new_page()
    return page, offline(page, live_server)


def _widths(page) -> tuple[int, int]:
    return tuple(page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]"))


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_the_form_fits_and_test_connection_fills_the_model_list(browser, live_server, settings, width):
    settings.OUTBOUND_ALLOW = ["loopback"]
    world = build_world()
    page, refused = _page(browser, live_server, world.member, width)
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=4)) as (host, port):
        page.goto(f"{live_server.url}/teams/{world.team.slug}/endpoints/new")
        assert page.title().startswith("Add an endpoint")
        scroll, inner = _widths(page)
        assert scroll <= inner, f"the form is {scroll} px wide in a {inner} px window"
        assert not page.locator("details.advanced").evaluate("d => d.open")
        assert page.locator("details.advanced input[name=levels_text]").is_hidden()

        page.fill("input[name=name]", "llama on loopback")
        page.fill("input[name=base_url]", f"http://{host}:{port}/v1")
        url_before = page.url
        page.click("button[data-test-connection]")
        result = page.locator(".connection-result[data-connection=ok]")
        result.wait_for(timeout=30_000)

        assert page.url == url_before  # no page load: the fragment went into the form
        assert "Reachable." in result.inner_text()
        options = page.locator("datalist#server-models option")
        assert [options.nth(i).get_attribute("value") for i in range(options.count())] == [MODEL_ID]
        assert page.input_value("input[name=model]") == MODEL_ID  # none typed: the first
        scroll, inner = _widths(page)
        assert scroll <= inner, f"with the result the form is {scroll} px wide"
        page.screenshot(path=str(ARTIFACTS / f"form-tested-{width}.png"), full_page=True)

        page.fill("input[name=model]", "")
        page.click(f"button[name=pick_model][value='{MODEL_ID}']")  # picked from the list
        page.locator(".connection-result[data-connection=ok]").wait_for(timeout=30_000)
        assert page.input_value("input[name=model]") == MODEL_ID

        page.click(".form-actions button[type=submit]")
        page.wait_for_url("**/endpoints/*/")
    endpoint = Endpoint.dangerously_unscoped.get(team=world.team)
    assert endpoint.model == MODEL_ID and endpoint.name == "llama on loopback"
    assert page.locator("#first-scan").count() == 1
    scroll, inner = _widths(page)
    assert scroll <= inner, f"the new endpoint's page is {scroll} px wide"
    page.screenshot(path=str(ARTIFACTS / f"form-new-endpoint-{width}.png"), full_page=True)
    assert refused == []


def test_enter_in_a_field_saves_and_an_error_in_advanced_opens_it(browser, live_server, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    world = build_world()
    page, _ = _page(browser, live_server, world.member, PHONE)
    page.goto(f"{live_server.url}/teams/{world.team.slug}/endpoints/new")
    page.fill("input[name=name]", "typed and entered")
    page.fill("input[name=base_url]", "http://127.0.0.1:9/v1")
    page.fill("input[name=model]", "m")
    page.evaluate("document.querySelector('details.advanced').open = true")
    page.fill("input[name=levels_text]", "4, 16")  # must start at 1
    page.press("input[name=model]", "Enter")  # saves, as it did before the test button came first
    page.wait_for_load_state()
    assert "Not saved" in page.content()
    assert page.locator("details.advanced").evaluate("d => d.open")  # the error is in there
    assert page.locator("[data-field=levels_text] .error").is_visible()
    assert not Endpoint.dangerously_unscoped.filter(team=world.team).exists()
