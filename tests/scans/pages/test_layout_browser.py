"""Pages that fit a phone, words that are never broken, and a chart of a new endpoint that a
person can read, in a real browser (Playwright driving Debian's Chromium, offline,
on loopback). The scan's report is a real one: `tokvera target` on loopback, scanned by the
worker's own path.

Screenshots go to test-artifacts/ (layout-*.png).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.grader.demo_server import TargetConfig, running_target
from scans.models import Scan, ScanTrigger
from scans.running import worker as scan_worker
from tests.conftest import build_world, free_port
from tests.helpers.browser import ARTIFACTS
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_C, GRADE_A, GRADE_B, scan_at
from tests.scans.pages.test_ux_browser import logged_in_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE, DESKTOP = 390, 1400

# Every element's box inside the viewport, except inside a container that scrolls sideways on
# purpose (a wide table in its card): those are declared by their computed overflow-x.
OVERFLOWING = """() => {
  const width = document.documentElement.clientWidth;
  const scrolls = el => { for (let p = el.parentElement; p; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX; if (o === 'auto' || o === 'scroll') return true; }
    return false; };
  const out = [];
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (!r.width || getComputedStyle(el).visibility === 'hidden') continue;
    if ((r.right > width + 0.5 || r.left < -0.5) && !scrolls(el))
      out.push(el.tagName.toLowerCase() + '.' + el.className + ' ' + Math.round(r.left) + '..' +
               Math.round(r.right));
  }
  return [document.documentElement.scrollWidth, innerWidth, out.slice(0, 8)];
}"""

# Each word of each table cell on one line: a Range over the word has one client rect per
# line it is drawn on. A hyphen is a place to break ("End-to-|end"), so it ends a word here.
BROKEN_WORDS = """(selector) => {
  const broken = [];
  for (const cell of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const re = /[^\\s-]+-?/g; let m;
      while ((m = re.exec(node.data))) {
        const range = document.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].filter(r => r.width > 0)
                                .map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""


def _real_scan(endpoint) -> Scan:
    scan = scan_worker.claim(
        Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.MANUAL).pk
    )
    assert scan_worker.execute(scan) == "succeeded"
    scan.refresh_from_db()
    return scan


@pytest.fixture
def site(settings):
    """A team with a healthy endpoint scanned for real, a dead port, an endpoint scanned every
    5 minutes for 40 minutes, and long names (made before the browser's event loop starts)."""
    settings.OUTBOUND_ALLOW = ["loopback"]
    world = build_world()
    with running_target(TargetConfig(ttft_ms=40, itl_ms=2, tokens=16, jitter_ms=20)) as (h, p):
        healthy = make_endpoint(
            world.team,
            name="Healthy llama endpoint",
            model="demo",
            base_url=f"http://{h}:{p}/v1",
            levels=[1, 4],
            requests_per_level=8,
        )
        scan = _real_scan(healthy)
    dead = make_endpoint(
        world.team,
        name="provisional dead port",
        levels=[1],
        requests_per_level=2,
        base_url=f"http://127.0.0.1:{free_port()}/v1",
    )
    _real_scan(dead)
    recent = make_endpoint(world.team, name="forty minutes of scans")
    now = timezone.now() - timedelta(minutes=1)
    for minutes in range(40, -1, -5):
        scan_at(recent, now - timedelta(minutes=minutes), (GRADE_A, GRADE_B, CAPPED_C)[minutes % 3])
    return {
        "world": world,
        "scan": scan,
        "recent": recent,
        "pages": {
            "dashboard": reverse("team-dashboard", args=[world.team.slug]),
            "endpoint": reverse("endpoint-detail", args=[recent.public_id]),
            "scan": reverse("scan-detail", args=[scan.public_id]),
            "report": reverse("scan-report-html", args=[scan.public_id]),
        },
    }


def test_no_page_is_wider_than_a_phone(site, browser, live_server):
    page, refused = logged_in_page(browser, live_server, site["world"].owner, PHONE)
    for name, path in site["pages"].items():
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("load")
        page.screenshot(path=str(ARTIFACTS / f"layout-{name}-{PHONE}.png"), full_page=True)
        scroll_width, viewport, outside = page.evaluate(OVERFLOWING)
        assert scroll_width <= viewport, f"{name} is {scroll_width} px wide at {viewport} px"
        assert outside == [], f"{name}: elements past the screen's edge: {outside}"
    # The scan page frames the report: the report itself fits its frame too.
    page.goto(f"{live_server.url}{site['pages']['scan']}")
    page.frame_locator("iframe.report").locator("table.checks").wait_for()
    frame = page.frame(url=re.compile("about:srcdoc")) or page.frames[1]
    scroll_width, viewport, outside = frame.evaluate(OVERFLOWING)
    assert scroll_width <= viewport and outside == [], (scroll_width, viewport, outside)
    # Its checks table shows every column on a phone: one check per block, each value named.
    first = frame.locator("table.checks tbody tr").first
    labels = first.locator("td[data-label]").evaluate_all(
        "tds => tds.filter(td => td.getBoundingClientRect().width > 0)"
        ".map(td => getComputedStyle(td, '::before').content)"
    )
    assert labels == ['"Pillar: "', '"Measures: "', '"Value: "', '"Pass: "', '"Warn: "', '"Status: "']
    assert refused == []


def test_no_word_is_broken_across_lines_on_a_desktop(site, browser, live_server):
    page, refused = logged_in_page(browser, live_server, site["world"].owner, DESKTOP)
    for name, selector in (
        ("dashboard", "table.endpoints td, table.endpoints th"),
        ("endpoint", "table td, table th"),
        ("report", "td, th"),
    ):
        page.goto(f"{live_server.url}{site['pages'][name]}")
        page.wait_for_load_state("load")
        page.screenshot(path=str(ARTIFACTS / f"layout-{name}-{DESKTOP}.png"), full_page=True)
        assert page.evaluate(BROKEN_WORDS, selector) == [], name
    # The report's headline table is whole, not cut at the page's edge.
    page.goto(f"{live_server.url}{site['pages']['report']}")
    assert page.locator("#headline .scroll").evaluate("s => s.scrollWidth <= s.clientWidth")
    assert refused == []


def test_a_chart_of_forty_minutes_opens_at_one_hour_and_reads_on_a_phone(site, browser, live_server):
    page, refused = logged_in_page(browser, live_server, site["world"].owner, PHONE)
    page.goto(f"{live_server.url}{site['pages']['endpoint']}")

    # The default range fits the data: 1 hour, not 30 days.
    assert page.locator("nav.ranges a[aria-current]").inner_text() == "1 hour"
    chart = page.locator("svg[data-chart=grades]")
    since = timezone.datetime.fromisoformat(chart.get_attribute("data-since"))
    assert timedelta(minutes=59) < timezone.now() - since < timedelta(minutes=62)
    # Round time ticks in the viewer's zone, named on the axis.
    ticks = chart.locator("g.axis-narrow text[data-tick=x]")
    labels = ticks.all_text_contents()
    assert len(labels) >= 3, labels
    # A tick at midnight names the day instead (an hour that crosses midnight has one).
    assert all(re.fullmatch(r"\d\d:[0-5][05]|[A-Z][a-z]{2} \d{1,2}", t) for t in labels), labels
    assert chart.locator("g.axis-narrow text.zone").text_content().startswith("times in ")
    # A check chart's value axis is round too (0 ms, 1,000 ms, …).
    ttft = page.locator("svg[data-check=ttft_p95_at_concurrency_1]")
    values = [
        float(re.sub(r"[^\d.]", "", t))
        for t in ttft.locator("g.axis-narrow text[data-tick=y]").all_text_contents()
    ]
    assert len(values) >= 3 and all(v % 50 == 0 for v in values), values
    # The axis text a phone shows is at least 10 px, from the font size and the SVG's scale.
    for svg in (chart, ttft):
        sizes = svg.evaluate("""svg => {
          const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
          return [...svg.querySelectorAll('text.tick, text.zone')]
            .filter(t => t.getBoundingClientRect().width > 0)
            .map(t => parseFloat(getComputedStyle(t).fontSize) * scale);
        }""")
        assert sizes and min(sizes) >= 10, sizes
    page.locator("#grades").screenshot(path=str(ARTIFACTS / "layout-grade-chart-390.png"))
    page.locator("#checks").screenshot(path=str(ARTIFACTS / "layout-check-charts-390.png"))
    assert refused == []
