"""Marks on every time chart (issues 23 and 24): a change of load profile or URL is marked on
the check trends, the headline charts and the dashboard's sparklines with the grade chart's
look and words, and the endpoint's maintenance windows are shaded at their times on the
endpoint page's charts with a key that says "maintenance"."""

from __future__ import annotations

import dataclasses
import re
import zoneinfo
from datetime import UTC, datetime, time, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.history.check_results import check_history
from scans.history.grades import latest_grades
from scans.models import MaintenanceKind, MaintenanceWindow, Scan
from scans.pages import charts
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, scan_at
from tests.scans.pages.test_charts import SVG, T0, check_point, grade_point, parse

HOUR = timedelta(hours=1)
URL_A, URL_B = "http://10.1.1.1/v1", "http://10.1.1.2/v1"


def at_url(point, url: str):
    return dataclasses.replace(point, url=url)


def breaks_of(root) -> list:
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == "version-break"]


def spans_of(root) -> list:
    return [r for r in root.iter(f"{SVG}rect") if r.get("class") == "maintenance-span"]


def plot_x(root, at: datetime) -> float:
    """Where `at` falls on the chart's time axis, from the plot's own frame and range."""
    frame = root.find(f"{SVG}rect[@class='frame']")
    left, width = float(frame.get("x")), float(frame.get("width"))
    since = datetime.fromisoformat(root.get("data-since"))
    until = datetime.fromisoformat(root.get("data-until"))
    return left + (at - since) / (until - since) * width


# --- load and URL changes -------------------------------------------------------------------


def test_a_check_chart_marks_a_url_change_with_the_grade_charts_words():
    checks = [at_url(check_point(h, 300.0, "pass"), URL_A if h < 2 else URL_B) for h in range(4)]
    grades = [at_url(grade_point(h, 95.0, "A"), URL_A if h < 2 else URL_B) for h in range(4)]
    until = T0 + 4 * HOUR

    check = parse(charts.check_chart(checks, "ttft_p95_at_concurrency_1", T0, until))
    grade = parse(charts.grade_chart(grades, T0, until))

    (mark,) = breaks_of(check)
    (same,) = breaks_of(grade)
    assert (mark.get("data-kind"), mark.get("data-from"), mark.get("data-to")) == ("url", URL_A, URL_B)
    assert mark.find(f"{SVG}title").text == same.find(f"{SVG}title").text
    assert {t.text for t in mark.iter(f"{SVG}text")} == {"new URL"}
    # Halfway between the last scan at the old URL (1 h) and the first at the new one (2 h).
    line = mark.find(f"{SVG}line")
    assert float(line.get("x1")) == pytest.approx(plot_x(check, T0 + 1.5 * HOUR), abs=0.01)
    # No line joins the two servers.
    assert check.get("data-segments") == "2" and check.get("data-breaks") == "1"


def test_a_check_chart_marks_a_load_change_as_new_load():
    points = [dataclasses.replace(check_point(h, 300.0, "pass"),
                                  profile="1/4 × 20" if h < 2 else "1/8 × 20",
                                  profile_key="a" if h < 2 else "b") for h in range(4)]

    root = parse(charts.check_chart(points, "error_rate", T0, T0 + 4 * HOUR))

    (mark,) = breaks_of(root)
    assert mark.get("data-kind") == "load" and mark.get("data-to") == "1/8 × 20"
    assert "new load" in {t.text for t in mark.iter(f"{SVG}text")}
    assert "load changed from 1/4 × 20 to 1/8 × 20" in mark.find(f"{SVG}title").text


def test_a_sparkline_marks_a_url_change_with_the_grade_charts_words_on_hover():
    points = [at_url(grade_point(h, 95.0, "A"), URL_A if h < 3 else URL_B) for h in range(6)]

    spark = parse(charts.sparkline(points))
    grade = parse(charts.grade_chart(points, T0, T0 + 6 * HOUR))

    (mark,) = breaks_of(spark)
    (same,) = breaks_of(grade)
    assert mark.get("data-kind") == "url" and spark.get("data-breaks") == "1"
    assert mark.find(f"{SVG}title").text == "new URL: " + same.find(f"{SVG}title").text
    line = mark.find(f"{SVG}line")
    assert (line.get("stroke"), line.get("stroke-dasharray")) == (charts.BREAK, "4 3")
    # Between the third and the fourth of six evenly spaced scans.
    dots = [float(x) for x in (3.0, 3 + 5 * (120 - 6) / 5)]
    assert dots[0] < float(line.get("x1")) < dots[1]
    assert float(line.get("x1")) == pytest.approx(3 + 2.5 * (120 - 6) / 5)


