"""The sign-in pages in a real browser (Playwright driving Debian's Chromium, offline, on
loopback): sign-up and login styled like the rest of the site and fitting a 390 px phone, and a
person signing up, following the verification mail and logging in.

Screenshots go to test-artifacts/ (accounts-*.png)."""

from __future__ import annotations

import re

import pytest
from django.core import mail

from tests.conftest import clear_cache, make_user
from tests.helpers.browser import ARTIFACTS, launched_chromium, offline

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE, DESKTOP = 390, 1400
PASSWORD = "a long enough passphrase"
OLD_PASSWORD = "correct horse battery staple"  # tests.conftest.make_user's


@pytest.fixture(scope="module")
def browser():
    """One Chromium for the whole module (tests.helpers.browser's fixture starts one per test);
    each test opens its own contexts, so no cookie is shared between tests. The other
    accounts browser modules import this fixture."""
    with launched_chromium() as chromium:
        yield chromium


@pytest.fixture(autouse=True)
def _fresh_rate_limits(browser):
    # allauth keeps its rate-limit counters (logins, codes, resets per address: every request
    # here comes from 127.0.0.1) in the cache, which outlives each test's database.
    clear_cache()
    yield
    # The test's pages are closed before its database goes, so none is still loading then.
    for context in browser.contexts:
        context.close()
    clear_cache()


def open_page(browser, live_server, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    return page, offline(page, live_server)


def _fits_and_is_styled(page) -> None:
    # Nothing wider than the screen, and the site's stylesheet applies (not browser defaults).
    # A page reached by a form's redirect may still be loading its stylesheet: wait for it.
    page.wait_for_load_state("load")
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
    page, refused = open_page(browser, live_server, width)
    for path, name in (("/signup/", "signup"), ("/login/", "login")):
        page.goto(f"{live_server.url}{path}")
        _fits_and_is_styled(page)
        page.screenshot(path=str(ARTIFACTS / f"accounts-{name}-{width}.png"), full_page=True)
    assert page.locator("a", has_text="Forgot your password?").is_visible()
    assert not refused


def test_a_person_signs_up_verifies_and_logs_in(browser, live_server, settings):
    page, refused = open_page(browser, live_server, PHONE)
    page.goto(f"{live_server.url}/login/")
    page.click("text=Create an account")
    page.fill("input[name=email]", "reader@example.test")
    page.fill("input[name=password1]", PASSWORD)
    page.fill("input[name=password2]", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{live_server.url}/confirm-email/")
    assert page.locator("main h1").inner_text().strip() == "Enter Email Verification Code"
    _fits_and_is_styled(page)

    # The mail's code, typed in the browser that signed up, verifies the address and logs in.
    code = re.search(r"^([A-Z0-9]{4}-[A-Z0-9]{4})$", mail.outbox[-1].body, re.MULTILINE).group(1)
    page.fill("input[name=code]", code)
    page.click("main button:has-text('Confirm')")
    page.wait_for_url(f"{live_server.url}/")
    assert page.locator("text=No team yet").is_visible()
    page.click("text=Create a team")
    page.fill("input[name=name]", "Readers")
    page.click("main button[type=submit]")
    page.wait_for_url(f"{live_server.url}/teams/readers/")
    assert not refused


def log_in(page, live_server, login: str, password: str) -> None:
    """The login form, filled and sent; where it leads is the caller's to check."""
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", password)
    page.click("main button[type=submit]")


def log_out(page, live_server) -> None:
    """The top bar's "Log out" (a POST), back at the login page."""
    page.click("header.topbar button:has-text('Log out')")
    page.wait_for_url(f"{live_server.url}/login/")


def test_a_forgotten_password_is_reset_from_the_mail_and_only_the_new_one_logs_in(
        browser, live_server):
    user = make_user("forgetful")
    page, refused = open_page(browser, live_server, PHONE)
    page.goto(f"{live_server.url}/login/")
    page.click("text=Forgot your password?")
    page.wait_for_url(f"{live_server.url}/password/reset/")
    _fits_and_is_styled(page)
    page.fill("input[name=email]", user.email)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{live_server.url}/password/reset/done/")
    assert [m.to for m in mail.outbox] == [[user.email]]

    link = re.search(r"https?://[^/\s]+(/password/reset/key/\S+/)", mail.outbox[-1].body).group(1)
    page.goto(f"{live_server.url}{link}")
    _fits_and_is_styled(page)
    page.fill("input[name=password1]", PASSWORD)
    page.fill("input[name=password2]", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{live_server.url}/password/reset/key/done/")
    # The link is spent: opened again, it no longer offers a new password.
    page.goto(f"{live_server.url}{link}")
    assert page.locator("input[name=password1]").count() == 0

    log_in(page, live_server, user.email, OLD_PASSWORD)
    assert page.url == f"{live_server.url}/login/"
    assert page.locator("main .error, main .flash.error, main .errorlist").count() >= 1
    log_in(page, live_server, user.email, PASSWORD)
    page.wait_for_url(f"{live_server.url}/")
    assert not refused
