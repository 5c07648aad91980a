"""The sign-in pages in a real browser (Playwright driving Debian's Chromium, offline, on
loopback): sign-up and login styled like the rest of the site and fitting a 390 px phone, and a
person signing up, following the verification mail and logging in.

Screenshots go to test-artifacts/ (accounts-*.png)."""

from __future__ import annotations

import re

import pytest
from django.core import mail

from tests.helpers.browser import ARTIFACTS, offline

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE, DESKTOP = 390, 1400
PASSWORD = "a long enough passphrase"


def _page(browser, live_server, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    return page, offline(page, live_server)


def _fits_and_is_styled(page) -> None:
    # Nothing wider than the screen, and the site's stylesheet applies (not browser defaults).
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    main = page.locator("main.account.entrance")
    assert main.evaluate("e => getComputedStyle(e).borderTopStyle") == "solid"
    submit = page.locator("main button[type=submit]").first
    assert submit.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(52, 81, 209)"
    for field in page.locator("main .field input:not([type=checkbox])").all():
        box = field.bounding_box()
        assert box["width"] >= 200 and box["x"] + box["width"] <= page.viewport_size["width"]


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_sign_up_and_login_pages_are_styled_and_fit(browser, live_server, width):
    page, refused = _page(browser, live_server, width)
    for path, name in (("/signup/", "signup"), ("/login/", "login")):
        page.goto(f"{live_server.url}{path}")
        _fits_and_is_styled(page)
        page.screenshot(path=str(ARTIFACTS / f"accounts-{name}-{width}.png"), full_page=True)
    assert page.locator("a", has_text="Forgot your password?").is_visible()
    assert not refused


def test_a_person_signs_up_verifies_and_logs_in(browser, live_server, settings):
    page, refused = _page(browser, live_server, PHONE)
    page.goto(f"{live_server.url}/login/")
    page.click("text=Create an account")
    page.fill("input[name=email]", "reader@example.test")
    page.fill("input[name=password1]", PASSWORD)
    page.fill("input[name=password2]", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{live_server.url}/confirm-email/")
    assert page.locator("main h1").inner_text().strip() == "Verify Your Email Address"

    link = re.search(r"https?://[^/\s]+(/confirm-email/[^/\s]+/)", mail.outbox[-1].body).group(1)
    page.goto(f"{live_server.url}{link}")
    _fits_and_is_styled(page)
    page.click("main button[type=submit]")
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=login]", "reader@example.test")
    page.fill("input[name=password]", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    assert page.locator("text=No team yet").is_visible()
    page.click("text=Create a team")
    page.fill("input[name=name]", "Readers")
    page.click("main button[type=submit]")
    page.wait_for_url(f"{live_server.url}/teams/readers/")
    assert not refused