def test_a_headline_chart_marks_load_and_url_changes_but_not_a_new_scoring_version():
    grades = ([grade_point(0, 95.0, "A"), grade_point(1, 95.0, "A", version="1.0.0")]
              + [at_url(grade_point(h, 95.0, "A", version="1.0.0"), URL_B) for h in (2, 3)])
    series = charts.Series("ttft_p50", "p50", "#2e5aac", points=[
        charts.SeriesPoint(T0 + h * HOUR, 200.0 + h) for h in range(4)])

    root = parse(charts.series_chart("ttft", "Time to first token", "ms", [series], T0,
                                     T0 + 4 * HOUR, changes=charts.changes(grades, versions=False)))

    (mark,) = breaks_of(root)  # TTFT in ms does not change with the scoring
    assert mark.get("data-kind") == "url" and root.get("data-breaks") == "1"
    assert float(mark.find(f"{SVG}line").get("x1")) == pytest.approx(
        plot_x(root, T0 + 1.5 * HOUR), abs=0.01)
    # The same series, one polyline: a mark is drawn over the line, not a break in the data.
    assert len(root.findall(f".//{SVG}polyline")) == 1


def test_two_changes_close_together_put_their_labels_on_two_rows():
    urls = [URL_A, URL_B, "http://10.1.1.3/v1"]
    points = [at_url(grade_point(0, 95.0, "A"), urls[0])] + [
        at_url(dataclasses.replace(grade_point(0, 95.0, "A"), at=T0 + m * timedelta(minutes=1),
                                   last_at=T0 + m * timedelta(minutes=1)), urls[i])
        for i, m in ((1, 1), (2, 2))]

    root = parse(charts.grade_chart(points, T0, T0 + 30 * 24 * HOUR))

    first, second = breaks_of(root)
    for size in ("wide", "narrow"):
        a, b = (next(t for t in g.iter(f"{SVG}text") if f"axis-{size}" in t.get("class"))
                for g in (first, second))
        assert float(b.get("y")) - float(a.get("y")) >= float(a.get("font-size")), size


# --- maintenance windows --------------------------------------------------------------------


def test_a_maintenance_window_is_shaded_at_its_times_over_the_plot_with_a_key():
    points = [grade_point(h, 95.0, "A") for h in range(4)]
    window = (T0 + HOUR, T0 + 2 * HOUR + timedelta(minutes=30))

    with timezone.override(zoneinfo.ZoneInfo("Europe/Berlin")):
        root = parse(charts.grade_chart(points, T0, T0 + 4 * HOUR, maintenance=[window]))

    (span,) = spans_of(root)
    assert span.get("data-from") == window[0].isoformat() and span.get("data-to") == window[1].isoformat()
    assert float(span.get("x")) == pytest.approx(plot_x(root, window[0]), abs=0.01)
    assert float(span.get("x")) + float(span.get("width")) == pytest.approx(plot_x(root, window[1]), abs=0.01)
    frame = root.find(f"{SVG}rect[@class='frame']")
    assert (span.get("y"), span.get("height")) == (frame.get("y"), frame.get("height"))
    # Its times on hover in the viewer's zone: 01:00 UTC is 02:00 in Berlin in November.
    assert span.find(f"{SVG}title").text.startswith(
        "maintenance, 2026-11-01 02:00 CET to 03:30 CET: its time is left out of the SLO")
    keys = [g for g in root.iter(f"{SVG}g") if g.get("data-legend") == "maintenance"]
    assert [k.get("class") for k in keys] == ["maintenance-key axis-wide", "maintenance-key axis-narrow"]
    assert all(k.find(f"{SVG}text").text == "maintenance" for k in keys)
    # The points stay on top of the shading (clickable): the shading comes first.
    children = list(root)
    shading = next(i for i, c in enumerate(children) if c.get("class") == "maintenance")
    assert shading < min(i for i, c in enumerate(children) if c.get("class") == "segment")


