"""Shared browser-test helpers: Playwright driving a headless Chromium, kept offline: every
request not to the live server is refused.

Which Chromium, looked up once per session: $TOKVERA_CHROMIUM if set, else Debian's
/usr/bin/chromium, else Playwright's own build (installed by `playwright install chromium` the
first time, where the network allows it). With none, the browser tests are skipped with one
reason, except under TOKVERA_REQUIRE_SERVICES=1 (CI), where that is a failure.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connections

from tests.conftest import REQUIRE_SERVICES
from tests.helpers.paths import ROOT

SYSTEM_CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]



def _playwrights_chromium() -> str | None:
    """Playwright's own Chromium, installed once if missing; None where it cannot be had."""
    from playwright.sync_api import sync_playwright

    def installed() -> str | None:
        with sync_playwright() as playwright:
            path = playwright.chromium.executable_path
        return path if path and Path(path).exists() else None

    if (path := installed()) is not None:
        return path
    try:
        done = subprocess.run([sys.executable, "-m", "playwright", "install", "chromium"],
                              capture_output=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return installed() if done.returncode == 0 else None


@functools.cache
def chromium_path() -> tuple[str | None, str]:
    """(the Chromium to drive, or None; why there is none)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return None, "needs the playwright package (pip install playwright)"
    if chosen := os.environ.get("TOKVERA_CHROMIUM"):
        return (chosen, "") if Path(chosen).exists() else (
            None, f"TOKVERA_CHROMIUM={chosen} does not exist")
    if SYSTEM_CHROMIUM.exists():
        return str(SYSTEM_CHROMIUM), ""
    if (path := _playwrights_chromium()) is not None:
        return path, ""
    return None, ("needs a Chromium: apt-get install chromium, or `playwright install chromium`"
                  " (which could not download one here)")


@contextmanager
def launched_chromium():
    """A Chromium for Playwright's sync API, with Django set up to live beside it; fails in CI
    (skips elsewhere) without one."""
    executable, reason = chromium_path()
    if executable is None:
        if REQUIRE_SERVICES:
            pytest.fail(f"CI requires the browser: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright
    with pytest.MonkeyPatch.context() as patch:
        # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
        # between page steps are still synchronous and safe.
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        ARTIFACTS.mkdir(exist_ok=True)
        # Playwright switches greenlets, and Django keeps its connections per context: close
        # them on both sides of the switch, or a connection is left open and the test
        # database cannot be dropped at the end of the session.
        connections.close_all()
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            try:
                yield chromium
            finally:
                chromium.close()
                connections.close_all()
        connections.close_all()


@pytest.fixture
def browser():
    with launched_chromium() as chromium:
        yield chromium


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
