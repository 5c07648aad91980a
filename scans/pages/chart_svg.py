"""The markup of the time charts and the sparkline, written in Python.

scans/pages/charts.py computes each chart's geometry and hands it here as a plain dict; these
functions turn it into one SVG element. Every value is escaped as Django's autoescaping does
(`&`, `<`, `>`, `"` and `'`), and whitespace between tags is dropped as `{% spaceless %}`
drops it, so the output is what the templates that drew these charts before gave, byte for
byte. Built with string joins rather than a template: the endpoint page draws eleven charts
of up to 200 marks each, and a template looks up every attribute of every mark through its
context, which made the charts the page's largest cost.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from django.utils.formats import localize

__all__ = ["chart", "sparkline"]

_BETWEEN_TAGS = re.compile(r">\s+<")


def _t(value: Any) -> str:
    """A value as a template prints it (numbers localized as Django does), escaped."""
    return escape(value if isinstance(value, str) else str(localize(value)), quote=True)


def _data(pairs: Iterable[tuple[str, str]]) -> str:
    return "".join(f' {_t(key)}="{_t(value)}"' for key, value in pairs)


def _spaceless(parts: list[str]) -> str:
    return _BETWEEN_TAGS.sub("><", "".join(parts)).strip()


def _open_svg(c: Mapping[str, Any], kind: str) -> str:
    width, height = _t(c["width"]), _t(c["height"])
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart chart-{_t(kind)}" '
            f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="{_t(c["label"])}" data-chart="{_t(kind)}" '
            f'font-family="system-ui, sans-serif" font-size="11"{_data(c["data"])}>'
            f'<title>{_t(c["label"])}</title>')


def chart(c: Mapping[str, Any]) -> str:
    """A time chart (grades, a check, headline series) from charts.py's context."""
    plot = _Plot(c)
    out = [_open_svg(c, c["kind"])]
    bands = c.get("bands") or ()
    out += [_band(band, plot) for band in bands]
    out.append(f'<rect class="frame" x="{plot.left}" y="{plot.top}" width="{plot.width}" '
               f'height="{plot.height}" fill="{"none" if bands else "#fff"}" '
               f'stroke="{plot.line}"/>')
    out += [f'<line class="grid" x1="{plot.left}" x2="{plot.right}" y1="{_t(y)}" y2="{_t(y)}" '
            f'stroke="{plot.line}" stroke-width="0.75"/>' for y in c["axes"]["grid"]]
    maintenance = c.get("maintenance")
    if maintenance:
        out.append(_maintenance_spans(maintenance, plot))
    out += [_axis(name, axis, plot) for name, axis in c["axes"].items() if name != "grid"]
    out += [_bound(bound) for bound in c.get("bounds") or ()]
    out += [_segment(segment, plot) for segment in c.get("segments") or ()]
    out += [_break(change, plot) for change in c.get("breaks") or ()]
    out += [_legend(name, items, c["axes"], plot)
            for name, items in (c.get("legend") or {}).items()]
    if maintenance:
        out += [_maintenance_key(name, key, maintenance, plot)
                for name, key in maintenance["keys"].items()]
    empty = c.get("empty")
    if empty:
        out.append(f'<text class="empty" x="{_t(empty["x"])}" y="{_t(empty["y"])}" '
                   f'fill="{plot.muted}" text-anchor="middle">{_t(empty["text"])}</text>')
    out.append("</svg>")
    return _spaceless(out)


class _Plot:
    """The plot area's edges and the chart's colours, escaped once for every element."""

    def __init__(self, c: Mapping[str, Any]) -> None:
        colours = c["colours"]
        self.left, self.right = _t(c["left"]), _t(c["right"])
        self.top, self.bottom = _t(c["top"]), _t(c["bottom"])
        self.width, self.height = _t(c["plot_width"]), _t(c["plot_height"])
        self.muted, self.ink, self.line = (_t(colours["muted"]), _t(colours["ink"]),
                                           _t(colours["line"]))
        self.break_colour, self.none = _t(colours["break"]), _t(colours["none"])


def _hidden(name: str) -> str:
    """The phone's drawing is hidden until endpoints.css shows it."""
    return ' display="none"' if name == "narrow" else ""


def _band(band: Mapping[str, Any], plot: _Plot) -> str:
    letter, colour, narrow = _t(band["letter"]), _t(band["colour"]), band["narrow"]
    return (f'<g class="band band-{letter}" data-band="{letter}" data-from="{_t(band["least"])}">'
            f'<rect x="{plot.left}" y="{_t(band["y"])}" width="{plot.width}" '
            f'height="{_t(band["height"])}" fill="{colour}" fill-opacity="0.12"/>'
            f'<text class="axis-wide" x="{_t(band["label_x"])}" y="{_t(band["label_y"])}" '
            f'fill="{colour}" font-weight="bold">{letter}</text>'
            f'<text class="axis-narrow" display="none" x="{_t(narrow["x"])}" '
            f'y="{_t(narrow["y"])}" font-size="{_t(narrow["size"])}" fill="{colour}" '
            f'font-weight="bold" text-anchor="end">{letter}</text></g>')


