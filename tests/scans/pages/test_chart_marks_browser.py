"""The endpoint page's charts at 1,400 and 390 px (issues 23 and 24), in a real browser
(Playwright driving Debian's Chromium, offline, on loopback): a maintenance window is a shaded
band with its key "maintenance" on every chart, a URL change is marked "new URL" on the grade,
headline and check charts and on the dashboard's sparkline, and no label of a chart sits on
another.

Screenshots go to test-artifacts/ (marks-*.png).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.models import MaintenanceWindow, Scan
from tests.conftest import build_world
from tests.helpers.browser import ARTIFACTS
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_C, GRADE_A, GRADE_B, scan_at
from tests.scans.pages.test_ux_browser import logged_in_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE, DESKTOP = 390, 1400

# Per chart: its shaded spans' drawn widths, its keys' drawn font sizes, the "new URL" labels
# shown, and every pair of shown texts whose boxes overlap (ticks, zone, legend, key, labels).
MARKS = """() => document.querySelectorAll('svg.chart').length && [...document.querySelectorAll('svg.chart')]
  .filter(svg => svg.getBoundingClientRect().width > 0).map(svg => {
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  const shown = el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const texts = [...svg.querySelectorAll('text')].filter(shown);
  // A text's box is its line box (ascent to descent, about 1.16 em): a sixth of the font size
  // off its top and bottom leaves the glyphs, so two rows that merely touch are not a collision.
  const ink = t => {
    const r = t.getBoundingClientRect(), cut = parseFloat(getComputedStyle(t).fontSize) * scale / 6;
    return {left: r.left, right: r.right, top: r.top + cut, bottom: r.bottom - cut};
  };
  const overlaps = [];
  texts.forEach((a, i) => texts.slice(i + 1).forEach(b => {
    const p = ink(a), q = ink(b);
    if (p.left < q.right - 0.5 && q.left < p.right - 0.5 && p.top < q.bottom && q.top < p.bottom)
      overlaps.push(a.textContent + ' / ' + b.textContent);
  }));
  const keys = [...svg.querySelectorAll('[data-legend=maintenance] text')].filter(shown);
  return {chart: svg.dataset.check || svg.dataset.chart,
          spans: [...svg.querySelectorAll('rect.maintenance-span')].map(r => r.getBoundingClientRect().width),
          keys: keys.map(t => parseFloat(getComputedStyle(t).fontSize) * scale),
          urls: texts.filter(t => t.textContent === 'new URL').length,
          overlaps};
});"""


@pytest.fixture
def site(settings):
    """An endpoint scanned every 20 minutes for 5 hours, moved to another URL 2 hours ago, with
    a one-hour maintenance window 3 hours ago (made before the browser's event loop starts)."""
    world = build_world()
    endpoint = make_endpoint(world.team, name="gpu box in maintenance", interval_minutes=20)
    now = timezone.now()
    for i, minutes in enumerate(range(300, 0, -20)):
        scan = scan_at(endpoint, now - timedelta(minutes=minutes), (GRADE_A, GRADE_B, CAPPED_C)[i % 3])
        if minutes < 120:
            report = {**scan.report, "target": {**scan.report["target"], "base_url": "http://10.9.9.9/v1"}}
            Scan.dangerously_unscoped.filter(pk=scan.pk).update(report=report,
                                                                target_url="http://10.9.9.9/v1")
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, endpoint=endpoint, name="driver update",
        starts_at=now - timedelta(hours=3, minutes=10), ends_at=now - timedelta(hours=2, minutes=10))
    return {"world": world, "endpoint": reverse("endpoint-detail", args=[endpoint.public_id]),
            "dashboard": reverse("team-dashboard", args=[world.team.slug])}


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_maintenance_is_shaded_and_keyed_and_a_url_change_marked_with_no_label_on_another(
        site, browser, live_server, width):
    page, refused = logged_in_page(browser, live_server, site["world"].owner, width)
    page.goto(f"{live_server.url}{site['endpoint']}?range=6h")

    charts = {c["chart"]: c for c in page.evaluate(MARKS)}
    assert {"grades", "ttft", "tokens", "ttft_p95_at_concurrency_1", "error_rate"} <= set(charts)
    for name, chart in charts.items():
        assert len(chart["spans"]) == 1 and chart["spans"][0] >= 20, (name, chart)  # 1 h of 6
        assert len(chart["keys"]) == 1 and chart["keys"][0] >= 10, (name, chart)
        assert chart["urls"] == 1, (name, chart)
        assert chart["overlaps"] == [], (name, chart)
    # The band's times on hover, in the viewer's zone.
    title = page.locator("svg[data-chart=grades] rect.maintenance-span title").text_content()
    assert title.startswith("maintenance, ") and "left out of the SLO windows" in title
    assert page.locator("[data-maintenance-note]").is_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.locator("#grades").screenshot(path=str(ARTIFACTS / f"marks-grades-{width}.png"))
    page.locator("#headline").screenshot(path=str(ARTIFACTS / f"marks-headline-{width}.png"))
    page.locator("figure[data-check=ttft_p95_at_concurrency_1]").screenshot(
        path=str(ARTIFACTS / f"marks-check-{width}.png"))
    # The dashboard's sparkline marks the move too, with the grade chart's words on hover.
    page.goto(f"{live_server.url}{site['dashboard']}")
    mark = page.locator("svg.chart-sparkline g.version-break[data-kind=url]")
    assert mark.count() == 1 and mark.locator("line").bounding_box()["height"] > 10
    assert mark.locator("title").text_content().startswith("new URL: URL changed from ")
    if width == DESKTOP:  # on a phone the table scrolls sideways in its card
        mark.locator("xpath=ancestor::tr[1]").screenshot(
            path=str(ARTIFACTS / "marks-sparkline-1400.png"))
    assert refused == []
