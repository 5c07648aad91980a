"""Single sign-on in a real browser (Chromium, loopback only): the login page's button, the
provider's redirect, and the team's pages behind it; the team settings' "require" box."""

from __future__ import annotations

import pytest

from accounts.models import Membership, Role
from tests.conftest import build_world
from tests.helpers.browser import ARTIFACTS
from tests.helpers.oidc_provider import running_provider

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_person_signs_in_with_the_provider_button_and_sees_their_team(browser, live_server,
                                                                        settings):
    world = build_world()
    with running_provider() as idp:
        settings.SSO_APP = idp.app()
        settings.SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"APPS": [settings.SSO_APP]}}
        settings.SSO_TEAM_ROLES = {"ml-platform": (world.team.slug, Role.MEMBER)}
        idp.claims = {"sub": "b-1", "email": "eve@acme.example", "email_verified": True,
                      "groups": ["ml-platform"]}
        refused: list[str] = []

        def loopback_only(route):
            if route.request.url.startswith((live_server.url, idp.url, "data:", "about:")):
                route.continue_()
            else:
                refused.append(route.request.url)
                route.abort()

        for width in (1400, 390):
            context = browser.new_context(viewport={"width": width, "height": 900})
            page = context.new_page()
            page.route("**/*", loopback_only)
            page.goto(f"{live_server.url}/login/")
            page.screenshot(path=str(ARTIFACTS / f"sso-login-{width}.png"), full_page=True)
            page.get_by_role("button", name="Log in with Acme ID").click()
            page.wait_for_url(f"{live_server.url}/**")
            page.goto(f"{live_server.url}/teams/{world.team.slug}/")
            assert "eve@acme.example" in page.content()
            assert world.team.name in page.content()
            context.close()
    eve = Membership.dangerously_unscoped.get(team=world.team, user__email="eve@acme.example")
    assert eve.role == Role.MEMBER and eve.from_sso
    assert refused == []
