"""The endpoint page's charts and the dashboard's sparkline are written in Python
(scans/pages/chart_svg.py) and come out byte for byte as the digests below say: taken from
the Django templates (templates/charts/chart.svg and sparkline.svg) that drew them before,
with the same inputs. Their marks, breaks, gaps, ranges, rings, legends, bounds and
maintenance spans, and text that needs escaping, are all drawn here. A deliberate change to a
chart's markup (or to a check's bounds, which the check chart draws) changes them."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta

from scans.history.check_results import CheckPoint
from scans.history.grades import GradePoint
from scans.pages import charts

T0 = datetime(2026, 11, 1, tzinfo=UTC)
SCAN = uuid.UUID("12345678-1234-5678-1234-567812345678")


def _grade(hours: int, points: float | None, grade: str, *, version: str = "0.9.0",
           scans: int = 1, low: float | None = None, high: float | None = None,
           uncapped: str = "", caps: tuple[str, ...] = (), down: int = 0,
           url: str = "http://a.example/v1", profile: str = "1/4 × 20",
           scan_id: uuid.UUID | None = None) -> GradePoint:
    at = T0 + timedelta(hours=hours)
    return GradePoint(
        at=at, last_at=at + timedelta(minutes=50 if scans > 1 else 0), scans=scans,
        points=points, points_min=low if low is not None else points,
        points_max=high if high is not None else points, grade=grade,
        uncapped_grade=uncapped or grade, capped=int(bool(uncapped)), caps=caps,
        no_letter=int(points is None), scoring_version=version,
        provisional=version.startswith("0."), scan_id=scan_id, profile=profile,
        profile_key=profile, down=down, url=url)


def _check(hours: int, value: float | None, status: str, *, version: str = "0.9.0",
           scans: int = 1, low: float | None = None, high: float | None = None,
           scan_id: uuid.UUID | None = None, url: str = "http://a.example/v1") -> CheckPoint:
    at = T0 + timedelta(hours=hours)
    return CheckPoint(
        at=at, last_at=at + timedelta(minutes=50 if scans > 1 else 0), scans=scans,
        value=value, value_min=low if low is not None else value,
        value_max=high if high is not None else value, status=status,
        passed=int(status == "pass") * scans, warned=int(status == "warn") * scans,
        failed=int(status == "fail") * scans,
        unmeasured=int(status not in ("pass", "warn", "fail")) * scans,
        scoring_version=version, scan_id=scan_id, url=url)


GRADES = [
    _grade(0, 96.0, "A", scan_id=SCAN),
    _grade(1, 88.0, "B", scans=3, low=80.5, high=93.0),
    _grade(2, 71.0, "C", uncapped="B", caps=("error_rate_over_5_percent & <more>",)),
    _grade(3, None, "insufficient_evidence"),
    _grade(4, None, "insufficient_evidence", down=1),
    _grade(5, 90.0, "A", url="http://b.example/v1?x=\"1\"&y='2'"),
    _grade(6, 91.0, "A", version="1.0.0"),
    _grade(7, 65.0, "D", version="1.0.0", profile="1/4/16 × 64"),
]
CHECKS = [
    _check(0, 120.0, "pass", scan_id=SCAN),
    _check(1, 900.0, "warn", scans=4, low=300.0, high=1500.0),
    _check(2, None, "insufficient_evidence", scan_id=SCAN),
    _check(3, 2500.0, "fail"),
    _check(5, 140.0, "pass", version="1.0.0"),
]
HELD = [(T0 + timedelta(hours=2, minutes=30), T0 + timedelta(hours=3, minutes=10))]
UNTIL = T0 + timedelta(hours=8)


def _digest(svg: str) -> str:
    return hashlib.sha256(str(svg).encode()).hexdigest()


def _series() -> list[charts.Series]:
    def points(scale: float) -> list[charts.SeriesPoint]:
        return [charts.SeriesPoint(at=p.at, last_at=p.last_at, scans=p.scans,
                                   value=None if p.value is None else p.value * scale,
                                   scan_id=p.scan_id) for p in CHECKS]
    return [charts.Series("p50", "p50 <fast>", "#2e5aac", "", points(0.5)),
            charts.Series("p95", "p95 & \"slow\"", "#a86400", "6 3", points(1.0))]


DIGESTS = {
    "sparkline": "1efdb534886046a37edcc012e0f8825f3e850d709ef1e7aa43b7ee508039d8fa",
    "sparkline, empty": "6eed71156b64e28479c308cf293d7f70de79fa4137cd8d24fb637aeea5e2e742",
    "grade chart": "dcf303138320cc2d667016aea50adebe23dde73d2c2d45a3781542e3363b1b32",
    "grade chart, empty": "2294797d1995fb05113e2ae9d7b73201a34d1bbdf1616c3cc677aa7581cae8f4",
    "check chart": "f68ea698203451b9f16be97c160ec84b5481f02013afe33086147a633cfda817",
    "check chart, present or absent": "74f171f05e9c141a98c2f6e2c26f428cfc71b39a8a7135ecb5e52b083ecbc123",
    "series chart": "30ac22d687ea1c1dc8cb7c3038ad3a5d0d219cb7e5a9612016ef05a2546d76f7",
    "series chart, empty": "b6ffc1a2871c21a344559e64e942f170fc3e22af453128f9fbe57c5e426b01fd",
}


def test_the_sparkline_is_the_templates_byte_for_byte():
    assert _digest(charts.sparkline(GRADES)) == DIGESTS["sparkline"]
    assert _digest(charts.sparkline([])) == DIGESTS["sparkline, empty"]


def test_the_grade_chart_is_the_templates_byte_for_byte():
    chart = charts.grade_chart(GRADES, T0, UNTIL, maintenance=HELD)
    assert _digest(chart) == DIGESTS["grade chart"]
    assert _digest(charts.grade_chart([], T0, UNTIL)) == DIGESTS["grade chart, empty"]


def test_a_check_chart_is_the_templates_byte_for_byte():
    reasons = {SCAN: "no stream <started> & \"nothing\" came"}
    chart = charts.check_chart(CHECKS, "ttft_p95_at_concurrency_1", T0, UNTIL, reasons=reasons,
                               maintenance=HELD)
    assert _digest(chart) == DIGESTS["check chart"]
    boolean = charts.check_chart([_check(0, 1.0, "pass"), _check(1, 0.0, "fail")],
                                 "metrics_endpoint", T0, UNTIL)
    assert _digest(boolean) == DIGESTS["check chart, present or absent"]


def test_a_series_chart_is_the_templates_byte_for_byte():
    changes = charts.changes(GRADES, versions=False)
    chart = charts.series_chart("ttft", "Time to first token", "ms", _series(), T0, UNTIL,
                                changes=changes, maintenance=HELD)
    assert _digest(chart) == DIGESTS["series chart"]
    share = charts.series_chart("agent", "Valid at the top level", "share", [], T0, UNTIL)
    assert _digest(share) == DIGESTS["series chart, empty"]
