"""Charts as inline SVG, rendered on the server: no JavaScript library, no CDN.

- `sparkline`: the last grades of an endpoint, evenly spaced (dashboard).
- `grade_chart`: points over time with the grade bands shaded, capped scans marked, and a
  visible break wherever the scoring version changes (grades of different versions are not
  comparable, so no line joins them).
- `check_chart`: one check's values over time with its pass/warn bounds, same breaks.

Every text and attribute value is escaped; the result is a SafeString. The data each mark
stands for is carried in data-* attributes (data-at, data-points, data-grade, data-value,
data-status, data-scoring-version…) so tests and curious readers can read the numbers back.
Colours are presentation attributes, so a chart renders the same without the stylesheet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from scans.grader import formatting, scoring
from scans.history import CheckPoint, GradePoint

__all__ = ["BAND_COLOURS", "STATUS_COLOURS", "badge", "check_chart", "grade_chart", "sparkline"]

BAND_COLOURS = {"A": "#1a9c5b", "B": "#6fae2b", "C": "#d9a400", "D": "#e07b1a", "F": "#d23b3b"}
NO_GRADE_COLOUR = "#8a90a0"
STATUS_COLOURS = {"pass": "#1a9c5b", "warn": "#d9a400", "fail": "#d23b3b",
                  scoring.INSUFFICIENT_EVIDENCE: NO_GRADE_COLOUR, "preview": NO_GRADE_COLOUR}
INK, MUTED, LINE, BREAK = "#1d2230", "#5c6478", "#dde1ea", "#3451d1"


# --- building blocks -------------------------------------------------------------------------


def _num(value: float) -> str:
    """A coordinate or figure: at most two decimals, no trailing zeros."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _attrs(attrs: dict) -> str:
    parts = []
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        if value is True:
            value = key
        elif isinstance(value, float):
            value = _num(value)
        parts.append(f' {key}="{escape(str(value))}"')
    return "".join(parts)


def _el(tag: str, attrs: dict | None = None, children: str | None = None) -> str:
    if children is None:
        return f"<{tag}{_attrs(attrs or {})}/>"
    return f"<{tag}{_attrs(attrs or {})}>{children}</{tag}>"


def _text(x: float, y: float, text: str, **attrs) -> str:
    return _el("text", {"x": x, "y": y, **attrs}, escape(text))


def _title(text: str) -> str:
    return _el("title", {}, escape(text))


def _svg(kind: str, width: int, height: int, label: str, body: Iterable[str], **data) -> SafeString:
    attrs = {"xmlns": "http://www.w3.org/2000/svg", "class": f"chart chart-{kind}",
             "viewBox": f"0 0 {width} {height}", "width": width, "height": height,
             "role": "img", "aria-label": label, "data-chart": kind,
             "font-family": "system-ui, sans-serif", "font-size": 11}
    attrs.update({f"data-{k.replace('_', '-')}": v for k, v in data.items()})
    return mark_safe(_el("svg", attrs, _title(label) + "".join(body)))  # noqa: S308 - escaped


def _segments(points: Sequence, key=lambda p: p.scoring_version) -> list[list]:
    """Consecutive runs of points of one scoring version."""
    runs: list[list] = []
    for point in points:
        if runs and key(runs[-1][-1]) == key(point):
            runs[-1].append(point)
        else:
            runs.append([point])
    return runs


def _lettered_lines(run: Sequence[GradePoint]) -> list[list[GradePoint]]:
    """The stretches of a run between scans with no letter (a line does not cross them)."""
    lines: list[list[GradePoint]] = [[]]
    for point in run:
        if point.points is None:
            lines.append([])
        else:
            lines[-1].append(point)
    return [line for line in lines if line]


def _iso(at: datetime) -> str:
    return at.isoformat()


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def _time_axis(since: datetime, until: datetime, left: float, right: float):
    span = max((until - since).total_seconds(), 1.0)

    def x(at: datetime) -> float:
        share = (at - since).total_seconds() / span
        return left + min(max(share, 0.0), 1.0) * (right - left)

    return x


