"""The endpoint page's charts a person can read: round ticks, a time axis in the
viewer's time zone that names it, a phone's axes drawn apart, a URL change marked."""

from __future__ import annotations

import dataclasses
import re
import zoneinfo
from datetime import timedelta

from django.utils import timezone

from scans.pages import charts
from tests.scans.pages.test_charts import SVG, T0, check_point, grade_point, parse


def texts(root, axis: str, tick: str) -> list[str]:
    group = next(g for g in root.iter(f"{SVG}g") if g.get("data-axis") == axis)
    return [t.text for t in group.iter(f"{SVG}text") if t.get("data-tick") == tick]


def test_the_value_axis_is_round():
    points = [check_point(0, 239.6, "pass"), check_point(1, 120.0, "pass")]
    root = parse(charts.check_chart(points, "inter_chunk_p95_at_concurrency_1", T0, T0 + timedelta(hours=2)))

    # up to the warn bound (250 ms) with room above it: 0, 100, 200, 300, not 0, 119.8, 239.6
    assert texts(root, "wide", "y") == ["0 ms", "100 ms", "200 ms", "300 ms"]
    assert texts(root, "narrow", "y") == ["0 ms", "100 ms", "200 ms", "300 ms"]


def test_the_time_axis_is_round_in_the_viewers_zone_and_names_it():
    points = [grade_point(h, 95.0, "A") for h in range(3)]
    with timezone.override(zoneinfo.ZoneInfo("Asia/Kolkata")):  # UTC+05:30
        root = parse(
            charts.grade_chart(points, T0 + timedelta(minutes=7), T0 + timedelta(hours=6, minutes=7))
        )

    labels = texts(root, "wide", "x")
    assert labels and all(re.fullmatch(r"\d\d:[0-5]0", t) for t in labels), labels
    assert labels[0] == "06:00"  # 00:30 UTC is 06:00 in Kolkata; the first round hour
    zone = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "zone"]
    assert zone[0] == "times in Asia/Kolkata (UTC+05:30)"
    assert root.get("data-timezone") == "Asia/Kolkata"
    title = next(t.text for t in root.iter(f"{SVG}title") if "points, scoring" in (t.text or ""))
    assert "IST" in title


def test_a_phone_gets_its_own_axes_sized_to_stay_readable():
    root = parse(charts.grade_chart([grade_point(0, 95.0, "A")], T0, T0 + timedelta(hours=1)))
    narrow = next(g for g in root.iter(f"{SVG}g") if g.get("data-axis") == "narrow")

    assert narrow.get("display") == "none"  # shown by endpoints.css below 760 px
    scale = charts.PHONE_CHART_PX / float(root.get("width"))
    assert float(narrow.get("font-size")) * scale >= 10


def test_a_url_change_is_a_break_marked_new_url():
    before = [dataclasses.replace(grade_point(h, 95.0, "A"), url="http://10.1.1.1/v1") for h in range(2)]
    after = [dataclasses.replace(grade_point(h, 95.0, "A"), url="http://10.1.1.2/v1") for h in range(2, 4)]
    root = parse(charts.grade_chart(before + after, T0, T0 + timedelta(hours=4)))

    (mark,) = [g for g in root.iter(f"{SVG}g") if g.get("class") == "version-break"]
    assert mark.get("data-kind") == "url" and mark.get("data-to") == "http://10.1.1.2/v1"
    assert "new URL" in [t.text for t in mark.iter(f"{SVG}text")]
    assert "not comparable" in mark.find(f"{SVG}title").text
    assert root.get("data-segments") == "2"
