"""Teams in a real browser (Playwright driving Debian's Chromium, offline, on loopback): a
person creates a team, invites someone, sees the invitation listed, resends it (a new mail, the
old link dead), revokes it (the new link dead too); another invitee follows the mail's link,
chooses a password and lands in the team."""

from __future__ import annotations

import re

import pytest
from django.core import mail

from accounts.models import Invitation, Membership, Role
from tests.accounts import test_accounts_browser as accounts_browser
from tests.accounts.test_accounts_browser import OLD_PASSWORD, PASSWORD, PHONE, log_in, open_page
from tests.conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
# One Chromium for the module, and fresh rate limits per test (fixtures of test_accounts_browser).
browser = accounts_browser.browser
_fresh_rate_limits = accounts_browser._fresh_rate_limits

FITS = "document.documentElement.scrollWidth <= window.innerWidth"


def _link(message) -> str:
    return re.search(r"(/invites/[^/\s]+/)", message.body).group(1)


def _invite(page, email: str, role: str = "member") -> None:
    page.fill("main input[name=email]", email)
    page.select_option("main select[name=role]", role)
    page.click("main button:has-text('Send invitation')")
    page.wait_for_load_state()


def test_a_team_is_made_in_the_browser_and_its_invitation_is_listed_resent_and_revoked(
        browser, live_server):
    founder = make_user("founder")
    page, refused = open_page(browser, live_server, PHONE)
    log_in(page, live_server, founder.email, OLD_PASSWORD)
    page.wait_for_url(f"{live_server.url}/")
    page.click("header.topbar a:has-text('New team')")
    page.fill("input[name=name]", "Night Shift")
    page.click("main button[type=submit]")
    page.wait_for_url(f"{live_server.url}/teams/night-shift/")
    membership = Membership.dangerously_unscoped.get(user=founder)
    assert (membership.team.name, membership.role) == ("Night Shift", Role.OWNER)

    page.click("nav.subnav a:has-text('Members')")
    page.wait_for_url(f"{live_server.url}/teams/night-shift/members/")
    _invite(page, "Guest@Example.test", "admin")
    assert page.locator("main .flash", has_text="Invitation sent to Guest@Example.test").is_visible()
    row = page.locator("tr[data-invitation='guest@example.test']")
    assert row.locator("td").nth(1).inner_text() == "Admin"
    assert "valid until" in row.inner_text()
    assert page.evaluate(FITS)
    assert [m.to for m in mail.outbox] == [["guest@example.test"]]
    first = _link(mail.outbox[-1])

    row.locator("button:has-text('Resend')").click()
    page.wait_for_load_state()
    assert page.locator("main .flash", has_text="Invitation sent again to guest@example.test").is_visible()
    assert len(mail.outbox) == 2
    second = _link(mail.outbox[-1])
    assert second != first

    guest, guest_refused = open_page(browser, live_server, PHONE)
    guest.goto(f"{live_server.url}{first}")
    assert guest.locator("main h1").inner_text() == "Invitation not valid"
    guest.goto(f"{live_server.url}{second}")
    assert guest.locator("main h1").inner_text() == "Join Night Shift"

    row.locator("button:has-text('Revoke')").click()
    page.wait_for_load_state()
    assert page.locator("main .flash", has_text="Invitation of guest@example.test revoked").is_visible()
    assert page.locator("tr[data-invitation='guest@example.test']").count() == 0
    assert page.locator("main", has_text="No open invitations.").count() == 1
    assert not Invitation.dangerously_unscoped.filter(email="guest@example.test").exists()
    guest.goto(f"{live_server.url}{second}")
    assert guest.locator("main h1").inner_text() == "Invitation not valid"

    # Another invitee follows the link, chooses a password and is in the team.
    _invite(page, "newcomer@example.test")
    newcomer, newcomer_refused = open_page(browser, live_server, PHONE)
    newcomer.goto(f"{live_server.url}{_link(mail.outbox[-1])}")
    assert newcomer.evaluate(FITS)
    newcomer.fill("input[name=name]", "Nadia")
    newcomer.fill("input[name=new_password1]", PASSWORD)
    newcomer.fill("input[name=new_password2]", PASSWORD)
    newcomer.click("main button:has-text('Accept invitation')")
    newcomer.wait_for_url(f"{live_server.url}/teams/night-shift/")
    page.reload()
    assert page.locator("tr[data-member]", has_text="Nadia").is_visible()
    assert page.locator("main", has_text="No open invitations.").count() == 1
    assert not refused and not guest_refused and not newcomer_refused
