"""/benchmarks and its methodology in a real browser: Playwright driving Debian's Chromium,
headless, on loopback. Screenshots go to test-artifacts/ (benchmarks*.png, methodology.png).

Uses the browser fixture of tests/scans/pages/test_browser.py (skipped with the reason when
/usr/bin/chromium or playwright is missing, a failure under TOKVERA_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from benchmarks.public import cache as public_cache
from tests.benchmarks.public.test_hand_built_network import EXPECTED_TIERS, EXPECTED_WINDOWS
from tests.helpers.browser import ARTIFACTS, offline
from tests.helpers.network import build_network

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_benchmarks_page_reads_right_in_a_real_browser(browser, live_server):  # noqa: F811
    now = timezone.now()
    build_network(now)
    built = public_cache.refresh(now)  # what the periodic task does

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    refused = offline(page, live_server)
    response = page.goto(f"{live_server.url}/benchmarks")

    assert response.status == 200
    assert response.headers["cache-control"] == "public, max-age=300"
    assert "set-cookie" not in response.headers
    assert "cookie" not in response.headers.get("vary", "").lower()
    assert page.title() == "Network benchmarks · Tokvera"
    assert page.locator("html").get_attribute("data-generated-at") == built["generated_at"]
    assert page.locator("h1").inner_text() == "Network benchmarks"
    assert page.locator("[data-banner]").count() == 0
    cards = page.locator("article[data-model-id]")
    assert cards.count() == 2
    alpha = page.locator("article[data-model-id=alpha-q4]")
    assert alpha.get_attribute("data-model-success-7d") == "0.8"
    assert page.locator("article[data-model-id=beta-q8]").get_attribute("data-model-success-7d") == ""
    for model_id, rows in EXPECTED_TIERS.items():
        for tier, hosts, p50, p95, tps, cells in rows:
            row = page.locator(f"article[data-model-id={model_id}] tr[data-tier={tier}]")
            assert row.is_visible()
            names = ("data-hosts", "data-ttft-p50-ms", "data-ttft-p95-ms", "data-tps-p50")
            assert [row.get_attribute(a) for a in names] == [hosts, p50, p95, tps]
            texts = [t.replace("\u00a0", " ") for t in row.locator("th, td").all_inner_texts()]
            assert texts == cells
    for model_id, rows in EXPECTED_WINDOWS.items():
        for name, *_, cells in rows:
            row = page.locator(f"article[data-model-id={model_id}] tr[data-window='{name}']")
            assert [t.replace("\u00a0", " ") for t in row.locator("th, td").all_inner_texts()] == cells
    # Dashes are visibly muted, not blank; the tables fit the card at this width.
    dash = page.locator("article[data-model-id=beta-q8] tr[data-tier=hardware] td.dash").first
    assert dash.inner_text() == "—"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.evaluate("document.cookie") == ""
    page.screenshot(path=str(ARTIFACTS / "benchmarks.png"), full_page=True)
    alpha.screenshot(path=str(ARTIFACTS / "benchmarks-card.png"))

    # The card's success figure is the same number /v1/slo writes.
    slo = json.loads(page.request.get(f"{live_server.url}/v1/slo").text())
    assert json.dumps(slo["models"][0]["windows"]["7d"]["success_rate"]) == "0.8"

    page.click("main >> text=How every figure is measured")
    page.wait_for_url(f"{live_server.url}/benchmarks/methodology")
    assert page.locator("h1").inner_text() == "How the network benchmarks are measured"
    assert page.locator("article.prose table").count() == 2
    assert page.locator("#cache-and-privacy").is_visible()
    page.screenshot(path=str(ARTIFACTS / "methodology.png"), full_page=True)

    phone = browser.new_page(viewport={"width": 390, "height": 844})
    offline(phone, live_server)
    phone.goto(f"{live_server.url}/benchmarks")
    assert phone.locator("article[data-model-id=alpha-q4] tr[data-tier=none]").is_visible()
    assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    phone.screenshot(path=str(ARTIFACTS / "benchmarks-phone.png"), full_page=True)

    assert refused == [], f"the page asked for something off this server: {refused}"


def test_a_quiet_network_shows_the_banner_in_the_browser(browser, live_server):  # noqa: F811
    from tests.helpers.network import make_catalog

    make_catalog("alpha-q4", context_len=8192)
    public_cache.refresh()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    offline(page, live_server)
    page.goto(f"{live_server.url}/benchmarks")
    banner = page.locator("[data-banner=sparse]")
    assert banner.is_visible()
    assert banner.locator("strong").inner_text() == "Not enough samples yet"
    page.screenshot(path=str(ARTIFACTS / "benchmarks-sparse.png"), full_page=True)
