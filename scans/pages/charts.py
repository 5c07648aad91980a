"""Charts as inline SVG, rendered on the server: no JavaScript library, no CDN.

Geometry is computed here, in Python; the markup of the time charts and the sparkline is written
by scans/pages/chart_svg.py (string joins, every value escaped: eleven charts of up to 200 marks
a page were too slow through a template), the badge's by templates/charts/badge.svg.

- `sparkline`: the last grades of an endpoint, evenly spaced (dashboard).
- `grade_chart`: points over time on 0–100 with the grade bands shaded, capped scans ringed,
  and a visible break wherever the scoring version changes (grades of different versions are
  not comparable, so no line joins them).
- `check_chart`: one check's values over time with its pass and warn bounds and a legend.
- `series_chart`: headline numbers over time (TTFT p50/p95, tokens/s), one line per series.

Every chart marks a change of load profile or URL (and, where the values depend on it, of
scoring version) the same way, from one place (`_break`, `_changes`, `_version_breaks`): a
dashed blue line with "new load", "new URL" or "scoring X" beside it and what changed on hover
(the sparkline, too small for words, keeps the words for hover). The endpoint page's time
charts shade its maintenance windows (scans.maintenance's intervals) over the plot's height,
each with its times on hover, keyed "maintenance" at the left of the zone's caption.

Every mark stands for one scan (or, downsampled, a bucket of scans) and a one-scan mark links
to its scan page. A scan that measured nothing is a gap (a dashed vertical line with the reason
on hover), never a point at zero. The data each mark stands for is carried in data-*
attributes (data-at, data-points, data-grade, data-value, data-status, data-scan…) so tests and
curious readers can read the numbers back. Colours are presentation attributes, so a chart
renders the same without the stylesheet.
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any, TypeAlias

from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from scans.grader import (
    BANDS,
    CHECK_LABELS,
    INSUFFICIENT_EVIDENCE,
    SCORING_VERSION,
    Check,
    check_by_id,
    format_check_value,
    format_number,
    format_percent,
    nice_ticks,
    tick_decimals,
)
from scans.history.check_results import CheckPoint
from scans.history.grades import GradePoint
from scans.pages import chart_svg

__all__ = ["BAND_COLOURS", "MAINTENANCE_COLOUR", "STATUS_COLOURS", "Series", "SeriesPoint",
           "badge", "changes", "check_chart", "check_label", "grade_chart", "series_chart",
           "sparkline"]

BAND_COLOURS = {"A": "#1a9c5b", "B": "#6fae2b", "C": "#d9a400", "D": "#e07b1a", "F": "#d23b3b"}
NO_GRADE_COLOUR = "#8a90a0"
STATUS_COLOURS = {"pass": "#1a9c5b", "warn": "#d9a400", "fail": "#d23b3b",
                  INSUFFICIENT_EVIDENCE: NO_GRADE_COLOUR, "preview": NO_GRADE_COLOUR}
INK, MUTED, LINE, BREAK = "#1d2230", "#5c6478", "#dde1ea", "#3451d1"
COLOURS = {"ink": INK, "muted": MUTED, "line": LINE, "break": BREAK, "none": NO_GRADE_COLOUR}
STATUS_WORDS = {INSUFFICIENT_EVIDENCE: "insufficient evidence", "preview": "preview"}
OPS = {"<=": "≤", ">=": "≥", "==": "="}


def check_label(check_id: str) -> str:
    """A check as people read it (the one list, shared with report.html); the id otherwise."""
    return CHECK_LABELS.get(check_id, check_id)


# --- building blocks -------------------------------------------------------------------------


def _num(value: float) -> str:
    """A coordinate or figure: at most two decimals, no trailing zeros."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _data(attrs: Mapping[str, object]) -> list[tuple[str, str]]:
    """data-* attributes as (name, text) pairs; None is left out, floats are trimmed."""
    pairs = []
    for key, value in attrs.items():
        if value is None:
            continue
        pairs.append((f"data-{key.replace('_', '-')}",
                      _num(value) if isinstance(value, float) else str(value)))
    return pairs


def _render(template: str, context: dict) -> SafeString:
    return mark_safe(render_to_string(f"charts/{template}", {"colours": COLOURS, **context})  # noqa: S308 - autoescaped template
                     .strip())


def _svg(draw: Callable[[Mapping[str, Any]], str], context: dict) -> SafeString:
    # chart_svg escapes every value it writes
    return mark_safe(draw({"colours": COLOURS, **context}))  # noqa: S308


# What a chart plots: a grade, a check's value or a point of a drawn series, read by the
# attributes they share (getattr for those only some have).
Point: TypeAlias = Any


def _series_key(point: Point) -> tuple:
    return (point.scoring_version, getattr(point, "profile_key", ""), getattr(point, "url", ""))


def _segments(points: Sequence) -> list[list]:
    """Consecutive runs of points of one scoring version, one load profile, one URL and one
    server as it states itself (a change of any breaks the line: grades of another version,
    another load or another server are not comparable). A point whose server is unknown (it
    said nothing, or an hour read from the rollups) stays in the run it follows: unknown is
    not a change."""
    runs: list[list] = []
    server = ""  # the current run's server, once a point of it said
    for point in points:
        said = getattr(point, "server", "")
        if (runs and _series_key(runs[-1][-1]) == _series_key(point)
                and (not said or not server or said == server)):
            runs[-1].append(point)
            server = server or said
        else:
            runs.append([point])
            server = said
    return runs


