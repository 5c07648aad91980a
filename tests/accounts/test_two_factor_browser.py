"""Two-factor authentication in a real browser (Playwright driving Debian's Chromium, offline,
on loopback): a person signs up, sets up an authenticator app from the secret the page shows
(its codes computed by pyotp, as an app would), logs in with a code and with a recovery code
(once); a security key registered and used through Chromium's own WebAuthn stack (a DevTools
virtual authenticator: CTAP2, built in, with user verification); and a team that requires
two-factor sending a member without it to set it up.

A TOTP code is good for its 30-second window only, and allauth refuses one already used in it.
The steps that type a code hold the clock still (time_machine, which the live server's thread
shares), so no window ends between computing the code and the server checking it on a slow
machine; logging in again moves the clock past the window instead of waiting for it."""

from __future__ import annotations

import re
from datetime import timedelta

import pyotp
import pytest
import time_machine
from allauth.mfa.models import Authenticator
from allauth.mfa.totp.internal.auth import TOTP
from django.core import mail
from django.utils import timezone

from accounts.models import Team
from tests.accounts import test_accounts_browser as accounts_browser
from tests.accounts.test_accounts_browser import OLD_PASSWORD, PASSWORD, PHONE, log_in, log_out, open_page
from tests.conftest import build_world, make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
# One Chromium for the module, and fresh rate limits per test (fixtures of test_accounts_browser).
browser = accounts_browser.browser
_fresh_rate_limits = accounts_browser._fresh_rate_limits

FITS = "document.documentElement.scrollWidth <= window.innerWidth"


def _clock_held(ahead_s: int = 0):
    """The clock stopped `ahead_s` seconds from now (31: the next TOTP window)."""
    return time_machine.travel(timezone.now() + timedelta(seconds=ahead_s), tick=False)


def _another_code(code: str, step: int = 0) -> str:
    """A six-digit code that is not `code`."""
    return f"{(int(code) + 1 + step) % 10**6:06d}"