def _time_ticks(since: datetime, until: datetime, x, bottom: float) -> list[str]:
    ticks = []
    for share, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        at = since + (until - since) * share
        label = at.strftime("%b %d %H:%M") if (until - since).days < 3 else at.strftime("%b %d")
        ticks.append(_text(x(at), bottom + 14, label, fill=MUTED, **{"text-anchor": anchor,
                                                                      "class": "tick"}))
    return ticks


def _version_breaks(runs: list[list], x, top: float, bottom: float,
                    right: float) -> list[str]:
    """A dashed line and a label where one version's run ends and the next begins."""
    marks = []
    for before, after in zip(runs, runs[1:], strict=False):
        at = x(before[-1].last_at) + (x(after[0].at) - x(before[-1].last_at)) / 2
        old, new = before[-1].scoring_version, after[0].scoring_version
        label = f"scoring {new}"
        fits_right = at + 3 + _text_width(label) <= right
        marks.append(_el("g", {"class": "version-break", "data-from": old, "data-to": new}, (
            _el("line", {"x1": at, "x2": at, "y1": top, "y2": bottom, "stroke": BREAK,
                         "stroke-width": 1.5, "stroke-dasharray": "4 3"})
            + _text(at + 3 if fits_right else at - 3, top + 10, label, fill=BREAK,
                    **{"text-anchor": "start" if fits_right else "end"})
            + _title(f"scoring version changed from {old} to {new}: grades on either side "
                     "are not comparable")
        )))
    return marks


# --- sparkline -------------------------------------------------------------------------------


def sparkline(points: Sequence[GradePoint], width: int = 120, height: int = 28) -> SafeString:
    """The grades of `points` (oldest first), evenly spaced; the line breaks at a change of
    scoring version and at a scan with no letter (drawn as a grey mark at the bottom)."""
    pad = 3.0
    n = len(points)
    step = (width - 2 * pad) / max(n - 1, 1)

    def y(value: float) -> float:
        return height - pad - value / 100 * (height - 2 * pad)

    body = []
    index = {id(p): i for i, p in enumerate(points)}
    runs = _segments(points)
    for run in runs:
        parts = []
        for line in _lettered_lines(run):
            if len(line) > 1:
                coords = " ".join(f"{_num(pad + index[id(p)] * step)},{_num(y(p.points))}"
                                  for p in line)
                parts.append(_el("polyline", {"points": coords, "fill": "none",
                                              "stroke": INK, "stroke-width": 1.2}))
            if len(line) == 1 or line[-1] is points[-1]:  # a lone point, or the latest
                last = line[-1]
                parts.append(_el("circle", {"cx": pad + index[id(last)] * step,
                                            "cy": y(last.points), "r": 2,
                                            "fill": BAND_COLOURS.get(last.grade, INK)}))
        for point in run:
            if point.points is None:
                cx = pad + index[id(point)] * step
                parts.append(_el("rect", {"x": cx - 1.5, "y": height - pad - 3, "width": 3,
                                          "height": 3, "fill": NO_GRADE_COLOUR,
                                          "class": "no-letter"}))
        body.append(_el("g", {"class": "segment", "data-scoring-version":
                              run[0].scoring_version}, "".join(parts)))
    for before, after in zip(runs, runs[1:], strict=False):
        at = pad + (index[id(before[-1])] + 0.5) * step
        body.append(_el("line", {"class": "version-break", "x1": at, "x2": at, "y1": 0,
                                 "y2": height, "stroke": BREAK, "stroke-dasharray": "2 2",
                                 "data-from": before[-1].scoring_version,
                                 "data-to": after[0].scoring_version}))
    grades = [p.grade if p.has_letter else "none" for p in points]
    label = (f"last {n} grades: {', '.join(grades)}" if n else "no scan yet")
    return _svg("sparkline", width, height, label, body, count=n, grades=" ".join(grades),
                versions=" ".join(dict.fromkeys(p.scoring_version for p in points)),
                segments=len(runs), breaks=max(len(runs) - 1, 0))


# --- grade history ---------------------------------------------------------------------------