def _server_of(run: Sequence) -> str:
    """The server a run's points said they were ("" when none said)."""
    return next((point.server for point in run if getattr(point, "server", "")), "")


def _measured_lines(run: Sequence, value: Callable) -> list[list]:
    """The stretches of a run between unmeasured points (a line never crosses a gap)."""
    lines: list[list] = [[]]
    for point in run:
        if value(point) is None:
            lines.append([])
        else:
            lines[-1].append(point)
    return [line for line in lines if line]


def _iso(at: datetime) -> str:
    return at.isoformat()


def _when(at: datetime) -> str:
    """A mark's time in the viewer's zone (Django's active time zone), named."""
    return _when_in(at, timezone.get_current_timezone())


# The charts of one page share their buckets' times, each written for a hover title or two.
@functools.lru_cache(maxsize=4096)
def _when_in(at: datetime, zone: tzinfo) -> str:
    local = at.astimezone(zone)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname() or ''}".rstrip()


def _what(point: Point) -> str:
    counted = getattr(point, "counted", "scans")  # a probe series' buckets count probes
    return (f"{point.scans} {counted} from {_when(point.at)} to {_when(point.last_at)}"
            if point.scans > 1 else _when(point.at))


def _scan_href(scan_id: uuid.UUID | None) -> str | None:
    return reverse("scan-detail", args=[scan_id]) if scan_id is not None else None


def _text_width(text: str, size: float = 11.0) -> float:
    """A close enough width for sans-serif at `size` (no font metrics on the server)."""
    narrow = sum(ch in "ilI.,:;()|' " for ch in text)
    return ((len(text) - narrow) * 6.6 + narrow * 3.4) * size / 11.0


# On a 390 px phone a chart is about PHONE_CHART_PX wide (the page's and the card's padding
# taken off), so the SVG is scaled by PHONE_CHART_PX / its width. The axes are drawn twice:
# for wide screens at 11 units, and for phones (shown by endpoints.css below 760 px) at a size
# that is at least PHONE_MIN_FONT_PX once scaled, with fewer ticks so the labels still fit.
PHONE_CHART_PX = 340
PHONE_MIN_FONT_PX = 10.5
WIDE_FONT = 11


def phone_font(width: float) -> int:
    """The font size, in the SVG's units, that shows as PHONE_MIN_FONT_PX on a phone."""
    return math.ceil(PHONE_MIN_FONT_PX * width / PHONE_CHART_PX)


# Round steps for a time axis, shortest first; beyond the last, multiples of it.
TIME_STEPS = (*(timedelta(minutes=m) for m in (1, 2, 5, 10, 15, 30)),
              *(timedelta(hours=h) for h in (1, 2, 3, 6, 12)),
              *(timedelta(days=d) for d in (1, 2, 7, 14, 28)))


def time_ticks(since: datetime, until: datetime, most: int, zone: tzinfo) -> list[datetime]:
    """Round times in `zone` within [since, until], at most `most` + 1 of them: every 15
    minutes on the clock, every 6 hours from midnight, every day at midnight…"""
    span = until - since
    most = max(1, most)
    step = next((s for s in TIME_STEPS if span / s <= most), None)
    if step is None:
        step = TIME_STEPS[-1] * math.ceil(span / (TIME_STEPS[-1] * most))
    start, end = since.astimezone(zone), until.astimezone(zone)
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0)
    # Arithmetic on the zone's wall clock (one tzinfo on both sides), so ticks fall on round
    # local times; x() places each by its real instant.
    if step < timedelta(days=1):
        at = midnight + step * math.ceil((start - midnight) / step)
    else:
        at = midnight if start == midnight else midnight + timedelta(days=1)
    ticks = []
    while at <= end:
        ticks.append(at)
        at += step
    return ticks


def _time_label(at: datetime, step_under_a_day: bool) -> str:
    if step_under_a_day and (at.hour, at.minute) != (0, 0):
        return f"{at:%H:%M}"
    return f"{at:%b} {at.day}"


def zone_text(zone: tzinfo, at: datetime, named: bool = True) -> str:
    """The time axis' caption: "times in Europe/Paris (UTC+01:00)", or "times in UTC"; with
    `named` False, only the offset ("times in UTC+01:00", where room is short)."""
    name = getattr(zone, "key", None) or str(zone)
    offset = at.astimezone(zone).utcoffset() or timedelta(0)
    if name.upper() in ("UTC", "ETC/UTC", "GMT") and not offset:
        return "times in UTC"
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(int(offset.total_seconds())) // 60
    utc = f"UTC{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    return f"times in {name} ({utc})" if named else f"times in {utc}"


