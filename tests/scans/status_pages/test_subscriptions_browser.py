"""Subscribing to a status page in a real browser (Chromium, offline, on loopback), at a
desktop's and a phone's width: the page's link, the form, the one answer, the mailed link."""

from __future__ import annotations

import re

import pytest
from django.core import mail

from scans.models import StatusPageSubscriber
from scans.status_pages import subscriptions
from scans.status_pages.settings import page_of, save_settings
from tests.conftest import build_world, clear_cache
from tests.helpers.browser import ARTIFACTS, offline
from tests.helpers.factories import make_endpoint

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [1400, 390])
def test_a_visitor_subscribes_from_the_page_and_confirms_from_the_mail(browser, live_server,
                                                                       monkeypatch, width):
    monkeypatch.setattr(subscriptions.mail_status_page_news, "delay",
                        lambda *args: subscriptions.mail_status_page_news(*args))
    world = build_world()
    status = page_of(world.team)
    save_settings(status, enabled=True, slug=status.slug, title="Acme status",
                  shown=[(make_endpoint(world.team), "Public API")])
    clear_cache()
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    refused = offline(page, live_server)
    page.goto(f"{live_server.url}/status/{status.slug}/")
    page.get_by_role("link", name="By email").click()
    page.get_by_label("Email", exact=True).fill("visitor@example.org")
    page.screenshot(path=str(ARTIFACTS / f"subscribe-{width}.png"), full_page=True)
    page.get_by_role("button", name="Subscribe").click()
    assert "If this address can be subscribed" in page.content()
    (confirmation,) = [m for m in mail.outbox if m.to == ["visitor@example.org"]]
    link = re.search(r"https?://\S+?(/status/\S+/confirm/\S+/)", confirmation.body).group(1)
    page.goto(f"{live_server.url}{link}")
    assert page.get_by_role("heading", name="Subscribed").is_visible()
    assert StatusPageSubscriber.dangerously_unscoped.get(
        status_page=status, email="visitor@example.org").confirmed_at is not None
    assert refused == []
    context.close()