def _sign_up(page, live_server, email: str) -> None:
    page.goto(f"{live_server.url}/signup/")
    page.fill("input[name=email]", email)
    page.fill("input[name=password1]", PASSWORD)
    page.fill("input[name=password2]", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{live_server.url}/confirm-email/")
    # The mail's code, typed in this browser: the address is verified and the account logged in.
    code = re.search(r"^([A-Z0-9]{4}-[A-Z0-9]{4})$", mail.outbox[-1].body, re.MULTILINE).group(1)
    page.fill("input[name=code]", code)
    page.click("main button:has-text('Confirm')")
    page.wait_for_url(f"{live_server.url}/")


def _confirm_password_if_asked(page, password: str) -> None:
    # allauth asks for the password again before a two-factor change unless the login was
    # recent; either is right, and the page then goes on to the set-up.
    if "/reauthenticate/" in page.url:
        page.fill("input[name=password]", password)
        page.click("main button[type=submit]")


def _activate_totp(page, live_server, password: str) -> tuple[pyotp.TOTP, list[str]]:
    """From the two-factor page: the authenticator app set up with the secret the page shows;
    returns the app and the recovery codes the next page shows."""
    page.goto(f"{live_server.url}/2fa/")
    page.click("main a:has-text('Activate')")
    _confirm_password_if_asked(page, password)
    page.wait_for_url(f"{live_server.url}/2fa/totp/activate/")
    assert page.evaluate(FITS)
    assert page.locator("main img.qr").is_visible()
    # The secret, for an app that takes it typed or pasted: a double click selects all of it
    # (a disabled field could be neither selected nor copied).
    secret = page.locator("#authenticator_secret")
    secret.dblclick(timeout=5000)
    assert secret.evaluate("e => e.value.slice(e.selectionStart, e.selectionEnd)") == secret.input_value()
    app = pyotp.TOTP(secret.input_value())
    with _clock_held():
        page.fill("input[name=code]", app.now())
        page.click("main button[type=submit]")
        page.wait_for_url(f"{live_server.url}/2fa/recovery-codes/")
    codes = page.input_value("textarea#recovery_codes").split()
    assert len(codes) == 10
    return app, codes


def _code_step(page, live_server, code: str) -> None:
    page.wait_for_url(f"{live_server.url}/2fa/authenticate/")
    page.fill("input[name=code]", code)
    page.click("main button[type=submit]:has-text('Sign In')")


def test_a_person_signs_up_sets_up_an_app_and_logs_in_with_its_code_and_a_recovery_code_once(
        browser, live_server):
    page, refused = open_page(browser, live_server, PHONE)
    _sign_up(page, live_server, "careful@example.test")
    app, codes = _activate_totp(page, live_server, PASSWORD)
    page.goto(f"{live_server.url}/2fa/")
    assert page.locator("text=Authentication using an authenticator app is active.").is_visible()
    log_out(page, live_server)

    with _clock_held(ahead_s=31):
        log_in(page, live_server, "careful@example.test", PASSWORD)
        page.wait_for_url(f"{live_server.url}/2fa/authenticate/")
        # The password alone is not a login: another page leads back to the code step.
        page.goto(f"{live_server.url}/profile/")
        assert page.url.startswith(f"{live_server.url}/2fa/authenticate/")
        _code_step(page, live_server, _another_code(app.now()))
        assert page.url == f"{live_server.url}/2fa/authenticate/"
        assert page.locator("main .error").count() == 1
        _code_step(page, live_server, app.now())
        page.wait_for_url(f"{live_server.url}/")
        log_out(page, live_server)

    for attempt in ("first", "again"):
        log_in(page, live_server, "careful@example.test", PASSWORD)
        _code_step(page, live_server, codes[0])
        if attempt == "first":
            page.wait_for_url(f"{live_server.url}/")
            log_out(page, live_server)
    # The used recovery code is refused the second time; the next one still works.
    assert page.url == f"{live_server.url}/2fa/authenticate/"
    assert page.locator("main .error").count() == 1
    _code_step(page, live_server, codes[1])
    page.wait_for_url(f"{live_server.url}/")
    assert not refused


@pytest.fixture
def security_key(browser, live_server):
    """A page whose tab holds a virtual authenticator: Chromium's WebAuthn stack answering as a
    built-in (platform) authenticator with user verification, through DevTools."""
    page, refused = open_page(browser, live_server, PHONE)
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable", {"enableUI": False})
    added = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {
        "protocol": "ctap2", "transport": "internal", "hasResidentKey": True,
        "hasUserVerification": True, "isUserVerified": True}})
    yield page, refused, cdp, added["authenticatorId"]
    cdp.send("WebAuthn.removeVirtualAuthenticator", {"authenticatorId": added["authenticatorId"]})


def test_a_security_key_is_registered_on_the_two_factor_page_and_logs_in(
        security_key, live_server):
    page, refused, cdp, authenticator_id = security_key
    user = make_user("keyholder")
    log_in(page, live_server, user.email, OLD_PASSWORD)
    page.wait_for_url(f"{live_server.url}/")
    page.goto(f"{live_server.url}/2fa/")
    page.locator("section.panel", has_text="Security Keys").locator("a:has-text('Add')").click()
    _confirm_password_if_asked(page, OLD_PASSWORD)
    page.wait_for_url(f"{live_server.url}/2fa/webauthn/add/")
    assert page.evaluate(FITS)
    page.fill("input[name=name]", "Laptop")
    page.click("#mfa_webauthn_add")
    # The first key comes with recovery codes (a key can be lost).
    page.wait_for_url(f"{live_server.url}/2fa/recovery-codes/")
    key = Authenticator.objects.get(user=user, type=Authenticator.Type.WEBAUTHN)
    assert key.wrap().name == "Laptop" and key.last_used_at is None
    stored = cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator_id})
    assert len(stored["credentials"]) == 1
    page.goto(f"{live_server.url}/2fa/webauthn/")
    assert page.locator("main td", has_text="Laptop").is_visible()
    log_out(page, live_server)

    log_in(page, live_server, user.email, OLD_PASSWORD)
    page.wait_for_url(f"{live_server.url}/2fa/authenticate/")
    page.click("#mfa_webauthn_authenticate")
    page.wait_for_url(f"{live_server.url}/")
    key.refresh_from_db()
    assert key.last_used_at is not None
    used = cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator_id})
    assert used["credentials"][0]["signCount"] > stored["credentials"][0]["signCount"]
    assert not refused


