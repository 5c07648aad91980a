"""Round axis ticks ("nice numbers"): 0, 50, 100, 150 ms rather than 0, 119.8, 239.6.

One function for every chart of the project, the report's (scans/grader/headline.py) and the
site's (scans/pages/charts.py). The step is 1, 2, 2.5 or 5 times a power of ten, the smallest
that covers the range in at most `most` intervals (after Heckbert, "Nice numbers for graph
labels", Graphics Gems, 1990). No Django here.
"""

from __future__ import annotations

import math

__all__ = ["decimals", "nice_step", "nice_ticks"]

_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)


def nice_step(span: float, most: int = 5) -> float:
    """The smallest round step that divides `span` into at most `most` intervals."""
    if not math.isfinite(span) or span <= 0:
        return 1.0
    raw = span / max(1, most)
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for factor in _STEPS:
        # a little slack, so that 0.3 / 3 is a step of 0.1 and not of 0.2
        if factor * magnitude >= raw * (1 - 1e-9):
            return factor * magnitude
    return 10.0 * magnitude  # pragma: no cover - the last factor always fits


def nice_ticks(low: float, high: float, most: int = 5) -> list[float]:
    """Round values from at or below `low` to at or above `high`, evenly spaced, at most
    `most` + 1 of them (so at most `most` intervals); at least two. `low` == `high` gives the
    ticks of a unit-wide range around the value."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"ticks need finite bounds, got {low!r} and {high!r}")
    if high < low:
        low, high = high, low
    if high == low:
        low, high = (low - 0.5, high + 0.5) if low else (0.0, 1.0)
    step = nice_step(high - low, most)
    while True:
        first = math.floor(low / step + 1e-9) * step
        count = math.ceil((high - first) / step - 1e-9)
        if count <= most:
            break
        step = nice_step(step * (most + 1), most)  # the floor moved the start: a wider step
    digits = decimals(step)
    return [round(first + i * step, digits) + 0.0 for i in range(count + 1)]  # + 0.0: no -0.0


def decimals(step: float) -> int:
    """How many decimals the labels of ticks `step` apart need (2.5 needs one, 0.25 two)."""
    for digits in range(0, 10):
        if abs(round(step, digits) - step) < step * 1e-6:
            return digits
    return 10