def _maintenance_spans(maintenance: Mapping[str, Any], plot: _Plot) -> str:
    fill = f'fill="{_t(maintenance["colour"])}" fill-opacity="{_t(maintenance["opacity"])}"'
    spans = "".join(f'<rect class="maintenance-span" data-from="{_t(span["from"])}" '
                    f'data-to="{_t(span["to"])}" x="{_t(span["x"])}" y="{plot.top}" '
                    f'width="{_t(span["width"])}" height="{plot.height}" {fill}>'
                    f'<title>{_t(span["title"])}</title></rect>' for span in maintenance["spans"])
    return f'<g class="maintenance" data-maintenance="{len(maintenance["spans"])}">{spans}</g>'


def _axis(name: str, axis: Mapping[str, Any], plot: _Plot) -> str:
    tick_class = "tick narrow" if name == "narrow" else "tick"
    out = [f'<g class="axis axis-{_t(name)}" data-axis="{_t(name)}" '
           f'font-size="{_t(axis["size"])}"{_hidden(name)}>']
    out += [f'<text class="{tick_class}" data-tick="y" x="{_t(tick["x"])}" y="{_t(tick["y"])}" '
            f'fill="{plot.muted}" text-anchor="{_t(tick["anchor"])}">{_t(tick["label"])}</text>'
            for tick in axis["y_ticks"]]
    out += [f'<text class="{tick_class}" data-tick="x" data-at="{_t(tick["at"])}" '
            f'x="{_t(tick["x"])}" y="{_t(tick["y"])}" fill="{plot.muted}" '
            f'text-anchor="{_t(tick["anchor"])}">{_t(tick["label"])}</text>'
            for tick in axis["x_ticks"]]
    zone = axis["zone"]
    out.append(f'<text class="zone" x="{_t(zone["x"])}" y="{_t(zone["y"])}" fill="{plot.muted}" '
               f'text-anchor="end">{_t(zone["text"])}</text></g>')
    return "".join(out)


def _bound(bound: Mapping[str, Any]) -> str:
    name, y = _t(bound["name"]), _t(bound["y"])
    return (f'<g class="bound bound-{name}" data-bound="{name}" data-value="{_t(bound["value"])}" '
            f'data-scoring-version="{_t(bound["version"])}">'
            f'<line x1="{_t(bound["x1"])}" x2="{_t(bound["x2"])}" y1="{y}" y2="{y}" '
            f'stroke="{_t(bound["colour"])}" stroke-dasharray="5 3"/>'
            f'<title>{_t(bound["title"])}</title></g>')


def _segment(segment: Mapping[str, Any], plot: _Plot) -> str:
    series = segment.get("series")
    named = f' data-series="{_t(series)}"' if series else ""
    out = [f'<g class="segment" data-scoring-version="{_t(segment["version"])}" '
           f'data-points="{_t(segment["count"])}"{named}>']
    stroke, dash = _t(segment["stroke"]), segment.get("dash")
    dashed = f' stroke-dasharray="{_t(dash)}"' if dash else ""
    out += [f'<polyline points="{_t(line)}" fill="none" stroke="{stroke}" '
            f'stroke-width="1.5"{dashed}/>' for line in segment["lines"]]
    out += [_mark(mark, plot) for mark in segment["marks"]]
    out.append("</g>")
    return "".join(out)


def _break(change: Mapping[str, Any], plot: _Plot) -> str:
    x, label = _t(change["x"]), _t(change["label"])
    out = [f'<g class="version-break" data-kind="{_t(change["kind"])}" '
           f'data-from="{_t(change["old"])}" data-to="{_t(change["new"])}">'
           f'<line x1="{x}" x2="{x}" y1="{plot.top}" y2="{plot.bottom}" '
           f'stroke="{plot.break_colour}" stroke-width="1.5" stroke-dasharray="4 3"/>']
    out += [f'<text class="break-label axis-{_t(name)}"{_hidden(name)} x="{_t(text["x"])}" '
            f'y="{_t(text["y"])}" font-size="{_t(text["size"])}" fill="{plot.break_colour}" '
            f'stroke="#fff" stroke-width="3" stroke-linejoin="round" paint-order="stroke" '
            f'text-anchor="{_t(text["anchor"])}">{label}</text>'
            for name, text in change["text"].items()]
    out.append(f'<title>{_t(change["title"])}</title></g>')
    return "".join(out)


