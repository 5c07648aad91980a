"""report.html in a real browser (Playwright + Debian's Chromium), opened from disk with every
network request refused: the headline table and both performance charts are there."""

from __future__ import annotations

import pytest

from scans.grader.demo_server import TargetConfig, running_target
from tests.helpers.browser import ARTIFACTS
from tokvera_site.cli import main

pytestmark = pytest.mark.browser


@pytest.fixture
def scanned(tmp_path):
    """A real scan's report directory (made before the browser's event loop starts)."""
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8, jitter_ms=3)) as (h, p):
        assert main(["scan", f"http://{h}:{p}/v1", "--model", "demo", "--concurrency", "1,4",
                     "--requests", "8", "--timeout", "5", "--out", str(tmp_path / "r"),
                     "--quiet"]) == 0
    return tmp_path / "r"


def test_report_html_opens_with_the_headline_table_and_both_charts_offline(scanned, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requested: list[str] = []

    def refuse_the_network(route):
        if not route.request.url.startswith("file://"):
            requested.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    page.route("**/*", refuse_the_network)
    page.goto((scanned / "report.html").as_uri())

    table = page.locator("#headline table.headline")
    assert table.is_visible()
    header = table.locator("thead").inner_text()
    for column in ("TTFT p50", "End-to-end p95", "Requests/s", "Output"):
        assert column in header
    rows = table.locator("tbody tr")
    assert rows.count() == 2
    assert "tokens/s" in rows.nth(1).locator('[data-col="output_per_s"]').inner_text()

    throughput = page.locator("#chart-throughput svg")
    ttft = page.locator("#chart-ttft svg")
    assert throughput.is_visible() and ttft.is_visible()
    assert throughput.locator("circle").count() == 2           # one point per level
    assert ttft.locator("polyline.series-p50").count() == 1
    assert ttft.locator("polyline.series-p95").count() == 1
    # The headline section comes before the checks.
    assert page.evaluate("""() => {
        const h = document.querySelector('#headline'), c = [...document.querySelectorAll('h2')]
            .find(e => e.textContent.trim() === 'Checks');
        return !!(h.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING);
    }""")
    markers = page.locator("svg.chart-ttft-histogram line.marker")
    assert {markers.nth(i).get_attribute("class") for i in range(markers.count())} >= {
        "marker marker-p50", "marker marker-p95", "marker marker-p99"}
    page.screenshot(path=str(ARTIFACTS / "report-headline.png"), full_page=True)
    assert requested == []