@dataclass
class _Frame:
    """The plot area of a time chart and its two axes, in the viewer's time zone."""

    width: int
    height: int
    left: float
    right: float
    top: float
    bottom: float
    since: datetime
    until: datetime
    high: float = 100.0
    zone: tzinfo = field(default_factory=timezone.get_current_timezone)

    @property
    def phone_font(self) -> int:
        return phone_font(self.width)

    def x(self, at: datetime) -> float:
        span = max((self.until - self.since).total_seconds(), 1.0)
        share = (at - self.since).total_seconds() / span
        return self.left + min(max(share, 0.0), 1.0) * (self.right - self.left)

    def y(self, value: float) -> float:
        return self.bottom - min(max(value, 0.0), self.high) / self.high * (self.bottom - self.top)

    def x_ticks(self, size: float) -> list[dict]:
        """Round times along the bottom, as many as fit at font `size`, none cut at an edge."""
        most = int((self.right - self.left) // (size * 5.5))
        ticks = time_ticks(self.since, self.until, most, self.zone)
        short = len(ticks) < 2 or ticks[1] - ticks[0] < timedelta(days=1)
        placed = []
        for at in ticks:
            label, x = _time_label(at, short), self.x(at)
            half = _text_width(label, size) / 2
            if x - half < 1 or x + half > self.width - 1:
                continue
            placed.append({"x": _num(x), "y": _num(self.bottom + size + 3), "label": label,
                           "anchor": "middle", "at": _iso(at)})
        return placed

    def axes(self, y_ticks: Sequence[tuple[float, str]], narrow_y: Sequence[float]) -> dict:
        """Both drawings of the axes (wide screens, phones): y ticks (value, label) right of
        the plot's left edge on phones (inside the plot), the time ticks and the zone."""
        size = self.phone_font
        zone = zone_text(self.zone, self.until)
        wide_y = [{"x": _num(self.left - 4), "y": _num(self.y(v) + 4), "label": text,
                   "anchor": "end"} for v, text in y_ticks]
        narrow = []
        for value, text in y_ticks:
            if value not in narrow_y:
                continue
            y = self.y(value)
            # above its grid line, or below it for the top one (the top margin is narrow)
            y = y + size + 1 if y - size < self.top else y - 3
            narrow.append({"x": _num(self.left + 3), "y": _num(y), "label": text,
                           "anchor": "start"})
        return {
            "grid": [_num(self.y(v)) for v, _ in y_ticks],
            "wide": {"size": WIDE_FONT, "y_ticks": wide_y, "x_ticks": self.x_ticks(WIDE_FONT),
                     "zone": {"x": _num(self.right), "y": _num(self.bottom + 2 * WIDE_FONT + 6),
                              "text": zone}},
            "narrow": {"size": size, "y_ticks": narrow, "x_ticks": self.x_ticks(size),
                       "zone": {"x": _num(self.right), "y": _num(self.bottom + 2 * size + 6),
                                "text": zone}},
        }

    def context(self, kind: str, label: str, data: Mapping[str, object]) -> dict:
        zone = getattr(self.zone, "key", None) or str(self.zone)
        return {"kind": kind, "label": label, "width": self.width, "height": self.height,
                "left": _num(self.left), "top": _num(self.top), "bottom": _num(self.bottom),
                "right": _num(self.right),
                "plot_width": _num(self.right - self.left),
                "plot_height": _num(self.bottom - self.top),
                "data": _data({**data, "timezone": zone})}

    def empty(self) -> dict:
        return {"x": _num((self.left + self.right) / 2), "y": _num((self.top + self.bottom) / 2),
                "text": "no scan yet"}


def axis_margin(width: int) -> float:
    """Room under the plot for a row of time ticks and the zone's caption at either size."""
    return 2.0 * max(WIDE_FONT, phone_font(width)) + 10.0


def nice_axis(values: Sequence[float], most: int = 5, floor: float = 0.0,
              cap: float | None = None) -> list[float]:
    """Round ticks from 0 to at least the highest value (and `floor`), at most `cap`."""
    high = max([*values, floor], default=0.0) or 1.0
    if cap is not None:
        high = min(high, cap)
    ticks = nice_ticks(0.0, high, most)
    return [t for t in ticks if cap is None or t <= cap + 1e-12]


def tick_text(value: float, unit: str, step: float) -> str:
    """A tick's label, as round as its step: "150 ms", "2.5 %", "1.5×", "40"."""
    if unit == "share":
        return f"{value * 100:,.{tick_decimals(step * 100)}f} %"
    text = f"{value:,.{tick_decimals(step)}f}"
    return {"ms": f"{text} ms", "ratio": f"{text}×"}.get(unit, text)


def every_other(values: Sequence[float], keep: int = 4) -> list[float]:
    """At most about `keep` of `values` for a phone's axis, the first and the last kept."""
    if len(values) <= keep:
        return list(values)
    return list(values[::math.ceil((len(values) - 1) / (keep - 1))])


def _break(before: Point, after: Point, versions: bool = True,
           servers: tuple[str, str] = ("", "")) -> dict:
    """What changed between two runs, as every chart marks it: the scoring version (unless
    `versions` is False), else the load profile, else the URL, else the server as it states
    itself (`servers`: each run's; `label` is drawn beside the dashed line, `title` is its
    hover text)."""
    old, new = before.scoring_version, after.scoring_version
    if versions and old != new:
        return {"kind": "version", "old": old, "new": new, "label": f"scoring {new}",
                "title": f"scoring version changed from {old} to {new}: grades on either side "
                         "are not comparable"}
    was, now = getattr(before, "profile", ""), getattr(after, "profile", "")
    same_load = getattr(before, "profile_key", "") == getattr(after, "profile_key", "")
    same_url = getattr(before, "url", "") == getattr(after, "url", "")
    if same_load and same_url and all(servers) and servers[0] != servers[1]:
        was, now = servers
        return {"kind": "server", "old": was, "new": now, "label": "new server",
                "title": f"the server changed from {was} to {now} (as it states itself: "
                         "engine, version, model or hardware), so the values on either side "
                         "are not comparable"}
    if not same_load or same_url:
        return {"kind": "load", "old": was, "new": now, "label": "new load",
                "title": f"load changed from {was} to {now}: values on either side are not "
                         "comparable"}
    was, now = before.url, after.url
    return {"kind": "url", "old": was, "new": now, "label": "new URL",
            "title": f"URL changed from {was} to {now}: another server (or another route to "
                     "it), so the values on either side are not comparable"}


def _changes(runs: Sequence[Sequence], versions: bool = True) -> list[dict]:
    """One mark per boundary between runs (see `_segments`): what changed (`_break`), the last
    point before it (`last`) and the times either side (`before`, `after`). With `versions`
    False, a boundary where only the scoring version changed is no mark (a headline figure
    such as TTFT in ms does not depend on the scoring)."""
    marks = []
    for before, after in zip(runs, runs[1:], strict=False):
        last, first = before[-1], after[0]
        servers = (_server_of(before), _server_of(after))
        same_server = not all(servers) or servers[0] == servers[1]
        if not versions and _series_key(last)[1:] == _series_key(first)[1:] and same_server:
            continue
        marks.append({**_break(last, first, versions, servers), "last": last,
                      "before": last.last_at, "after": first.at})
    return marks


def changes(points: Sequence, versions: bool = True) -> list[dict]:
    """The changes of scoring version, load profile and URL along `points` (oldest first;
    GradePoint or CheckPoint), for a chart drawn from other points over the same scans (the
    endpoint page's headline and capacity charts take the grade history's, with `versions`
    False)."""
    return _changes(_segments(points), versions)


def _version_breaks(marks: Sequence[dict], frame: _Frame) -> list[dict]:
    """Where one version's (or load's, or URL's) run ends and the next begins: a dashed line,
    and a label at the top of the plot, moved down a row where it would touch the one before
    (two changes close together)."""
    placed: list[dict] = []
    taken: dict[str, list[tuple[float, float, int]]] = {"wide": [], "narrow": []}
    for change in marks:
        if change["after"] < frame.since or change["before"] > frame.until:
            continue
        at = (frame.x(change["before"]) + frame.x(change["after"])) / 2
        drawn = {}
        for name, size in (("wide", WIDE_FONT), ("narrow", frame.phone_font)):
            width = _text_width(change["label"], size)
            fits_right = at + 3 + width <= frame.right
            x0 = at + 3 if fits_right else at - 3 - width
            row = 0
            while any(row == r and x0 < b + 4 and a < x0 + width + 4
                      for a, b, r in taken[name]):
                row += 1
            taken[name].append((x0, x0 + width, row))
            drawn[name] = {"x": _num(at + 3 if fits_right else at - 3),
                           "y": _num(frame.top + size + row * (size + 2)), "size": size,
                           "anchor": "start" if fits_right else "end"}
        placed.append({key: value for key, value in change.items()
                       if key not in ("last", "before", "after")}
                      | {"x": _num(at), "text": drawn, "at": _iso(change["after"])})
    return placed


# --- maintenance windows ---------------------------------------------------------------------

MAINTENANCE_COLOUR = "#7d55c7"
MAINTENANCE_OPACITY = 0.16
MAINTENANCE_MIN_WIDTH = 3.0  # a 1-hour window over 90 days is still a visible band


def _span_text(start: datetime, end: datetime) -> str:
    """'2026-11-01 02:00 CET to 03:00 CET' (the end's date only when it is another day)."""
    a, b = timezone.localtime(start), timezone.localtime(end)
    until = f"{b:%H:%M} {b.tzname() or ''}".rstrip() if a.date() == b.date() else _when(end)
    return f"{_when(start)} to {until}"


def _maintenance(intervals: Sequence[tuple[datetime, datetime]], frame: _Frame,
                 axes: dict) -> dict | None:
    """The endpoint's maintenance windows (scans.maintenance's merged intervals) as shaded
    spans over the plot's full height, each with its times on hover, and a key "maintenance"
    at the left of the zone's caption row at both sizes (the caption drops the zone's name
    where the two would touch). None when no window falls in the range."""
    spans = []
    for start, end in intervals:
        if end <= frame.since or start >= frame.until:
            continue
        x1, x2 = frame.x(start), frame.x(end)
        if x2 - x1 < MAINTENANCE_MIN_WIDTH:
            middle = (x1 + x2) / 2
            x1 = min(max(middle - MAINTENANCE_MIN_WIDTH / 2, frame.left),
                     frame.right - MAINTENANCE_MIN_WIDTH)
            x2 = x1 + MAINTENANCE_MIN_WIDTH
        spans.append({"x": _num(x1), "width": _num(x2 - x1), "from": _iso(start),
                      "to": _iso(end),
                      "title": f"maintenance, {_span_text(start, end)}: its time is left out "
                               "of the SLO windows and alerts are held"})
    if not spans:
        return None
    keys = {}
    for name in ("wide", "narrow"):
        axis = axes[name]
        size = axis["size"]
        x = frame.left if name == "wide" else 4.0
        y = float(axis["zone"]["y"])
        text_x = x + 1.6 * size
        ends = text_x + _text_width("maintenance", size)
        zone = axis["zone"]
        if ends + size > float(zone["x"]) - _text_width(zone["text"], size):
            zone["text"] = zone_text(frame.zone, frame.until, named=False)
        keys[name] = {"x": _num(x), "y": _num(y - 0.8 * size), "width": _num(1.2 * size),
                      "height": _num(0.9 * size), "text_x": _num(text_x), "text_y": _num(y),
                      "size": size}
    return {"colour": MAINTENANCE_COLOUR, "opacity": MAINTENANCE_OPACITY, "spans": spans,
            "keys": keys}


def _legend(items: list[dict], left: float, y: float, size: float = WIDE_FONT) -> list[dict]:
    """A row of legend entries (a short line in the entry's style, then its label) whose text
    is `size` units high, centred on `y`."""
    placed, x = [], left
    scale = size / WIDE_FONT
    for item in items:
        placed.append({**item, "x": _num(x), "x2": _num(x + 18 * scale), "y": _num(y),
                       "text_x": _num(x + 22 * scale), "text_y": _num(y + 4 * scale)})
        x += (22 + 14) * scale + _text_width(item["label"], size)
    return placed


def _legends(items: list[dict], frame: _Frame) -> dict:
    """The legend at both sizes, in the top margin."""
    narrow = _legend(items, 4.0, frame.phone_font - 3.0, frame.phone_font)
    while len(narrow) > 1:  # on a phone, what does not fit on the row is left to the page text
        last = narrow[-1]
        if float(last["text_x"]) + _text_width(last["label"], frame.phone_font) <= frame.width:
            break
        narrow.pop()
    return {"wide": _legend(items, frame.left, 12.0), "narrow": narrow}


def _gap(point: Point, cx: float, title: str, data: dict, cls: str) -> dict:
    """An unmeasured point: a dashed line across the plot, the reason on hover; no value."""
    return {"cls": f"mark {cls}", "data": _data(data), "gap": True, "cx": _num(cx),
            "hover_x": _num(cx - 4), "title": title,
            "href": _scan_href(getattr(point, "scan_id", None))}


# --- sparkline -------------------------------------------------------------------------------


def sparkline(points: Sequence[GradePoint], width: int = 120, height: int = 28) -> SafeString:
    """The grades of `points` (oldest first), evenly spaced; the line breaks at a change of
    scoring version and at a scan with no letter (a thin grey gap, not a point at zero)."""
    pad = 3.0
    n = len(points)
    step = (width - 2 * pad) / max(n - 1, 1)
    index = {id(p): i for i, p in enumerate(points)}

    def cx(point: GradePoint) -> float:
        return pad + index[id(point)] * step

    def cy(point: Any) -> float:  # a graded point: its points are set
        return height - pad - point.points / 100 * (height - 2 * pad)

    segments = []
    runs = _segments(points)
    for run in runs:
        lines, dots = [], []
        for line in _measured_lines(run, lambda p: p.points):
            if len(line) > 1:
                lines.append(" ".join(f"{_num(cx(p))},{_num(cy(p))}" for p in line))
            if len(line) == 1 or line[-1] is points[-1]:  # a lone point, or the latest
                last = line[-1]
                dots.append({"cx": _num(cx(last)), "cy": _num(cy(last)),
                             "fill": BAND_COLOURS.get(last.grade, INK)})
        segments.append({"version": run[0].scoring_version, "lines": lines, "dots": dots,
                         "no_letter": [_num(cx(p) - 0.5) for p in run if p.points is None]})
    # The same changes, words and colour as the grade chart's (a dashed line, its words on
    # hover): no room for a label at this size.
    breaks = []
    for change in _changes(runs):
        x = pad + (index[id(change["last"])] + 0.5) * step
        breaks.append({"x": _num(x), "hover_x": _num(x - 3),
                       **{k: v for k, v in change.items() if k not in ("last", "before", "after")}})
    grades = [p.grade if p.has_letter else "down" if p.down else "none" for p in points]
    label = f"last {n} grades: {', '.join(grades)}" if n else "no scan yet"
    return _svg(chart_svg.sparkline, {
        "width": width, "height": height, "label": label, "segments": segments,
        "breaks": breaks,
        "data": _data({"count": n, "grades": " ".join(grades),
                       "versions": " ".join(dict.fromkeys(p.scoring_version for p in points)),
                       "segments": len(runs), "breaks": max(len(runs) - 1, 0)}),
    })


# --- grade history ---------------------------------------------------------------------------


def grade_chart(points: Sequence[GradePoint], since: datetime, until: datetime,
                width: int = 760, height: int = 300,
                maintenance: Sequence[tuple[datetime, datetime]] = ()) -> SafeString:
    """Points over the whole range [since, until] on 0–100 with the bands shaded; capped scans
    ringed; breaks between scoring versions, loads and URLs; `maintenance` (the endpoint's
    windows, scans.maintenance) shaded and keyed. A bucket (downsampled) shows its min–max as
    a vertical bar. The plot starts 14 px below the top so a ringed point at 100 is whole."""
    frame = _Frame(width, height, 34.0, width - 24.0, 14.0, height - axis_margin(width), since,
                   until, 100.0)
    size = frame.phone_font
    bands, upper = [], 100
    for letter, least in BANDS:
        middle = (frame.y(upper) + frame.y(least)) / 2
        tall = frame.y(least) - frame.y(upper)
        narrow = min(size, tall - 2)
        bands.append({"letter": letter, "least": least, "colour": BAND_COLOURS[letter],
                      "y": _num(frame.y(upper)), "height": _num(tall),
                      "label_x": _num(frame.right + 4), "label_y": _num(middle + 4),
                      "narrow": {"x": _num(frame.right - 3), "y": _num(middle + narrow * 0.36),
                                 "size": _num(narrow)}})
        upper = least
    bounds = sorted({0, 100, *(least for _, least in BANDS)})
    axes = frame.axes([(float(v), str(v)) for v in bounds], narrow_y=[0.0, 60.0, 100.0])
    axes["grid"] = []  # the bands are the grid
    runs = _segments(points)
    segments = []
    for run in runs:
        lines = [" ".join(f"{_num(frame.x(p.at))},{_num(frame.y(p.points))}" for p in line)
                 for line in _measured_lines(run, lambda p: p.points) if len(line) > 1]
        segments.append({"version": run[0].scoring_version, "count": len(run), "lines": lines,
                         "stroke": INK, "marks": [_grade_mark(p, frame) for p in run]})
    context = frame.context("grades", f"grade history: {len(points)} points", {
        "y_from": 0, "y_to": 100, "count": len(points), "scans": sum(p.scans for p in points),
        "versions": " ".join(dict.fromkeys(p.scoring_version for p in points)),
        "segments": len(runs), "breaks": max(len(runs) - 1, 0),
        "capped": sum(p.capped for p in points), "since": _iso(since), "until": _iso(until)})
    return _svg(chart_svg.chart, {**context, "bands": bands, "axes": axes,
                                  "maintenance": _maintenance(maintenance, frame, axes),
                                  "segments": segments,
                                  "breaks": _version_breaks(_changes(runs), frame),
                                  "empty": None if points else frame.empty()})


def _grade_mark(point: GradePoint, frame: _Frame) -> dict:
    data = {"at": _iso(point.at), "grade": point.grade, "points": point.points,
            "scans": point.scans, "scoring_version": point.scoring_version,
            "profile": point.profile or None, "capped": point.capped or None,
            "down": point.down or None,
            "scan": str(point.scan_id) if point.scan_id is not None else None}
    cx = frame.x(point.at)
    if point.points is None and point.down:  # down is a state, not a grade: a gap, named
        title = (f"{_what(point)}: down (the endpoint did not answer), no grade, "
                 f"scoring {point.scoring_version}")
        return _gap(point, cx, title, data, "no-letter down")
    if point.points is None:
        title = (f"{_what(point)}: no letter (insufficient evidence), "
                 f"scoring {point.scoring_version}")
        return _gap(point, cx, title, data, "no-letter")
    grade = point.grade if point.has_letter else "no letter"
    title = f"{_what(point)}: {grade}, {_num(point.points)} points, scoring {point.scoring_version}"
    mark: dict[str, Any] = {"cls": "mark" + (" capped" if point.capped else ""), "data": _data(data),
            "cx": _num(cx), "cy": _num(frame.y(point.points)),
            "fill": BAND_COLOURS.get(point.grade, NO_GRADE_COLOUR),
            "href": _scan_href(point.scan_id)}
    low, high = point.points_min, point.points_max  # both set or both None (one row's min/max)
    if point.scans > 1 and low is not None and high is not None and high != low:
        title += f" (min {_num(low)}, max {_num(high)})"
        mark["range"] = (_num(frame.y(low)), _num(frame.y(high)))
    if point.capped:
        caps = ", ".join(point.caps) if point.caps else f"{point.capped} capped"
        title += (f"; capped from {point.uncapped_grade} ({caps})" if point.uncapped_grade
                  else f"; {point.capped} of them capped")
        mark["ring"] = BAND_COLOURS["F"]
    if point.scan_id is not None:
        title += " (click to open the scan)"
    mark["title"] = title
    return mark


# --- one check -------------------------------------------------------------------------------


def _format_value(value: float, check: Check) -> str:
    """By the one rounding rule of scans.grader.formatting, beside the check's bounds."""
    if check.op == "==":
        return "present" if value >= 0.5 else "absent"
    return format_check_value(value, check.unit, (check.pass_value, check.warn_value))


def check_chart(points: Sequence[CheckPoint], check_id: str, since: datetime, until: datetime,
                width: int = 480, height: int = 230,
                reasons: Mapping[uuid.UUID, str] | None = None,
                maintenance: Sequence[tuple[datetime, datetime]] = ()) -> SafeString:
    """One check's values over [since, until]: points coloured by status, the pass and warn
    bounds of the current scoring version over that version's runs (named in the legend),
    breaks between versions, loads and URLs (as the grade chart's), unmeasured scans as gaps
    with `reasons[scan_id]` on hover, `maintenance` windows shaded and keyed."""
    check = check_by_id(check_id)
    reasons = reasons or {}
    boolean = check.op == "=="
    frame = _Frame(width, height, 56.0, width - 16.0, 28.0, height - axis_margin(width), since,
                   until)
    measured = [v for p in points for v in (p.value, p.value_max) if v is not None]
    if boolean:
        frame.high, ticks = 1.0, [(0.0, "absent"), (1.0, "present")]
    else:
        values = nice_axis([v * 1.05 for v in measured],
                           floor=max(float(check.pass_value), float(check.warn_value)),
                           cap=1.0 if check.unit == "share" else None)
        frame.high = values[-1]
        ticks = [(v, tick_text(v, check.unit, values[1] - values[0])) for v in values]
    axes = frame.axes(ticks, narrow_y=every_other([v for v, _ in ticks]))
    runs = _segments(points)
    # A bound that grows with the prompt's length is not one line: each point's status says
    # how it fared, and the legend gives the rule.
    follows_prompt = check.per_1k_input_tokens is not None
    bounds = []
    for run in runs:
        if run[0].scoring_version != SCORING_VERSION or boolean or follows_prompt:
            continue
        x1, x2 = frame.x(run[0].at), frame.x(run[-1].last_at)
        x1, x2 = (x1 - 4, x2 + 4) if x1 == x2 else (x1, x2)
        for name, bound in (("pass", check.pass_value), ("warn", check.warn_value)):
            bounds.append({"name": name, "value": _num(float(bound)),
                           "version": SCORING_VERSION, "colour": STATUS_COLOURS[name],
                           "x1": _num(x1), "x2": _num(x2), "y": _num(frame.y(float(bound))),
                           "title": f"{name} {OPS[check.op]} {_format_value(float(bound), check)} "
                                    f"(scoring {SCORING_VERSION})"})
    legend = []
    if not boolean:
        legend = [{"key": name, "colour": STATUS_COLOURS[name], "dash": "5 3",
                   "stroke_width": 1.5,
                   "label": f"{name} {OPS[check.op]} {_format_value(float(bound), check)}"}
                  for name, bound in (("pass", check.pass_value), ("warn", check.warn_value))]
        if follows_prompt:  # no line to key: each point's colour is its status
            legend = [{"key": "bounds", "colour": STATUS_COLOURS["warn"], "dash": "",
                       "stroke_width": 1.5, "label": "bounds grow with the prompt's length"}]
    legend.append({"key": "unmeasured", "colour": NO_GRADE_COLOUR, "dash": "2 3",
                   "stroke_width": 1.5, "label": "not measured"})
    segments = []
    for run in runs:
        lines = [" ".join(f"{_num(frame.x(p.at))},{_num(frame.y(p.value))}" for p in line)
                 for line in _measured_lines(run, lambda p: p.value) if len(line) > 1]
        segments.append({"version": run[0].scoring_version, "count": len(run), "lines": lines,
                         "stroke": INK,
                         "marks": [_check_mark(p, check, frame, reasons) for p in run]})
    label = f"{check_label(check.id)} ({check.id}): {len(points)} points"
    context = frame.context("check", label, {
        "check": check.id, "count": len(points),
        "versions": " ".join(dict.fromkeys(p.scoring_version for p in points)),
        "segments": len(runs), "breaks": max(len(runs) - 1, 0),
        "y_to": frame.high, "since": _iso(since), "until": _iso(until)})
    return _svg(chart_svg.chart, {**context, "axes": axes, "bounds": bounds,
                                  "legend": _legends(legend, frame),
                                  "maintenance": _maintenance(maintenance, frame, axes),
                                  "segments": segments,
                                  "breaks": _version_breaks(_changes(runs), frame),
                                  "empty": None if points else frame.empty()})


def _check_mark(point: CheckPoint, check: Check, frame: _Frame,
                reasons: Mapping[uuid.UUID, str]) -> dict:
    data = {"at": _iso(point.at), "value": point.value, "status": point.status,
            "scans": point.scans, "scoring_version": point.scoring_version,
            "scan": str(point.scan_id) if point.scan_id is not None else None}
    cx = frame.x(point.at)
    if point.value is None:
        why = reasons.get(point.scan_id) if point.scan_id is not None else None
        status = STATUS_WORDS.get(point.status, point.status)
        title = f"{_what(point)}: not measured ({why or status}), scoring {point.scoring_version}"
        return _gap(point, cx, title, {**data, "reason": why or status}, "unmeasured")
    title = (f"{_what(point)}: {_format_value(point.value, check)} ({point.status}), "
             f"scoring {point.scoring_version}")
    mark: dict[str, Any] = {"cls": f"mark status-{point.status}", "data": _data(data), "cx": _num(cx),
            "cy": _num(frame.y(point.value)),
            "fill": STATUS_COLOURS.get(point.status, NO_GRADE_COLOUR),
            "href": _scan_href(point.scan_id)}
    if point.scans > 1:
        title += f"; {point.passed} pass, {point.warned} warn, {point.failed} fail"
        low, high = point.value_min, point.value_max  # both set or both None
        if low is not None and high is not None and high != low:
            mark["range"] = (_num(frame.y(low)), _num(frame.y(high)))
    mark["title"] = title
    return mark


# --- headline numbers ------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesPoint:
    """One scan's (or one bucket's) headline number; `value` None when not measured."""

    at: datetime
    value: float | None
    scans: int = 1
    last_at: datetime | None = None
    scan_id: uuid.UUID | None = None
    scoring_version: str = ""
    counted: str = "scans"  # what `scans` counts, in a bucket's words


@dataclass(frozen=True)
class Series:
    key: str
    label: str
    colour: str
    dash: str = ""
    points: Sequence[SeriesPoint] = field(default_factory=tuple)


def series_chart(name: str, title: str, unit: str, series: Sequence[Series], since: datetime,
                 until: datetime, width: int = 480, height: int = 230,
                 changes: Sequence[dict] = (),
                 maintenance: Sequence[tuple[datetime, datetime]] = ()) -> SafeString:
    """Headline numbers over [since, until]: one line per series (named in the legend), each
    point linking to its scan, unmeasured scans as gaps; `changes` (of the same scans, from
    `changes()`) marked as the grade chart marks them, `maintenance` windows shaded and
    keyed."""
    frame = _Frame(width, height, 56.0, width - 16.0, 28.0, height - axis_margin(width), since,
                   until)
    share = unit == "share"  # from 0 to 1, shown as a percentage on an axis up to 100 %
    values = nice_axis([p.value * 1.05 for s in series for p in s.points if p.value is not None],
                       floor=1.0 if share else 0.0, cap=1.0 if share else None)
    frame.high = values[-1]
    ticks = [(v, tick_text(v, unit if unit in ("ms", "share") else "", values[1] - values[0]))
             for v in values]
    axes = frame.axes(ticks, narrow_y=every_other(values))

    def show(value: float) -> str:
        if share:
            return format_percent(value)
        return format_number(value, "ms" if unit == "ms" else "rate") + (
            " ms" if unit == "ms" else "")

    segments = []
    for one in series:
        lines = [" ".join(f"{_num(frame.x(p.at))},{_num(frame.y(p.value))}" for p in line)
                 for line in _measured_lines(one.points, lambda p: p.value) if len(line) > 1]
        marks = []
        for point in one.points:
            when = _what(point) if point.scans > 1 else _when(point.at)
            data = {"at": _iso(point.at), "value": point.value, "scans": point.scans,
                    "series": one.key,
                    "scan": str(point.scan_id) if point.scan_id is not None else None}
            cx = frame.x(point.at)
            if point.value is None:
                marks.append(_gap(point, cx, f"{when}: {one.label} not measured in this scan",
                                  {**data, "reason": "not measured"}, "unmeasured"))
                continue
            marks.append({"cls": "mark", "data": _data(data), "cx": _num(cx),
                          "cy": _num(frame.y(point.value)), "fill": one.colour,
                          "href": _scan_href(point.scan_id),
                          "title": f"{when}: {one.label} {show(point.value)}"
                                   + (" (mean)" if point.scans > 1 else "")})
        segments.append({"version": "", "count": len(one.points), "series": one.key,
                         "lines": lines, "stroke": one.colour, "dash": one.dash,
                         "marks": marks})
    legend = [{"key": s.key, "colour": s.colour, "dash": s.dash, "stroke_width": 2,
               "label": s.label} for s in series]
    count = max((len(s.points) for s in series), default=0)
    breaks = _version_breaks(changes, frame)
    context = frame.context(name, f"{title}: {count} points", {
        "count": count, "series": " ".join(s.key for s in series), "y_to": frame.high,
        "breaks": len(breaks), "since": _iso(since), "until": _iso(until)})
    return _svg(chart_svg.chart, {**context, "axes": axes,
                                  "legend": _legends(legend, frame),
                                  "maintenance": _maintenance(maintenance, frame, axes),
                                  "segments": segments,
                                  "breaks": breaks,
                                  "empty": None if count else frame.empty()})


# --- badge -----------------------------------------------------------------------------------


def badge(label: str, message: str, colour: str, *, grade: str | None, provisional: bool,
          title: str, source: str | None = None) -> SafeString:
    """A flat two-part badge (label | message), a standalone SVG document. `source`: "site"
    (measured by the site) or "pushed" (uploaded), None with no grade."""
    left = round(_text_width(label) + 12)
    right = round(_text_width(message) + 12)
    return _render("badge.svg", {
        "width": left + right, "left": left, "right": right, "label": label,
        "message": message, "colour": colour, "title": title, "grade": grade or "none",
        "provisional": "true" if provisional else "false", "source": source or "none",
        "label_x": _num(left / 2), "message_x": _num(left + right / 2)})
