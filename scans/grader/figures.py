"""The project's figures: its one percentile, one EWMA, and how report.json rounds.

Everything that needs a percentile, a moving average or a report figure's rounding imports it
from here, so a figure in a report, on the site and in the benchmark snapshot is always
computed the same way. (How a figure is *shown* is formatting.py.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction

__all__ = ["ewma", "percentile", "percentiles", "rounded"]


def percentile(samples: Iterable[float], p: float) -> float | None:
    """Exact nearest-rank percentile, never interpolated.

    The rank is ceil(p / 100 * n), 1-based, over the sorted samples (rank 0 is read as 1),
    computed exactly so that float rounding never moves it.
    For [100, 300]: p50 is 100 and p95 is 300. No samples gives None.
    """
    if not 0 <= p <= 100:
        raise ValueError(f"percentile p must be within 0..100, got {p!r}")
    ordered = sorted(samples)
    if not ordered:
        return None
    # Exact arithmetic: in floats 7 / 100 * 100 is 7.000000000000001, whose ceiling is 8.
    exact_p = Fraction(str(p)) if isinstance(p, float) else Fraction(p)
    rank = max(1, math.ceil(exact_p * len(ordered) / 100))
    return ordered[rank - 1]


def ewma(previous: float | None, sample: float, alpha: float = 0.3) -> float:
    """Exponentially weighted moving average: alpha * sample + (1 - alpha) * previous.

    The first sample (previous is None) sets the value.
    """
    if not 0 < alpha <= 1:
        raise ValueError(f"ewma alpha must be within (0, 1], got {alpha!r}")
    if previous is None:
        return float(sample)
    return alpha * sample + (1 - alpha) * previous


def rounded(value: float | None, digits: int = 3) -> float | None:
    """A figure as report.json stores it: `digits` decimals (None stays None)."""
    return None if value is None else round(float(value), digits)


def percentiles(samples: Sequence[float]) -> dict | None:
    """report.json's summary of samples: p50, p95 and p99 (nearest-rank, rounded) and n;
    None without any sample."""
    if not samples:
        return None
    return {"p50": rounded(percentile(samples, 50)), "p95": rounded(percentile(samples, 95)),
            "p99": rounded(percentile(samples, 99)), "n": len(samples)}
