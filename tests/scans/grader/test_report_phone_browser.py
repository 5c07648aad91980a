"""report.html on a 390 px phone, in a real browser (Playwright + Debian's Chromium,
opened from disk, every network request refused): the charts' text reads at 10 px or more once
the SVGs are scaled to the screen, no label sits on another, and nothing is wider than the
screen. The report is a real one: `tokvera scan` against `tokvera target` on loopback, written
by the CLI (surface "cli") and rendered again as the site serves it (surface "site").

Screenshots go to test-artifacts/ (report-phone-*.png).
"""

from __future__ import annotations

import json

import pytest

from scans.grader.demo_server import TargetConfig, running_target
from scans.grader.report_html import render_html
from tests.helpers.browser import ARTIFACTS
from tokvera_site.cli import main

pytestmark = pytest.mark.browser

PHONE = 390
MIN_TEXT_PX = 10

# Every chart text's font size as drawn: its computed size times the SVG's scale (the shown
# width over the viewBox's), for the texts that are shown; and the texts of one SVG (ticks,
# axis titles, legend, marker labels) whose boxes overlap another's.
CHART_TEXT = """() => {
  const found = [];
  for (const svg of document.querySelectorAll('.chart svg')) {
    const box = svg.getBoundingClientRect();
    const scale = box.width / svg.viewBox.baseVal.width;
    const texts = [...svg.querySelectorAll('text')].filter(t => t.getBoundingClientRect().width > 0);
    const sizes = texts.map(t => parseFloat(getComputedStyle(t).fontSize) * scale);
    const boxes = texts.map(t => [t.textContent, t.getBoundingClientRect()]);
    const overlaps = [];
    boxes.forEach(([s, a], i) => boxes.slice(i + 1).forEach(([t, b]) => {
      if (a.left < b.right - 0.5 && b.left < a.right - 0.5
          && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5)
        overlaps.push(s + ' / ' + t);
    }));
    found.push({chart: svg.getAttribute('class') || svg.closest('.chart').id,
                right: box.right, min: Math.min(...sizes), count: sizes.length, overlaps});
  }
  return found;
}"""


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """A real scan's report.html as the CLI writes it and as the site renders it."""
    out = tmp_path_factory.mktemp("report")
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8, jitter_ms=3)) as (h, p):
        assert main(["scan", f"http://{h}:{p}/v1", "--model", "demo", "--concurrency", "1,4",
                     "--requests", "8", "--timeout", "5", "--out", str(out / "r"),
                     "--quiet"]) == 0
    report = json.loads((out / "r" / "report.json").read_text())
    site = out / "site.html"
    site.write_text(render_html(report, surface="site"), encoding="utf-8")
    # A big server's throughput: five-digit tick labels ("15,000") beside the axis title.
    for level in report["levels"]:
        level["output_throughput"]["per_s"] = 3000.0 * level["concurrency"]
    fast = out / "fast.html"
    fast.write_text(render_html(report, surface="site"), encoding="utf-8")
    return {"cli": out / "r" / "report.html", "site": site, "fast": fast}


@pytest.mark.parametrize("surface", ["cli", "site", "fast"])
def test_report_charts_read_on_a_phone_and_nothing_is_wider_than_it(reports, browser, surface):
    page = browser.new_page(viewport={"width": PHONE, "height": 844})
    requested: list[str] = []

    def refuse_the_network(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            requested.append(route.request.url)
            route.abort()

    page.route("**/*", refuse_the_network)
    page.goto(reports[surface].as_uri())

    scroll_width, inner_width = page.evaluate(
        "() => [document.documentElement.scrollWidth, innerWidth]")
    assert scroll_width <= inner_width == PHONE
    charts = page.evaluate(CHART_TEXT)
    # The two performance charts and one TTFT histogram per level.
    assert len(charts) >= 4, charts
    for chart in charts:
        assert chart["count"] >= 4, chart  # ticks and titles are drawn, not hidden
        assert chart["min"] >= MIN_TEXT_PX, chart
        assert chart["right"] <= PHONE, chart
        assert chart["overlaps"] == [], chart
    page.locator("#headline").screenshot(path=str(ARTIFACTS / f"report-phone-{surface}.png"))
    page.locator(".charts").first.screenshot(
        path=str(ARTIFACTS / f"report-phone-{surface}-histograms.png"))
    assert requested == []