def test_a_short_window_over_a_long_range_is_still_a_visible_band():
    window = (T0 + 10 * 24 * HOUR, T0 + 10 * 24 * HOUR + HOUR)

    root = parse(charts.check_chart([check_point(0, 0.01, "pass")], "error_rate", T0,
                                    T0 + 90 * 24 * HOUR, maintenance=[window]))

    (span,) = spans_of(root)
    assert float(span.get("width")) >= 3
    middle = float(span.get("x")) + float(span.get("width")) / 2
    assert middle == pytest.approx(plot_x(root, window[0] + HOUR / 2), abs=0.05)


def test_no_window_in_the_range_means_no_shading_and_no_key():
    before = (T0 - 3 * HOUR, T0 - HOUR)

    root = parse(charts.check_chart([check_point(0, 0.01, "pass")], "error_rate", T0,
                                    T0 + HOUR, maintenance=[before]))

    assert spans_of(root) == []
    assert not [g for g in root.iter(f"{SVG}g") if g.get("data-legend") == "maintenance"]


def test_the_key_never_touches_the_zones_caption():
    """A long zone name drops to its offset where the key would touch it."""
    points = [check_point(0, 0.01, "pass")]
    window = [(T0, T0 + HOUR)]

    with timezone.override(zoneinfo.ZoneInfo("America/Argentina/ComodRivadavia")):
        root = parse(charts.check_chart(points, "error_rate", T0, T0 + 2 * HOUR, maintenance=window))

    for axis in ("wide", "narrow"):
        group = next(g for g in root.iter(f"{SVG}g") if g.get("data-axis") == axis)
        zone = next(t for t in group.iter(f"{SVG}text") if t.get("class") == "zone")
        key = next(g for g in root.iter(f"{SVG}g")
                   if g.get("class") == f"maintenance-key axis-{axis}").find(f"{SVG}text")
        size = float(group.get("font-size"))
        key_ends = float(key.get("x")) + charts._text_width("maintenance", size)
        zone_starts = float(zone.get("x")) - charts._text_width(zone.text, size)
        assert key_ends < zone_starts, (axis, zone.text)
    assert zone.text == "times in UTC-03:00"


# --- from the database: history and the endpoint page ----------------------------------------


def _move(scan: Scan, url: str) -> None:
    report = {**scan.report, "target": {**scan.report["target"], "base_url": url}}
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(report=report, target_url=url)


@pytest.mark.django_db
def test_check_history_and_the_dashboards_grades_carry_the_url_each_scan_reached(world):
    endpoint = make_endpoint(world.team)
    now = timezone.now()
    scans = [scan_at(endpoint, now - (4 - i) * HOUR) for i in range(4)]
    for scan in scans[2:]:
        _move(scan, URL_B)

    checks = check_history(endpoint, "error_rate", now - 5 * HOUR, now)
    latest = latest_grades([endpoint])[endpoint.pk]
    bucketed = check_history(endpoint, "error_rate", now - 5 * HOUR, now, max_points=2)

    assert [p.url for p in checks] == ["http://127.0.0.1:8080/v1"] * 2 + [URL_B] * 2
    assert [p.url for p in latest] == [p.url for p in checks]
    # Downsampled, a bucket never mixes the two servers.
    assert {p.url for p in bucketed} == {"http://127.0.0.1:8080/v1", URL_B}
    assert sum(p.scans for p in bucketed) == 4
    assert parse(charts.sparkline(latest)).get("data-breaks") == "1"


def _charts(body: str) -> dict[str, str]:
    """Each chart of the page by its name (the check charts by their check id)."""
    found = {}
    for svg in re.findall(r"<svg[^>]*data-chart=.*?</svg>", body, flags=re.S):
        name = re.search(r'data-chart="([^"]+)"', svg)[1]
        check = re.search(r'data-check="([^"]+)"', svg.split(">", 1)[0])
        found[check[1] if check else name] = svg
    return found


