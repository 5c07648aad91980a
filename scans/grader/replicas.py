"""One scan over several URLs of the same model (replicas): which URL each request goes to,
and each URL's share of a level's figures.

The first URL is the scan's base URL; ``--replica`` adds the others. Each is its own origin:
it passes the plan's URL validation and every connection to it goes through the same connect
guard (the one transport). Grading reads the whole scan's figures; the per-URL ones only say
where the load went and how each replica answered.
"""

from __future__ import annotations

from collections.abc import Sequence

from .figures import percentile, rounded
from .measurement import LevelResult, served_by

__all__ = ["BALANCE_POLICIES", "Balancer", "by_url_figures"]

#: round-robin: request k goes to URL k mod n (an exact split); least-in-flight: to the URL
#: with the fewest requests in flight, ties taken in turn so an idle scan still spreads.
BALANCE_POLICIES = ("round-robin", "least-in-flight")


class Balancer:
    """Picks a URL index per request and counts requests in flight per URL."""

    def __init__(self, count: int, policy: str) -> None:
        if policy not in BALANCE_POLICIES:
            raise ValueError(f"unknown balance policy {policy!r}")
        self.policy = policy
        self.in_flight = [0] * count
        self._turn = 0

    def take(self) -> int:
        count = len(self.in_flight)
        start = self._turn % count
        self._turn += 1
        if self.policy == "round-robin":
            index = start
        else:
            order = [(start + k) % count for k in range(count)]
            index = min(order, key=lambda i: self.in_flight[i])
        self.in_flight[index] += 1
        return index

    def release(self, index: int) -> None:
        self.in_flight[index] -= 1


def by_url_figures(level: LevelResult, urls: Sequence[str]) -> list[dict]:
    """A level's requests, failures and TTFT split by the URL that served them."""
    figures = []
    for index, url in enumerate(urls):
        records = [r for r in level.requests if served_by(r) == index]
        ttft = [t for r in records if r.failure is None and (t := r.ttft_ms) is not None]
        figures.append({
            "url": url,
            "requests": len(records),
            "succeeded": sum(1 for r in records if r.failure is None),
            "failed": sum(1 for r in records if r.failure is not None),
            "ttft_ms": ({"p50": rounded(percentile(ttft, 50)),
                         "p95": rounded(percentile(ttft, 95)), "n": len(ttft)}
                        if ttft else None),
        })
    return figures
