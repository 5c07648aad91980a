"""Formatting for the endpoint and scan pages."""

from __future__ import annotations

from django import template
from django.utils import timezone

from scans import sla
from scans.grader import GRADES, check_by_id, format_check_value
from scans.history.slo_wording import duration_text

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
    text = format_check_value(value, unit, missing="not measured")
    if value is not None and unit and unit not in ("ms", "share", "ratio", "present"):
        text = f"{text} {unit}"  # a rate's unit ("tokens/s"): every number carries its unit
    return text


@register.filter
def check_delta(value, unit: str = "") -> str:
    if value is None:
        return ""
    value = float(value)
    if unit == "ms":  # one decimal, as scans.grader.formatting shows ms
        return _signed_text(value, 1, " ms")
    if unit == "share":  # a change of a percentage is in percentage points
        return _signed_text(value * 100, 1, " percentage points")
    if unit == "present":
        return ""
    return _signed_text(value, 2, "×" if unit == "ratio" else f" {unit}" if unit else "")


def _signed_text(value: float, digits: int, unit: str) -> str:
    """+1.5 ms, −2.0 ms, and "no change" for what rounds to zero (never "−0.0" or "+0.0")."""
    shown = f"{abs(value):,.{digits}f}"
    if float(shown.replace(",", "")) == 0:
        return "no change"
    return f"{'+' if value > 0 else '−'}{shown}{unit}"


@register.filter
def pillar(name: str) -> str:
    """A pillar as people read it: "cost and cache", not "cost_and_cache"."""
    return str(name or "").replace("_", " ")


@register.filter
def letter(grade: str) -> str:
    """A grade for display: the letter, or "no letter"."""
    return grade if grade in GRADES else "no letter"


@register.filter
def grade_class(grade: str) -> str:
    return f"grade-{grade}" if grade in GRADES else "grade-none"


@register.filter
def check_measures(check_id: str) -> str:
    try:
        check = check_by_id(check_id)
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
    if shown == "0 %":  # what rounds to zero has no sign ("−0 %" reads as a fall)
        return "0 %"
    return f"+{shown}" if value > 0 else f"−{shown}"


@register.filter
def sla_share(value) -> str:
    """A share of an SLA report: "99.95 %", or "no data"."""
    return sla.share_text(value)


@register.filter
def sla_span(seconds) -> str:
    return duration_text(seconds)


@register.filter
def sla_grades(line) -> str:
    return sla.grades_text(line)


@register.filter
def sla_duration(started, ended) -> str:
    """How long an incident lasted (up to now while it goes on)."""
    return duration_text(((ended or timezone.now()) - started).total_seconds())
