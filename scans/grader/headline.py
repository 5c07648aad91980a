"""The headline of a scan: the performance numbers per level, the cause of its failures, and
the charts of throughput and time to first token against concurrency.

One place for what the CLI table, report.html and report.json show first. The functions that
read a report work on report.json dicts (so reports written before these fields existed still
render); ``level_numbers`` is the one that reads a measured level. No Django here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from scans.grader import formatting as fmt
from scans.grader import rendering
from scans.grader.figures import percentiles, rounded
from scans.grader.measurement import LevelResult, end_to_end_ms
from scans.grader.preflight import failure_phrase, server_message
from scans.grader.ticks import nice_ticks

__all__ = [
    "failure_summary",
    "headline_rows",
    "level_numbers",
    "scan_failure_summary",
    "throughput_chart",
    "ttft_chart",
    "ttft_histograms",
]

EXAMPLE_CHARS = 200


# -- numbers ------------------------------------------------------------------------------------

def level_numbers(level: LevelResult) -> dict:
    """The level's end-to-end latency, request rate and aggregate output rate (report.json)."""
    succeeded = level.succeeded
    duration = level.duration_s
    e2e = [t for r in succeeded if (t := end_to_end_ms(r)) is not None]
    tokens = bool(succeeded) and all(r.reported_usage for r in succeeded)
    chunks = sum(r.output_chunks for r in succeeded)
    units = sum(r.completion_tokens or 0 for r in succeeded) if tokens else chunks

    def per_s(count: int) -> float | None:
        return rounded(count / duration) if duration > 0 and succeeded else None

    basis = "tokens" if tokens else "chunks"
    return {
        "e2e_latency_ms": percentiles(e2e),
        "requests_per_s": per_s(len(succeeded)),
        "output_throughput": {"per_s": per_s(units), "unit": f"{basis}/s", "basis": basis,
                              "chunks_per_s": per_s(chunks)},
    }


# -- causes -------------------------------------------------------------------------------------

def _example(message: str | None) -> str | None:
    if not message:
        return None
    said = server_message(message)
    text = message if said is None or message.startswith("error in stream") else \
        f"{message.split(':', 1)[0]}: {said}"
    return text if len(text) <= EXAMPLE_CHARS else text[:EXAMPLE_CHARS - 1] + "…"