def test_a_team_that_requires_two_factor_sends_a_member_without_it_to_set_it_up(
        browser, live_server):
    world = build_world()
    secret = pyotp.random_base32()
    TOTP.activate(world.owner, secret)
    owner_app = pyotp.TOTP(secret)

    owner, refused_owner = open_page(browser, live_server, PHONE)
    log_in(owner, live_server, world.owner.email, OLD_PASSWORD)
    with _clock_held():
        _code_step(owner, live_server, owner_app.now())
        owner.wait_for_url(f"{live_server.url}/teams/{world.team.slug}/")
    owner.goto(f"{live_server.url}/teams/{world.team.slug}/settings/")
    owner.check("input[name=require_two_factor]")
    owner.click("main button:has-text('Save')")
    owner.wait_for_load_state()
    assert Team.dangerously_unscoped.get(pk=world.team.pk).require_two_factor

    member, refused_member = open_page(browser, live_server, PHONE)
    log_in(member, live_server, world.member.email, OLD_PASSWORD)
    member.wait_for_url(f"{live_server.url}/2fa/")
    assert member.locator(f"text={world.team.name} requires two-factor authentication").is_visible()
    member.goto(f"{live_server.url}/teams/{world.team.slug}/")
    assert member.url == f"{live_server.url}/2fa/"
    _activate_totp(member, live_server, OLD_PASSWORD)
    member.goto(f"{live_server.url}/teams/{world.team.slug}/")
    assert member.url == f"{live_server.url}/teams/{world.team.slug}/"
    assert member.locator("main h1").is_visible()
    assert not refused_owner and not refused_member


def test_two_factor_codes_typed_in_the_browser_are_limited_like_passwords(browser, live_server):
    user = make_user("guessed")
    secret = pyotp.random_base32()
    TOTP.activate(user, secret)
    page, refused = open_page(browser, live_server, PHONE)
    log_in(page, live_server, user.email, OLD_PASSWORD)
    right = pyotp.TOTP(secret).now()
    for i in range(10):
        _code_step(page, live_server, _another_code(right, i))
    _code_step(page, live_server, right)
    assert page.url == f"{live_server.url}/2fa/authenticate/"
    assert page.locator("main", has_text="Too many").count() == 1
    assert not refused


def test_wrong_passwords_when_asked_again_count_like_wrong_logins(browser, live_server):
    # The password asked again before a two-factor change is a sign-in path too: axes counts
    # its failures with the login's, per account, and the lock then holds for both.
    user = make_user("forgetful")
    page, refused = open_page(browser, live_server, PHONE)
    log_in(page, live_server, user.email, OLD_PASSWORD)
    page.wait_for_url(f"{live_server.url}/")
    page.goto(f"{live_server.url}/reauthenticate/")
    statuses = []
    for i in range(10):  # a wrong password answers the same form again
        page.fill("input[name=password]", f"not it {i}")
        with page.expect_response(f"{live_server.url}/reauthenticate/") as answer:
            page.click("main button[type=submit]")
        statuses.append(answer.value.status)
    assert statuses == [200] * 9 + [429]
    assert page.locator("[data-locked-out]").is_visible()

    elsewhere, refused_elsewhere = open_page(browser, live_server, PHONE)
    log_in(elsewhere, live_server, user.email, OLD_PASSWORD)
    assert elsewhere.locator("[data-locked-out]").is_visible()
    assert not refused and not refused_elsewhere
