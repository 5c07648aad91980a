"""scans.pages.charts: inline SVG that breaks at a change of scoring version, marks caps, escapes
text, and carries its numbers in data-* attributes."""

from __future__ import annotations

import dataclasses
import uuid
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from scans.history.check_results import CheckPoint
from scans.history.grades import GradePoint
from scans.pages import charts

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def grade_point(hours: int, points: float | None, grade: str, version: str = "0.9.0",
                uncapped: str | None = None, caps: tuple[str, ...] = ()) -> GradePoint:
    uncapped = uncapped if uncapped is not None else (grade if points is not None else "")
    capped = int(uncapped != grade and points is not None)
    return GradePoint(at=T0 + timedelta(hours=hours), last_at=T0 + timedelta(hours=hours),
                      scans=1, points=points, points_min=points, points_max=points, grade=grade,
                      uncapped_grade=uncapped, capped=capped, caps=caps,
                      no_letter=int(points is None), scoring_version=version,
                      provisional=version.startswith("0."))


def check_point(hours: int, value: float | None, status: str, version: str = "0.9.0"):
    return CheckPoint(at=T0 + timedelta(hours=hours), last_at=T0 + timedelta(hours=hours),
                      scans=1, value=value, value_min=value, value_max=value, status=status,
                      passed=int(status == "pass"), warned=int(status == "warn"),
                      failed=int(status == "fail"),
                      unmeasured=int(status not in ("pass", "warn", "fail")),
                      scoring_version=version)


def parse(svg: str) -> ET.Element:
    return ET.fromstring(str(svg))  # noqa: S314 - our own output; raises if malformed


def test_a_sparkline_breaks_where_the_scoring_version_changes():
    points = [grade_point(h, 95.0, "A") for h in range(3)] + [
        grade_point(h, 85.0, "B", version="1.0.0") for h in range(3, 6)]

    root = parse(charts.sparkline(points))

    assert root.get("data-breaks") == "1" and root.get("data-segments") == "2"
    assert root.get("data-grades") == "A A A B B B"
    assert root.get("data-versions") == "0.9.0 1.0.0"
    segments = root.findall(f"{SVG}g[@class='segment']")
    assert [s.get("data-scoring-version") for s in segments] == ["0.9.0", "1.0.0"]
    # No line joins the versions: each segment draws its own.
    assert all(len(s.findall(f"{SVG}polyline")) == 1 for s in segments)
    (mark,) = root.findall(f"{SVG}g[@class='version-break']")
    assert (mark.get("data-from"), mark.get("data-to")) == ("0.9.0", "1.0.0")
    assert mark.get("data-kind") == "version"
    assert mark.find(f"{SVG}title").text.startswith("scoring 1.0.0: scoring version changed")


def test_a_sparkline_shows_a_scan_with_no_letter_as_a_grey_gap_and_breaks_the_line():
    points = [grade_point(0, 95.0, "A"), grade_point(1, 90.0, "A"),
              grade_point(2, None, "insufficient_evidence"),
              grade_point(3, 95.0, "A"), grade_point(4, 95.0, "A")]

    root = parse(charts.sparkline(points))

    assert root.get("data-grades") == "A A none A A"
    assert len(root.findall(f".//{SVG}rect[@class='no-letter']")) == 1
    assert len(root.findall(f".//{SVG}polyline")) == 2


def test_the_grade_chart_shades_the_bands_and_marks_caps_and_breaks():
    points = [grade_point(0, 100.0, "A"),
              grade_point(1, 87.0, "C", uncapped="B", caps=("ttft_at_concurrency_1_failed",)),
              grade_point(2, None, "insufficient_evidence"),
              grade_point(3, 85.2, "B", version="1.0.0")]

    root = parse(charts.grade_chart(points, T0, T0 + timedelta(hours=4)))

    assert [g.get("data-band") for g in root.iter(f"{SVG}g") if g.get("data-band")] == [
        "A", "B", "C", "D", "F"]
    assert root.get("data-breaks") == "1" and root.get("data-capped") == "1"
    marks = [g for g in root.iter(f"{SVG}g") if "mark" in (g.get("class") or "").split()]
    assert [m.get("data-grade") for m in marks] == ["A", "C", "insufficient_evidence", "B"]
    assert [m.get("data-points") for m in marks] == ["100", "87", None, "85.2"]
    capped = [m for m in marks if "capped" in m.get("class")]
    assert len(capped) == 1
    assert "capped from B (ttft_at_concurrency_1_failed)" in capped[0].find(f"{SVG}title").text
    (brk,) = [g for g in root.iter(f"{SVG}g") if g.get("class") == "version-break"]
    assert (brk.get("data-from"), brk.get("data-to")) == ("0.9.0", "1.0.0")
    assert "not comparable" in brk.find(f"{SVG}title").text