def failure_summary(failed: Mapping[str, int], examples: Mapping[str, str],
                    requests: int) -> dict | None:
    """The dominant failure class of a set of requests, as a sentence with one example
    message; None when nothing failed."""
    failed = {cls: n for cls, n in failed.items() if n}
    if not failed:
        return None
    cls, count = sorted(failed.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    total_failed = sum(failed.values())
    phrase = failure_phrase(cls, examples.get(cls))
    how = f"all with {phrase}" if count == total_failed else f"most often {phrase} ({count})"
    return {
        "class": cls,
        "count": count,
        "failed": total_failed,
        "requests": requests,
        "sentence": f"{total_failed} of {requests} requests failed, {how}",
        "example": _example(examples.get(cls)),
    }


def scan_failure_summary(levels: Sequence[Mapping[str, Any]],
                         preflight: Mapping[str, Any] | None) -> dict | None:
    """The whole scan's failure summary: the preflight's cause when it stopped the scan, else
    the dominant class across every level."""
    if preflight and preflight.get("stopped"):
        probe = preflight.get("probe") or {}
        return {
            "class": probe.get("outcome"),
            "count": 1,
            "failed": 1,
            "requests": 1,
            "sentence": f"the preflight stopped the scan before any load: {preflight['cause']}",
            "example": _example(probe.get("error")),
            "stopped_by_preflight": True,
        }
    failed: dict[str, int] = {}
    examples: dict[str, str] = {}
    for level in levels:
        for cls, count in (level.get("failed") or {}).items():
            failed[cls] = failed.get(cls, 0) + int(count)
        for cls, message in (level.get("failure_examples") or {}).items():
            examples.setdefault(cls, message)
    requests = sum(int(level.get("requests") or 0) for level in levels)
    return failure_summary(failed, examples, requests)


def level_failure_summary(level: Mapping[str, Any]) -> dict | None:
    """A level's summary as stored, or computed from its counts (reports from before)."""
    if "failure_summary" in level:
        return level["failure_summary"]
    return failure_summary(level.get("failed") or {}, level.get("failure_examples") or {},
                           int(level.get("requests") or 0))


# -- the headline table ---------------------------------------------------------------------------

#: (key, column title, unit shown in the title) for the CLI table and the HTML table.
COLUMNS = (
    ("concurrency", "Concurrency", ""),
    ("requests", "Requests", ""),
    ("succeeded", "Succeeded", ""),
    ("ttft_p50", "TTFT p50", "ms"),
    ("ttft_p95", "TTFT p95", "ms"),
    ("ttft_p99", "TTFT p99", "ms"),
    ("e2e_p50", "End-to-end p50", "ms"),
    ("e2e_p95", "End-to-end p95", "ms"),
    ("gap_p50", "Chunk gap p50", "ms"),
    ("gap_p95", "Chunk gap p95", "ms"),
    ("requests_per_s", "Requests/s", ""),
    ("output_per_s", "Output", ""),
    ("per_stream", "Per stream (median)", ""),
)


def _pick(figures: Any, key: str) -> float | None:
    value = figures.get(key) if isinstance(figures, Mapping) else None
    return value if isinstance(value, int | float) else None


def headline_rows(levels: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """One row of display text per level (keys of ``COLUMNS``); "—" where not measured."""
    rows = []
    for lv in levels:
        ttft, e2e, gaps = lv.get("ttft_ms"), lv.get("e2e_latency_ms"), lv.get("chunk_gap_ms")
        out = lv.get("output_throughput") or {}
        rate = lv.get("generation_rate") or {}
        rps = lv.get("requests_per_s")
        rows.append({
            "concurrency": str(lv.get("concurrency", "")),
            "requests": str(lv.get("requests", "")),
            "succeeded": str(lv.get("succeeded", "")),
            "ttft_p50": fmt.number(_pick(ttft, "p50"), "ms"),
            "ttft_p95": fmt.number(_pick(ttft, "p95"), "ms"),
            "ttft_p99": fmt.number(_pick(ttft, "p99"), "ms"),
            "e2e_p50": fmt.number(_pick(e2e, "p50"), "ms"),
            "e2e_p95": fmt.number(_pick(e2e, "p95"), "ms"),
            "gap_p50": fmt.number(_pick(gaps, "p50"), "ms"),
            "gap_p95": fmt.number(_pick(gaps, "p95"), "ms"),
            "requests_per_s": fmt.number(rps if isinstance(rps, int | float) else None, "rate"),
            "output_per_s": fmt.rate(_pick(out, "per_s"), out.get("unit") or "tokens/s"),
            "per_stream": fmt.rate(_pick(rate, "median"), rate.get("unit") or
                                   f"{rate.get('basis') or 'chunks'}/s"),
        })
    return rows


# -- charts (inline SVG, no script, no network) -------------------------------------------------
#
# The geometry is computed here; the markup lives in templates/report/ (line_chart.svg,
# ttft_histogram.svg), rendered autoescaped by ``rendering``.

_W, _H = 520, 230
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 30, 44
SERIES_STYLES = {  # stroke, dash: distinguishable without colour too
    "p50": ("#2e5aac", ""),
    "p95": ("#a86400", "6 3"),
    "p99": ("#b3261e", "2 3"),
    "throughput": ("#1f7a3d", ""),
}


def _axis_number(value: float) -> str:
    """A round tick's label: "250", "1,500", "0.25" (no more digits than it has)."""
    return f"{value:,.0f}" if value == int(value) else f"{value:,.6f}".rstrip("0")


def _frame(left: int = _LEFT) -> dict[str, Any]:
    """The plot area and the places of its labels, shared by every chart."""
    plot_w, plot_h = _W - left - _RIGHT, _H - _TOP - _BOTTOM
    return {
        "left": left, "top": _TOP, "width": plot_w, "height": plot_h,
        "right": left + plot_w, "base": _TOP + plot_h,
        "label_x": left - 6,                   # y axis labels, right-aligned
        "top_label_y": _TOP + 4,
        "x_label_y": _TOP + plot_h + 16,       # x axis labels
        "center_x": f"{left + plot_w / 2:.1f}",
        "center_y": f"{_TOP + plot_h / 2:.1f}",
        "title_y": _H - 6,                     # the x axis title
    }


# report.html draws the charts' text at 17 units on a phone (its @media rule); the rotated
# y-axis title takes the first 22 units. A chart's left margin leaves room for its widest
# tick label at that size beside it, so "12,000" never runs into "output tokens/s".
_PHONE_TEXT, _Y_TITLE_ROOM = 17.0, 22.0


def _left_for(labels: Sequence[str]) -> int:
    """The left margin for y tick `labels`: _LEFT, or more where a label is wider."""
    widest = max((sum(0.3 if ch in ",." else 0.58 for ch in label) for label in labels),
                 default=0.0)
    return max(_LEFT, math.ceil(_Y_TITLE_ROOM + widest * _PHONE_TEXT + 6 + 2))


def _line_chart(title: str, levels: Sequence[int | None], series: Sequence[tuple[str, list]],
                unit: str, css_class: str) -> str:
    """Values against concurrency: one polyline per series, levels equally spaced
    (templates/report/line_chart.svg)."""
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    values = [v for _, vs in series for v in vs if v is not None]
    ticks = nice_ticks(0.0, max(values) * 1.05 if values and max(values) > 0 else 1.0, 4)
    top = ticks[-1]
    left = _left_for([_axis_number(v) for v in ticks])
    plot_w = _W - left - _RIGHT

    def x(i: int) -> float:
        return left + (plot_w / 2 if len(levels) == 1 else i * plot_w / (len(levels) - 1))

    def y(v: float) -> float:
        return _TOP + plot_h - v / top * plot_h

    y_ticks = [{"y": f"{y(v):.1f}", "label_y": f"{y(v) + 4:.1f}", "label": _axis_number(v)}
               for v in ticks]
    x_ticks = [{"x": f"{x(i):.1f}", "label": level} for i, level in enumerate(levels)]
    drawn = []
    for k, (name, vs) in enumerate(series):
        stroke, dash = SERIES_STYLES.get(name, ("#2e5aac", ""))
        points = [(x(i), y(v), levels[i], v) for i, v in enumerate(vs) if v is not None]
        lx = left + 8 + k * 110
        drawn.append({
            "name": name, "stroke": stroke, "dash": dash,
            "points": (" ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in points)
                       if len(points) > 1 else None),
            "marks": [{"x": f"{px:.1f}", "y": f"{py:.1f}", "level": level,
                       "value": fmt.number(v, "ms" if unit == "ms" else "rate")}
                      for px, py, level, v in points],
            "legend_x": lx, "legend_x2": lx + 22, "legend_text_x": lx + 26,
        })
    return rendering.render("report/line_chart.svg", {
        "css_class": css_class, "title": title, "width": _W, "height": _H, "unit": unit,
        "frame": _frame(left), "y_ticks": y_ticks, "x_ticks": x_ticks, "series": drawn,
        "empty": None if values else {"y": str(_TOP + plot_h / 2)},
    })


def throughput_chart(levels: Sequence[Mapping[str, Any]]) -> str:
    """Aggregate output per second against concurrency (tokens/s when every level had usage,
    chunks/s, named so, otherwise)."""
    outs = [lv.get("output_throughput") or {} for lv in levels]
    tokens = bool(outs) and all(o.get("basis") == "tokens" for o in outs)
    key = "per_s" if tokens else "chunks_per_s"
    unit = "output tokens/s" if tokens else "output chunks/s"
    values = [_pick(o, key) for o in outs]
    return _line_chart(f"Throughput ({unit}) against concurrency",
                       [lv.get("concurrency") for lv in levels], [("throughput", values)],
                       unit, "chart-throughput")


def ttft_chart(levels: Sequence[Mapping[str, Any]]) -> str:
    """Time to first token p50 and p95 against concurrency."""
    series = [(name, [_pick(lv.get("ttft_ms"), name) for lv in levels]) for name in ("p50", "p95")]
    return _line_chart("Time to first token p50 and p95 against concurrency",
                       [lv.get("concurrency") for lv in levels], series, "ms", "chart-ttft")


_BINS = 24


def ttft_histograms(levels: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Per level: an SVG histogram of its TTFT samples on one shared ms axis of round ticks,
    with p50, p95 and p99 drawn in three styles and labelled in rows that do not overlap
    (templates/report/ttft_histogram.svg). The axis starts at 0 unless the samples sit far
    from it, then at a round value with a marked break (a 20 ms spread at 200 ms would be a
    sliver at the right edge otherwise)."""
    samples_all = [t for lv in levels for t in (lv.get("ttft_samples_ms") or [])]
    if not samples_all:
        return []
    low, high = min(samples_all), max(samples_all)
    broken = low > 0 and (high - low) < 0.5 * high
    ticks = nice_ticks(low if broken else 0.0, high if high > low else low + 1.0, 4)
    low, high = ticks[0], ticks[-1]
    width = (high - low) / _BINS
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    base = _TOP + plot_h

    def x(ms: float) -> float:
        return _LEFT + (ms - low) / (high - low) * plot_w

    frame = _frame()
    x_ticks = [{"x": f"{x(ms):.1f}", "label": _axis_number(ms)} for ms in ticks]
    axis_break = ({"x": _LEFT + 6, "y": base, "title": f"the axis starts at {fmt.ms(low)}, "
                   "not at 0"} if broken and low > 0 else None)
    out = []
    for lv in levels:
        samples = lv.get("ttft_samples_ms") or []
        counts = [0] * _BINS
        for t in samples:
            counts[max(0, min(_BINS - 1, int((t - low) / width)))] += 1
        most = max(counts) if samples else 1
        bars = []
        for i, count in enumerate(counts):
            if count:
                h = plot_h * count / most
                bars.append({"x": f"{_LEFT + i * plot_w / _BINS + 0.5:.1f}", "y": f"{base - h:.1f}",
                             "width": f"{max(1.0, plot_w / _BINS - 1):.1f}", "height": f"{h:.1f}",
                             "low": fmt.ms(low + i * width), "high": fmt.ms(low + (i + 1) * width),
                             "count": count})
        out.append({
            "concurrency": lv.get("concurrency"),
            "n": len(samples),
            "percentiles": [(name, fmt.ms(value)) for name in ("p50", "p95", "p99")
                            if (value := _pick(lv.get("ttft_ms"), name)) is not None],
            "svg": rendering.render("report/ttft_histogram.svg", {
                "title": f"Time to first token at concurrency {lv.get('concurrency')}",
                "width": _W, "height": _H, "frame": frame, "bars": bars, "x_ticks": x_ticks,
                "most": most, "markers": _markers(lv, x, plot_w), "axis_break": axis_break,
            }),
        })
    return out


# The marker labels' rows, in the SVG's units: sized for the larger font report.html gives
# them on a phone (16), with a row of 1.25 em, so their boxes do not touch there either.
_LABEL_FONT, _LABEL_ROW = 16.0, 20.0


def _markers(level: Mapping[str, Any], x: Any, plot_w: float) -> list[dict]:
    """p50, p95 and p99 as vertical lines, each named at the top of the plot in the first row
    where its label does not overlap another's (a label sits left of its line near the right
    edge, so it stays inside)."""
    rows: list[list[tuple[float, float]]] = []
    markers = []
    for name in ("p50", "p95", "p99"):
        value = _pick(level.get("ttft_ms"), name)
        if value is None:
            continue
        stroke, dash = SERIES_STYLES[name]
        mx = min(_LEFT + plot_w, x(value))
        span = len(name) * _LABEL_FONT * 0.62 + 4
        label_end = mx + 3 + span > _LEFT + plot_w
        extent = (mx - 3 - span, mx) if label_end else (mx, mx + 3 + span)
        row = next((i for i, taken in enumerate(rows)
                    if all(extent[1] < a or extent[0] > b for a, b in taken)), len(rows))
        if row == len(rows):
            rows.append([])
        rows[row].append(extent)
        label_y = _TOP + _LABEL_FONT + row * _LABEL_ROW
        markers.append({"name": name, "x": f"{mx:.1f}", "y1": _TOP,
                        "stroke": stroke, "dash": dash or "none", "title_value": fmt.ms(value),
                        "label_x": f"{mx - 3:.1f}" if label_end else f"{mx + 3:.1f}",
                        "label_end": label_end, "label_y": f"{label_y:.1f}", "row": row})
    return markers
