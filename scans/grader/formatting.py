"""How figures are shown: one rounding rule per unit, for the CLI, report.html and the site.

Each unit has a base precision: milliseconds and rates one decimal, a share one decimal of a
percent, a ratio two decimals. When a value is shown beside bounds, digits are added (at most
``MAX_EXTRA_DIGITS``) until the shown number stands on the same side of every bound as the
value itself: 0.9996 against "≥ 100 %" shows "99.96 %", not "100.0 %"; 800.04 ms against
"≤ 800 ms" shows "800.04 ms". No Django here.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "MISSING",
    "bound_text",
    "check_value",
    "ms",
    "number",
    "percent",
    "rate",
    "ratio",
    "seconds",
]

MISSING = "—"
BASE_DIGITS = {"ms": 1, "share": 1, "ratio": 2, "rate": 1}
MAX_EXTRA_DIGITS = 6
_SCALE = {"share": 100.0}


def _side(a: float, b: float) -> int:
    return (a > b) - (a < b)


def _digits(value: float, bounds: Iterable[float], base: int) -> int:
    """The fewest digits (from `base`) at which the rounded value keeps its side of each bound."""
    bounds = list(bounds)
    for digits in range(base, base + MAX_EXTRA_DIGITS + 1):
        shown = round(value, digits)
        if all(_side(shown, bound) == _side(value, bound) for bound in bounds):
            return digits
    return base + MAX_EXTRA_DIGITS


def _number(value: float, unit: str, bounds: Iterable[float | bool] = ()) -> str:
    scale = _SCALE.get(unit, 1.0)
    scaled = float(value) * scale
    numeric = [float(b) * scale for b in bounds if not isinstance(b, bool)]
    digits = _digits(scaled, numeric, BASE_DIGITS.get(unit, 1))
    return f"{scaled:,.{digits}f}"


def number(value: float | None, unit: str, bounds: Iterable[float] = ()) -> str:
    """The bare number (no unit) by the unit's rule: for tables whose header names the unit."""
    return MISSING if value is None else _number(value, unit, bounds)


def ms(value: float | None, bounds: Iterable[float] = ()) -> str:
    """812.3 → "812.3 ms"; None → "—"."""
    return MISSING if value is None else f"{_number(value, 'ms', bounds)} ms"


def percent(share: float | None, bounds: Iterable[float] = ()) -> str:
    """A share (0..1) as a percentage: 0.9996 → "99.96 %" beside a bound of 1."""
    return MISSING if share is None else f"{_number(share, 'share', bounds)} %"


def ratio(value: float | None, bounds: Iterable[float] = ()) -> str:
    return MISSING if value is None else f"{_number(value, 'ratio', bounds)}×"


def rate(value: float | None, unit: str) -> str:
    """A rate with its unit named: 45.21 tokens/s → "45.2 tokens/s"."""
    return MISSING if value is None else f"{_number(value, 'rate')} {unit}"


def seconds(value: float | None) -> str:
    """A duration for people: "0.4 s", "12.3 s", "2 min 05 s"."""
    if value is None:
        return MISSING
    if value < 60:
        return f"{value:.1f} s"
    minutes, rest = divmod(round(value), 60)
    return f"{minutes} min {rest:02d} s"


def check_value(value: float | bool | None, unit: str, bounds: Iterable[float | bool] = (),
                missing: str = MISSING) -> str:
    """A check's value in its unit, with enough digits to show its side of `bounds`."""
    if value is None:
        return missing
    if unit == "present" or isinstance(value, bool):
        return "present" if value else "absent"
    if unit == "ms":
        return ms(value, bounds)
    if unit == "share":
        return percent(value, bounds)
    if unit == "ratio":
        return ratio(value, bounds)
    return _number(value, unit, bounds)


def bound_text(op: str, value: float | bool, unit: str) -> str:
    """A bound as people read it: "≤ 800 ms", "≥ 100 %", "present"."""
    if op == "==":
        return "present" if value else "absent"
    sign = "≤" if op == "<=" else "≥"
    scaled = float(value) * _SCALE.get(unit, 1.0)
    shown = f"{scaled:,.6f}".rstrip("0").rstrip(".")
    suffix = {"ms": " ms", "share": " %", "ratio": "×"}.get(unit, "")
    return f"{sign} {shown}{suffix}"
