"""Shared browser-test helpers: Playwright driving Debian's Chromium (never a downloaded
browser), headless, and kept offline: every request not to the live server is refused.

Skipped with the reason when /usr/bin/chromium is missing, except under
TOKVERA_REQUIRE_SERVICES=1 (CI), where that is a failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connections

from tests.conftest import REQUIRE_SERVICES

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"  # the checkout's test-artifacts/
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]



@pytest.fixture
def browser(monkeypatch):
    if not CHROMIUM.exists():
        reason = "needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
        if REQUIRE_SERVICES:
            pytest.fail(f"CI requires the browser: {reason}")
        pytest.skip(reason)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if REQUIRE_SERVICES:
            pytest.fail("CI requires the browser: the playwright package is not installed")
        pytest.skip("needs the playwright package (pip install playwright)")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # between page steps are still synchronous and safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(exist_ok=True)
    # Playwright switches greenlets, and Django keeps its connections per context: close them
    # on both sides of the switch, or a connection is left open and the test database cannot
    # be dropped at the end of the session.
    connections.close_all()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
            connections.close_all()
    connections.close_all()


def offline(page, live_server) -> list[str]:
    """Refuse every request that is not to the live server; return what was refused."""
    refused: list[str] = []

    def route(route):
        if route.request.url.startswith(live_server.url) or route.request.url.startswith(
                ("data:", "about:")):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.route("**/*", route)
    return refused
