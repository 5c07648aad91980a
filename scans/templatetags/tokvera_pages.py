"""Formatting for the endpoint and scan pages."""

from __future__ import annotations

from django import template

from scans.grader import formatting, scoring

register = template.Library()


@register.filter
def percent(value, digits: int = 0) -> str:
    """0.953 → "95%" (or "95.3%" with digits=1); None → "—"."""
    if value is None:
        return "—"
    return f"{float(value) * 100:.{int(digits)}f}%"


@register.filter
def check_value(value, unit: str = "") -> str:
    """A check's value in its unit, by the one rounding rule of scans.grader.formatting (the CLI and
    report.html use it too); None → "not measured"."""
    if value is not None and not isinstance(value, bool):
        value = float(value)
    return formatting.check_value(value, unit, missing="not measured")


@register.filter
def check_delta(value, unit: str = "") -> str:
    if value is None:
        return ""
    value = float(value)
    if unit == "ms":  # one decimal, as scans.grader.formatting shows ms
        return f"{value:+,.1f} ms"
    if unit == "share":
        return f"{value * 100:+.1f} pts"
    if unit == "present":
        return ""
    return f"{value:+.2f}"


@register.filter
def letter(grade: str) -> str:
    """A grade for display: the letter, or "no letter"."""
    return grade if grade in scoring.GRADES else "no letter"


@register.filter
def grade_class(grade: str) -> str:
    return f"grade-{grade}" if grade in scoring.GRADES else "grade-none"


@register.filter
def check_measures(check_id: str) -> str:
    try:
        check = scoring.check_by_id(check_id)
    except KeyError:
        return ""
    return f"{check.measures} ({check.unit})"


@register.filter
def signed(value, digits: int = 1) -> str:
    if value is None:
        return ""
    return f"{float(value):+.{int(digits)}f}"


@register.filter
def percent_signed(value) -> str:
    """A relative change: 1.25 → "+125 %", -0.3 → "−30 %"; None → "—"."""
    if value is None:
        return "—"
    shown = f"{abs(float(value)) * 100:.0f} %"
    return f"+{shown}" if value >= 0 else f"−{shown}"