@pytest.mark.django_db
def test_the_endpoint_page_shades_a_weekly_window_on_every_chart_at_its_local_time(world, owner_client):
    endpoint = make_endpoint(world.team, interval_minutes=60)
    now = timezone.now()
    for hours in range(30, 0, -3):
        scan_at(endpoint, now - hours * HOUR, GRADE_A)
    _move(Scan.dangerously_unscoped.filter(endpoint=endpoint).latest("queued_at"), URL_B)
    # Every day at 02:00 in Tokyo (17:00 UTC the day before) for 90 minutes, team-wide.
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, name="nightly", kind=MaintenanceKind.WEEKLY, weekdays=list(range(7)),
        start_time=time(2, 0), duration_minutes=90, timezone="Asia/Tokyo",
        created_at=now - 10 * 24 * HOUR)

    body = owner_client.get(reverse("endpoint-detail", args=[endpoint.public_id]),
                            {"range": "7d"}).content.decode()

    found = _charts(body)
    assert {"grades", "ttft", "tokens", "ttft_p95_at_concurrency_1", "error_rate"} <= set(found)
    tokyo = zoneinfo.ZoneInfo("Asia/Tokyo")
    starts = set()
    for name, svg in found.items():
        if name == "capacity":
            continue
        root = parse(svg)
        spans = spans_of(root)
        assert 6 <= len(spans) <= 8, name  # one a day over the 7 days
        for span in spans:
            begins = datetime.fromisoformat(span.get("data-from"))
            ends = datetime.fromisoformat(span.get("data-to"))
            since = datetime.fromisoformat(root.get("data-since"))
            until = datetime.fromisoformat(root.get("data-until"))
            if since < begins and ends < until:  # the first and last may be cut at the range
                assert begins.astimezone(tokyo).time() == time(2, 0), name
                assert ends - begins == timedelta(minutes=90), name
                starts.add(begins)
            x, width = float(span.get("x")), float(span.get("width"))
            first, last = plot_x(root, max(begins, since)), plot_x(root, min(ends, until))
            if last - first >= charts.MAINTENANCE_MIN_WIDTH:
                assert x == pytest.approx(first, abs=0.05), name
            else:  # one just begun at the right edge (17:00-18:30 UTC): drawn at the least width
                assert width == pytest.approx(charts.MAINTENANCE_MIN_WIDTH), name
                assert x - 0.05 <= first and last <= x + width + 0.05, name
        assert [t for t in root.iter(f"{SVG}text") if t.text == "maintenance"], name
        # The move to the new URL is marked on every chart drawn from the scans (the probes'
        # chart is not: a new URL starts the probes' standing afresh).
        if name != "probes":
            assert [g.get("data-kind") for g in breaks_of(root)] == ["url"], name
    assert len(starts) >= 5 and all(b.astimezone(UTC).hour == 17 for b in starts)
    assert "data-maintenance-note" in body
    assert "Time in a maintenance window (shaded on the charts) is left out" in body


# --- a change of server, as it states itself ------------------------------------------------

VLLM_10, VLLM_11 = "vLLM 0.10.2 · m · NVIDIA A100", "vLLM 0.11.0 · m · NVIDIA A100"


def test_a_new_engine_version_breaks_the_line_and_a_scan_that_said_nothing_does_not():
    said = [VLLM_10, "", VLLM_10, VLLM_11, "", VLLM_11]  # "": the identity timed out
    grades = [dataclasses.replace(grade_point(h, 95.0, "A"), server=server)
              for h, server in enumerate(said)]
    checks = [dataclasses.replace(check_point(h, 300.0, "pass"), server=server)
              for h, server in enumerate(said)]

    grade = parse(charts.grade_chart(grades, T0, T0 + 6 * HOUR))
    check = parse(charts.check_chart(checks, "error_rate", T0, T0 + 6 * HOUR))

    for root in (grade, check):
        (mark,) = breaks_of(root)
        assert (mark.get("data-kind"), mark.get("data-from"), mark.get("data-to")) == (
            "server", VLLM_10, VLLM_11)
        assert {t.text for t in mark.iter(f"{SVG}text")} == {"new server"}
        assert root.get("data-segments") == "2"
    # The headline charts take the grade chart's marks without versions: the server still is one.
    (headline_mark,) = charts.changes(grades, versions=False)
    assert headline_mark["kind"] == "server"


def test_the_grade_history_carries_each_scans_server_from_its_column(world):
    endpoint = make_endpoint(world.team)
    for hours, server in ((3, VLLM_10), (2, VLLM_11)):
        scan = scan_at(endpoint, timezone.now() - hours * HOUR, GRADE_A)
        Scan.dangerously_unscoped.filter(pk=scan.pk).update(server_label=server)

    (points,) = latest_grades([endpoint], n=30).values()
    assert [p.server for p in points] == [VLLM_10, VLLM_11]
    assert [c["kind"] for c in charts.changes(points)] == ["server"]