def test_the_grade_chart_without_points_says_no_scan_yet():
    root = parse(charts.grade_chart([], T0, T0 + timedelta(days=1)))

    assert root.get("data-count") == "0"
    assert any(t.text == "no scan yet" for t in root.iter(f"{SVG}text"))


def test_text_in_a_chart_is_escaped():
    hostile = '"><script>alert(1)</script>'
    points = [grade_point(0, 95.0, "A", version=hostile), grade_point(1, 95.0, "A")]

    svg = str(charts.grade_chart(points, T0, T0 + timedelta(hours=2)))
    root = parse(svg)

    assert "<script>" not in svg
    assert hostile in {g.get("data-scoring-version") for g in root.iter(f"{SVG}g")}


def test_a_check_chart_draws_bounds_only_over_the_current_versions_scans():
    points = [check_point(0, 30.0, "pass", version="0.9.0"),
              check_point(1, 250.0, "fail", version="1.0.0"),
              check_point(2, 90.0, "warn", version="1.0.0"),
              check_point(3, None, "insufficient_evidence", version="1.0.0")]

    root = parse(charts.check_chart(points, "inter_chunk_p95_at_concurrency_1", T0,
                                    T0 + timedelta(hours=4)))

    assert root.get("data-check") == "inter_chunk_p95_at_concurrency_1"
    assert root.get("data-breaks") == "1"
    bounds = {g.get("data-bound"): g.get("data-value") for g in root.iter(f"{SVG}g")
              if g.get("data-bound")}
    assert bounds == {"pass": "50", "warn": "150"}
    marks = [g for g in root.iter(f"{SVG}g") if "mark" in (g.get("class") or "").split()]
    assert [(m.get("data-value"), m.get("data-status")) for m in marks] == [
        ("30", "pass"), ("250", "fail"), ("90", "warn"), (None, "insufficient_evidence")]


def test_a_bound_that_grows_with_the_prompt_is_not_drawn_as_one_line():
    points = [check_point(0, 300.0, "pass", version="1.0.0"),
              check_point(1, 2500.0, "warn", version="1.0.0")]  # a long prompt's bounds

    root = parse(charts.check_chart(points, "ttft_p95_at_concurrency_1", T0,
                                    T0 + timedelta(hours=2)))

    assert not [g for g in root.iter(f"{SVG}g") if g.get("data-bound")]
    legend = {g.get("data-legend"): g.find(f"{SVG}text").text
              for g in root.iter(f"{SVG}g") if g.get("data-legend")}
    assert legend == {"bounds": "bounds grow with the prompt's length",
                      "unmeasured": "not measured"}


def test_a_badge_is_a_standalone_svg_with_its_state_in_data_attributes():
    root = parse(charts.badge("tokvera", "B (provisional)", "#6fae2b", grade="B",
                              provisional=True, title="tokvera: grade B (provisional)"))

    assert root.get("data-grade") == "B" and root.get("data-provisional") == "true"
    assert root.find(f"{SVG}title").text == "tokvera: grade B (provisional)"
    assert [t.text for t in root.iter(f"{SVG}text")] == ["tokvera", "B (provisional)"]


def marks_of(root: ET.Element) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if "mark" in (g.get("class") or "").split()]


def test_a_check_chart_has_a_human_title_and_a_legend_for_its_bounds():
    root = parse(charts.check_chart([check_point(0, 30.0, "pass", version="1.0.0")],
                                    "inter_chunk_p95_at_concurrency_1", T0,
                                    T0 + timedelta(hours=1)))

    assert root.get("aria-label").startswith(
        "Gap between chunks, p95, one request at a time (inter_chunk_p95_at_concurrency_1)")
    legend = {g.get("data-legend"): g.find(f"{SVG}text").text
              for g in root.iter(f"{SVG}g") if g.get("data-legend")}
    assert legend["pass"].startswith("pass ≤ 50") and legend["warn"].startswith("warn ≤ 150")
    assert legend["unmeasured"] == "not measured"