def _legend(name: str, items: Iterable[Mapping[str, Any]], axes: Mapping[str, Any],
            plot: _Plot) -> str:
    extra = f' display="none" font-size="{_t(axes["narrow"]["size"])}"' if name == "narrow" else ""
    out = [f'<g class="legend axis-{_t(name)}"{extra}>']
    for item in items:
        y, dash = _t(item["y"]), item["dash"]
        dashed = f' stroke-dasharray="{_t(dash)}"' if dash else ""
        out.append(f'<g class="legend-item" data-legend="{_t(item["key"])}">'
                   f'<line x1="{_t(item["x"])}" x2="{_t(item["x2"])}" y1="{y}" y2="{y}" '
                   f'stroke="{_t(item["colour"])}" stroke-width="{_t(item["stroke_width"])}"'
                   f'{dashed}/><text x="{_t(item["text_x"])}" y="{_t(item["text_y"])}" '
                   f'fill="{plot.ink}">{_t(item["label"])}</text></g>')
    out.append("</g>")
    return "".join(out)


def _maintenance_key(name: str, key: Mapping[str, Any], maintenance: Mapping[str, Any],
                     plot: _Plot) -> str:
    colour, opacity = _t(maintenance["colour"]), _t(maintenance["opacity"])
    return (f'<g class="maintenance-key axis-{_t(name)}" data-legend="maintenance" '
            f'font-size="{_t(key["size"])}"{_hidden(name)}>'
            f'<rect x="{_t(key["x"])}" y="{_t(key["y"])}" width="{_t(key["width"])}" '
            f'height="{_t(key["height"])}" fill="{colour}" fill-opacity="{opacity}" '
            f'stroke="{colour}" stroke-width="0.75"/>'
            f'<text x="{_t(key["text_x"])}" y="{_t(key["text_y"])}" fill="{plot.ink}">'
            f"maintenance</text><title>shaded: the endpoint's maintenance windows "
            f"(left out of the SLO windows, alerts held)</title></g>")


def _mark(mark: Mapping[str, Any], plot: _Plot) -> str:
    """One point (or gap) of a segment, with its data-* attributes and hover title."""
    href = mark.get("href")
    cx = _t(mark["cx"])
    parts = [f'<g class="{_t(mark["cls"])}"{_data(mark["data"])}>']
    if href:
        parts.append(f'<a href="{_t(href)}">')
    if mark.get("gap"):
        parts.append(f'<line class="gap" x1="{cx}" x2="{cx}" y1="{plot.top}" '
                     f'y2="{plot.bottom}" stroke="{plot.none}" stroke-dasharray="2 3"/>'
                     f'<rect class="hover" x="{_t(mark["hover_x"])}" y="{plot.top}" width="8" '
                     f'height="{plot.height}" fill="#fff" fill-opacity="0"/>')
    else:
        cy = _t(mark["cy"])
        low_high = mark.get("range")
        if low_high:
            parts.append(f'<line class="range" x1="{cx}" x2="{cx}" y1="{_t(low_high[0])}" '
                         f'y2="{_t(low_high[1])}" stroke="{plot.muted}"/>')
        ring = mark.get("ring")
        if ring:
            parts.append(f'<circle class="cap-mark" cx="{cx}" cy="{cy}" r="6" fill="none" '
                         f'stroke="{_t(ring)}" stroke-width="1.5"/>')
        parts.append(f'<circle cx="{cx}" cy="{cy}" r="3.5" fill="{_t(mark["fill"])}"/>')
    if href:
        parts.append("</a>")
    parts.append(f'<title>{_t(mark["title"])}</title></g>')
    return "".join(parts)


def sparkline(c: Mapping[str, Any]) -> str:
    """The dashboard's sparkline from charts.py's context."""
    colours = c["colours"]
    ink, none_colour, brk_colour = _t(colours["ink"]), _t(colours["none"]), _t(colours["break"])
    height = _t(c["height"])
    out = [_open_svg(c, "sparkline")]
    for segment in c["segments"]:
        out.append(f'<g class="segment" data-scoring-version="{_t(segment["version"])}">')
        for line in segment["lines"]:
            out.append(f'<polyline points="{_t(line)}" fill="none" stroke="{ink}" '
                       f'stroke-width="1.2"/>')
        for dot in segment["dots"]:
            out.append(f'<circle cx="{_t(dot["cx"])}" cy="{_t(dot["cy"])}" r="2" '
                       f'fill="{_t(dot["fill"])}"/>')
        for x in segment["no_letter"]:
            out.append(f'<rect x="{_t(x)}" y="0" width="1" height="{height}" '
                       f'fill="{none_colour}" fill-opacity="0.6" class="no-letter"/>')
        out.append("</g>")
    for change in c["breaks"]:
        x = _t(change["x"])
        out.append(f'<g class="version-break" data-kind="{_t(change["kind"])}" '
                   f'data-from="{_t(change["old"])}" data-to="{_t(change["new"])}">'
                   f'<line x1="{x}" x2="{x}" y1="0" y2="{height}" stroke="{brk_colour}" '
                   f'stroke-width="1.5" stroke-dasharray="4 3"/>'
                   f'<rect class="hover" x="{_t(change["hover_x"])}" y="0" width="6" '
                   f'height="{height}" fill="#fff" fill-opacity="0"/>'
                   f'<title>{_t(change["label"])}: {_t(change["title"])}</title></g>')
    out.append("</svg>")
    return _spaceless(out)
