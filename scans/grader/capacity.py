"""The capacity search (``--find-capacity``), all of it: from the highest plan level that met
the objective (objective.py), double the concurrency until a level misses, then bisect between
the last that met and the first that missed, within its bounds (``CapacitySearch``: at most
``max_levels`` extra levels, ``MAX_SEARCH_REQUESTS`` measured requests, and the site's request
budget); report.json's ``capacity`` (``capacity_result``); and the worst case a site plans for
(``search_worst_waves``). The runner only runs the levels it is asked for. Not graded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scans.grader.objective import Slo

__all__ = [
    "DEFAULT_SEARCH_LEVELS",
    "MAX_SEARCH_LEVELS",
    "MAX_SEARCH_REQUESTS",
    "CapacitySearch",
    "capacity_result",
    "next_search_level",
    "search_requests",
    "search_worst_waves",
]

DEFAULT_SEARCH_LEVELS = 8
MAX_SEARCH_LEVELS = 16
#: All the searched levels together send at most this many requests.
MAX_SEARCH_REQUESTS = 20_000
MIN_SEARCH_REQUESTS = 20


def search_requests(concurrency: int) -> int:
    """Requests a searched level sends: enough for a p95 (20) and two rounds of its streams."""
    return max(MIN_SEARCH_REQUESTS, 2 * concurrency)


def _bounds(tried: Mapping[int, bool]) -> tuple[int | None, int | None]:
    """(the highest level that met, the lowest level above it that missed)."""
    met = [c for c, ok in tried.items() if ok]
    if not met:
        return None, None
    low = max(met)
    above = [c for c, ok in tried.items() if not ok and c > low]
    return low, (min(above) if above else None)


def next_search_level(tried: Mapping[int, bool], max_level: int) -> int | None:
    """The next concurrency to try given the levels tried so far (concurrency → met), or None
    when the search is done (no level met, the boundary is found, or `max_level` was met)."""
    low, high = _bounds(tried)
    if low is None:
        return None
    if high is None:
        nxt = min(low * 2, max_level)
        return None if nxt <= low else nxt
    if high - low <= 1:
        return None
    return (low + high) // 2


class CapacitySearch:
    """The search's bounds and where it stands: `next_level()` says what to run next (None when
    done), `record()` what a level found; `exhausted` once done: it stopped at a bound rather
    than at the boundary it sought."""

    def __init__(self, plan_met: Mapping[int, bool], *, max_level: int, max_levels: int,
                 max_requests: int | None, warmup: int) -> None:
        #: Concurrency → whether the level met the objective (the plan's levels first).
        self.tried = dict(plan_met)
        self.max_level = max_level
        self.max_levels = max_levels
        #: Requests with their warm-up (the site's budget); None: MAX_SEARCH_REQUESTS only.
        self.max_requests = max_requests
        self.warmup = warmup
        self.levels = 0
        self.sent = 0  # measured requests
        self.spent = 0  # requests with their warm-up
        self.exhausted = False

    def next_level(self) -> tuple[int, int] | None:
        """(concurrency, requests) of the next level to run, or None when the search is done."""
        nxt = next_search_level(self.tried, self.max_level)
        if nxt is None:
            best = max((c for c, ok in self.tried.items() if ok), default=None)
            self.exhausted = best is not None and best >= self.max_level
            return None
        count = search_requests(nxt)
        if (self.levels >= self.max_levels or self.sent + count > MAX_SEARCH_REQUESTS
                or (self.max_requests is not None
                    and self.spent + count + self.warmup > self.max_requests)):
            self.exhausted = True
            return None
        return nxt, count

    def record(self, concurrency: int, requests: int, met: bool) -> None:
        self.levels += 1
        self.sent += requests
        self.spent += requests + self.warmup
        self.tried[concurrency] = met


def search_worst_waves(levels: int, warmup: int) -> int:
    """Rounds of requests the capacity search can take at worst: `levels` distinct
    concurrencies of at least 2 (the search never tries 1), each sending its warm-up and then
    max(20, 2 × concurrency) requests. Rounds shrink as the concurrency grows, so the smallest
    concurrencies are the worst case."""
    return sum(-(-warmup // c) + -(-search_requests(c) // c) for c in range(2, levels + 2))


def capacity_result(plan_levels: Sequence[Mapping[str, Any]], searched: Sequence[Mapping[str, Any]],
                    slo: Slo, *, exhausted: bool) -> dict:
    """report.json's ``capacity``: the largest concurrency that met the SLO and its figures,
    or null and the reason; ``bound_reached`` when the highest level tried met it and the
    search stopped at its bound (the true capacity may be higher)."""
    every = [*plan_levels, *searched]
    tried = {int(lv["concurrency"]): bool((lv.get("slo") or {}).get("met")) for lv in every}
    low, high = _bounds(tried)
    result: dict[str, Any] = {"slo": slo.public_dict(), "levels_tried": sorted(tried),
                              "searched_levels": len(searched)}
    if low is None:
        return {**result, "concurrency": None, "requests_per_s": None,
                "output_tokens_per_s": None, "output_unit": None, "attainment": None,
                "bound_reached": False,
                "reason": "no level met the SLO (not even concurrency "
                          f"{min(tried) if tried else 1})"}
    best = next(lv for lv in every if int(lv["concurrency"]) == low)
    figures = best.get("slo") or {}
    reached = high is None
    return {**result, "concurrency": low,
            "requests_per_s": figures.get("goodput_requests_per_s"),
            "output_tokens_per_s": figures.get("goodput_output_per_s"),
            "output_unit": figures.get("goodput_unit"),
            "attainment": figures.get("attainment"),
            "bound_reached": reached,
            "reason": (("met at the highest level tried: the search stopped at its bound, "
                        "the capacity may be higher") if reached and exhausted else
                       "met at the highest level tried (no search ran above it)" if reached
                       else f"concurrency {high} missed the SLO")}