def test_an_unmeasured_value_is_a_gap_with_its_reason_never_a_point_at_zero():
    scan_id = uuid.uuid4()
    gap = dataclasses.replace(check_point(1, None, "insufficient_evidence"), scan_id=scan_id)
    points = [check_point(0, 0.01, "pass"), gap, check_point(2, 0.02, "pass")]

    root = parse(charts.check_chart(points, "error_rate", T0, T0 + timedelta(hours=3),
                                    reasons={scan_id: "no request completed"}))

    (unmeasured,) = [m for m in marks_of(root) if "unmeasured" in m.get("class")]
    assert unmeasured.find(f".//{SVG}circle") is None  # nothing drawn at a value
    assert unmeasured.get("data-reason") == "no request completed"
    assert "not measured (no request completed)" in unmeasured.find(f"{SVG}title").text
    line = unmeasured.find(f".//{SVG}line")
    frame = root.find(f"{SVG}rect[@class='frame']")
    assert float(line.get("y1")) == float(frame.get("y"))  # the full height of the plot
    # No line joins the values across the gap.
    assert root.findall(f".//{SVG}polyline") == []


def test_a_share_axis_never_runs_past_100_percent():
    root = parse(charts.check_chart([check_point(0, 0.98, "pass")], "usage_reported_share",
                                    T0, T0 + timedelta(hours=1)))

    assert float(root.get("data-y-to")) == 1.0
    y_ticks = [t.text for t in root.iter(f"{SVG}text")
               if t.get("class") == "tick" and t.get("data-tick") == "y"]
    assert y_ticks[-1] == "100 %" and y_ticks[0] == "0 %"


def test_the_grade_chart_runs_0_to_100_and_keeps_an_a_at_100_inside_the_picture():
    points = [grade_point(0, 100.0, "A", uncapped="A"),
              grade_point(1, 87.0, "C", uncapped="B", caps=("x",))]
    points[0] = dataclasses.replace(points[0], capped=1, uncapped_grade="A")  # ringed, at 100

    root = parse(charts.grade_chart(points, T0 - timedelta(days=30), T0 + timedelta(hours=2)))

    assert (root.get("data-y-from"), root.get("data-y-to")) == ("0", "100")
    for circle in root.iter(f"{SVG}circle"):
        assert float(circle.get("cy")) - float(circle.get("r")) >= 0
    # The axis spans the chosen range, not just the scans in it.
    assert root.get("data-since") == (T0 - timedelta(days=30)).isoformat()


def test_every_point_of_one_scan_links_to_that_scan():
    scan_id = uuid.uuid4()
    point = dataclasses.replace(grade_point(0, 95.0, "A"), scan_id=scan_id)

    root = parse(charts.grade_chart([point], T0, T0 + timedelta(hours=1)))

    (link,) = root.iter(f"{SVG}a")
    assert link.get("href") == f"/scans/{scan_id}/"


def test_a_headline_chart_draws_one_line_per_series_and_gaps_for_missing_values():
    ids = [uuid.uuid4() for _ in range(3)]
    p50 = charts.Series("ttft_p50", "p50", "#2e5aac", points=[
        charts.SeriesPoint(T0 + timedelta(hours=h), v, scan_id=i)
        for h, v, i in zip(range(3), (200.0, None, 210.0), ids, strict=True)])
    p95 = charts.Series("ttft_p95", "p95", "#a86400", "6 3", points=[
        charts.SeriesPoint(T0 + timedelta(hours=h), v, scan_id=i)
        for h, v, i in zip(range(3), (400.0, None, 450.0), ids, strict=True)])

    root = parse(charts.series_chart("ttft", "Time to first token", "ms", [p50, p95], T0,
                                     T0 + timedelta(hours=3)))

    assert root.get("data-series") == "ttft_p50 ttft_p95"
    wide = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "legend axis-wide")
    assert [g.get("data-legend") for g in wide.iter(f"{SVG}g") if g.get("data-legend")] == [
        "ttft_p50", "ttft_p95"]
    assert sum("unmeasured" in m.get("class") for m in marks_of(root)) == 2
    assert {a.get("href") for a in root.iter(f"{SVG}a")} == {f"/scans/{i}/" for i in ids}