def grade_chart(points: Sequence[GradePoint], since: datetime, until: datetime,
                width: int = 760, height: int = 260) -> SafeString:
    """Points over time on 0–100 with the bands shaded; capped scans ringed; breaks between
    scoring versions. A bucket (downsampled) shows its min–max as a vertical bar."""
    left, right, top, bottom = 34.0, width - 24.0, 12.0, height - 24.0
    x = _time_axis(since, until, left, right)
    # The y axis starts low enough for the lowest points and for a slice of the F band, so
    # the bands a healthy endpoint lives in are not squeezed into the top third.
    lows = [p.points_min if p.points_min is not None else p.points for p in points
            if p.points is not None]
    floor = max(0, min(50, int(min(lows, default=100) // 10) * 10 - 10))

    def y(value: float) -> float:
        return bottom - (max(value, floor) - floor) / (100 - floor) * (bottom - top)

    body = []
    upper = 100
    for letter, least in scoring.BANDS:
        shown = max(least, floor)
        body.append(_el("g", {"class": f"band band-{letter}", "data-band": letter,
                              "data-from": least}, (
            _el("rect", {"x": left, "y": y(upper), "width": right - left,
                         "height": y(shown) - y(upper), "fill": BAND_COLOURS[letter],
                         "fill-opacity": 0.12})
            + _text(right + 4, (y(upper) + y(shown)) / 2 + 4, letter,
                    fill=BAND_COLOURS[letter], **{"font-weight": "bold"})
        )))
        body.append(_text(left - 4, y(shown) + 4, str(shown), fill=MUTED,
                          **{"text-anchor": "end", "class": "tick"}))
        upper = least
    body.append(_el("rect", {"x": left, "y": top, "width": right - left, "height": bottom - top,
                             "fill": "none", "stroke": LINE}))
    body += _time_ticks(since, until, x, bottom)
    runs = _segments(points)
    for run in runs:
        parts = []
        for line in _lettered_lines(run):
            if len(line) > 1:
                coords = " ".join(f"{_num(x(p.at))},{_num(y(p.points))}" for p in line)
                parts.append(_el("polyline", {"points": coords, "fill": "none", "stroke": INK,
                                              "stroke-width": 1.5}))
        for point in run:
            parts.append(_grade_mark(point, x(point.at), y, bottom))
        body.append(_el("g", {"class": "segment", "data-scoring-version":
                              run[0].scoring_version, "data-points": len(run)}, "".join(parts)))
    body += _version_breaks(runs, x, top, bottom, right)
    if not points:
        body.append(_text((left + right) / 2, (top + bottom) / 2, "no scan yet", fill=MUTED,
                          **{"text-anchor": "middle", "class": "empty"}))
    return _svg("grades", width, height, f"grade history: {len(points)} points", body,
                y_from=floor,
                count=len(points), scans=sum(p.scans for p in points),
                versions=" ".join(dict.fromkeys(p.scoring_version for p in points)),
                segments=len(runs), breaks=max(len(runs) - 1, 0),
                capped=sum(p.capped for p in points), since=_iso(since), until=_iso(until))


def _grade_mark(point: GradePoint, cx: float, y, bottom: float) -> str:
    data = {"data-at": _iso(point.at), "data-grade": point.grade,
            "data-points": None if point.points is None else point.points,
            "data-scans": point.scans, "data-scoring-version": point.scoring_version,
            "data-capped": point.capped or None}
    if point.scan_id is not None:
        data["data-scan"] = str(point.scan_id)
    what = (f"{point.scans} scans from {_when(point.at)} to {_when(point.last_at)}"
            if point.scans > 1 else _when(point.at))
    if point.points is None:
        title = f"{what}: no letter (insufficient evidence), scoring {point.scoring_version}"
        return _el("g", {"class": "mark no-letter", **data}, (
            _el("rect", {"x": cx - 3, "y": bottom - 8, "width": 6, "height": 6,
                         "fill": NO_GRADE_COLOUR})
            + _title(title)))
    grade = point.grade if point.has_letter else "no letter"
    title = f"{what}: {grade}, {_num(point.points)} points, scoring {point.scoring_version}"
    parts = []
    if point.scans > 1 and point.points_min is not None and point.points_max != point.points_min:
        title += f" (min {_num(point.points_min)}, max {_num(point.points_max)})"
        parts.append(_el("line", {"x1": cx, "x2": cx, "y1": y(point.points_min),
                                  "y2": y(point.points_max), "stroke": MUTED,
                                  "class": "range"}))
    if point.capped:
        caps = ", ".join(point.caps) if point.caps else f"{point.capped} capped"
        title += (f"; capped from {point.uncapped_grade} ({caps})" if point.uncapped_grade
                  else f"; {point.capped} of them capped")
        parts.append(_el("circle", {"cx": cx, "cy": y(point.points), "r": 6, "fill": "none",
                                    "stroke": BAND_COLOURS["F"], "stroke-width": 1.5,
                                    "class": "cap-mark"}))
    parts.append(_el("circle", {"cx": cx, "cy": y(point.points), "r": 3,
                                "fill": BAND_COLOURS.get(point.grade, NO_GRADE_COLOUR)}))
    return _el("g", {"class": "mark" + (" capped" if point.capped else ""), **data},
               "".join(parts) + _title(title))


# --- one check -------------------------------------------------------------------------------


def _format_value(value: float, check: scoring.Check) -> str:
    """By the one rounding rule of scans.grader.formatting, beside the check's bounds."""
    if check.op == "==":
        return "present" if value >= 0.5 else "absent"
    return formatting.check_value(value, check.unit, (check.pass_value, check.warn_value))


def check_chart(points: Sequence[CheckPoint], check_id: str, since: datetime, until: datetime,
                width: int = 480, height: int = 190) -> SafeString:
    """One check's values over time: points coloured by status, the pass and warn bounds of
    the current scoring version drawn over that version's runs only, breaks between versions,
    unmeasured scans as grey marks at the bottom."""
    check = scoring.check_by_id(check_id)
    left, right, top, bottom = 56.0, width - 16.0, 12.0, height - 24.0
    x = _time_axis(since, until, left, right)
    measured = [v for p in points for v in (p.value, p.value_max) if v is not None]
    if check.op == "==":
        high = 1.0
    else:
        high = max([*measured, float(check.pass_value), float(check.warn_value)]) * 1.15
        high = high or 1.0

    def y(value: float) -> float:
        return bottom - min(max(value, 0.0), high) / high * (bottom - top)

    body = [_el("rect", {"x": left, "y": top, "width": right - left, "height": bottom - top,
                         "fill": "#fff", "stroke": LINE})]
    for share in (0.0, 0.5, 1.0):
        value = high * share
        body.append(_text(left - 4, y(value) + 4, _format_value(value, check), fill=MUTED,
                          **{"text-anchor": "end", "class": "tick"}))
    body += _time_ticks(since, until, x, bottom)
    runs = _segments(points)
    for run in runs:
        if run[0].scoring_version != scoring.SCORING_VERSION or check.op == "==":
            continue
        x1, x2 = x(run[0].at), x(run[-1].last_at)
        x1, x2 = (x1 - 4, x2 + 4) if x1 == x2 else (x1, x2)
        for name, bound, colour in (("pass", check.pass_value, STATUS_COLOURS["pass"]),
                                    ("warn", check.warn_value, STATUS_COLOURS["warn"])):
            body.append(_el("g", {"class": f"bound bound-{name}", "data-bound": name,
                                  "data-value": float(bound),
                                  "data-scoring-version": scoring.SCORING_VERSION}, (
                _el("line", {"x1": x1, "x2": x2, "y1": y(bound), "y2": y(bound),
                             "stroke": colour, "stroke-dasharray": "5 3"})
                + _title(f"{name} {check.op} {_format_value(float(bound), check)} "
                         f"(scoring {scoring.SCORING_VERSION})")
            )))
    for run in runs:
        parts = []
        line = [p for p in run if p.value is not None]
        if len(line) > 1:
            coords = " ".join(f"{_num(x(p.at))},{_num(y(p.value))}" for p in line)
            parts.append(_el("polyline", {"points": coords, "fill": "none", "stroke": INK,
                                          "stroke-width": 1.2}))
        for point in run:
            parts.append(_check_mark(point, check, x(point.at), y, bottom))
        body.append(_el("g", {"class": "segment", "data-scoring-version":
                              run[0].scoring_version, "data-points": len(run)}, "".join(parts)))
    body += _version_breaks(runs, x, top, bottom, right)
    if not points:
        body.append(_text((left + right) / 2, (top + bottom) / 2, "no scan yet", fill=MUTED,
                          **{"text-anchor": "middle", "class": "empty"}))
    return _svg("check", width, height, f"{check.id}: {len(points)} points", body,
                check=check.id, count=len(points),
                versions=" ".join(dict.fromkeys(p.scoring_version for p in points)),
                segments=len(runs), breaks=max(len(runs) - 1, 0), since=_iso(since),
                until=_iso(until))


def _check_mark(point: CheckPoint, check: scoring.Check, cx: float, y, bottom: float) -> str:
    data = {"data-at": _iso(point.at), "data-value": point.value, "data-status": point.status,
            "data-scans": point.scans, "data-scoring-version": point.scoring_version}
    if point.scan_id is not None:
        data["data-scan"] = str(point.scan_id)
    what = (f"{point.scans} scans from {_when(point.at)} to {_when(point.last_at)}"
            if point.scans > 1 else _when(point.at))
    if point.value is None:
        return _el("g", {"class": "mark unmeasured", **data}, (
            _el("rect", {"x": cx - 3, "y": bottom - 8, "width": 6, "height": 6,
                         "fill": NO_GRADE_COLOUR})
            + _title(f"{what}: not measured ({point.status}), scoring {point.scoring_version}")))
    title = (f"{what}: {_format_value(point.value, check)} ({point.status}), "
             f"scoring {point.scoring_version}")
    parts = []
    if point.scans > 1:
        title += f"; {point.passed} pass, {point.warned} warn, {point.failed} fail"
        if point.value_min is not None and point.value_max != point.value_min:
            parts.append(_el("line", {"x1": cx, "x2": cx, "y1": y(point.value_min),
                                      "y2": y(point.value_max), "stroke": MUTED,
                                      "class": "range"}))
    parts.append(_el("circle", {"cx": cx, "cy": y(point.value), "r": 3,
                                "fill": STATUS_COLOURS.get(point.status, NO_GRADE_COLOUR)}))
    return _el("g", {"class": f"mark status-{point.status}", **data}, "".join(parts)
               + _title(title))


# --- badge -----------------------------------------------------------------------------------


def _text_width(text: str) -> float:
    """A close enough width for 11 px sans-serif (no font metrics on the server)."""
    narrow = sum(ch in "ilI.,:;()|' " for ch in text)
    return (len(text) - narrow) * 6.6 + narrow * 3.4


def badge(label: str, message: str, colour: str, *, grade: str | None, provisional: bool,
          title: str, source: str | None = None) -> SafeString:
    """A flat two-part badge (label | message), a standalone SVG document. `source`: "site"
    (measured by the site) or "pushed" (uploaded), None with no grade."""
    left = round(_text_width(label) + 12)
    right = round(_text_width(message) + 12)
    width, height = left + right, 20
    body = (
        _el("rect", {"width": left, "height": height, "fill": "#555", "rx": 3})
        + _el("rect", {"x": left, "width": right, "height": height, "fill": colour, "rx": 3})
        + _el("rect", {"x": left, "width": 4, "height": height, "fill": colour})
        + _el("g", {"fill": "#fff", "text-anchor": "middle",
                    "font-family": "Verdana, DejaVu Sans, sans-serif", "font-size": 11}, (
            _text(left / 2, 14, label)
            + _text(left + right / 2, 14, message, **{"class": "message"})
        ))
    )
    attrs = {"xmlns": "http://www.w3.org/2000/svg", "width": width, "height": height,
             "viewBox": f"0 0 {width} {height}", "role": "img", "aria-label": title,
             "class": "badge", "data-grade": grade or "none", "data-message": message,
             "data-colour": colour, "data-provisional": "true" if provisional else "false",
             "data-source": source or "none"}
    return mark_safe(_el("svg", attrs, _title(title) + body))  # noqa: S308 - escaped
