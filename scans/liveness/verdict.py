"""The quorum: what the locations' confirmed standings say about an endpoint together.

- down: a majority of its locations confirm it down (one of one, both of two, two of three);
- degraded: a minority does ("unreachable from <location>");
- up: none does, and at least one location has a counted result;
- "" (unknown): no location has a counted result yet.

A location that has never reported counts as not down, so a location whose worker is missing
can never make an endpoint down alone; it can keep a majority from forming (docs/liveness.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["DEGRADED", "DOWN", "UNKNOWN", "UP", "Standing", "Verdict", "quorum"]

UP, DOWN, DEGRADED, UNKNOWN = "up", "down", "degraded", ""


@dataclass(frozen=True)
class Standing:
    """One location's confirmed standing (scans.models.LivenessState, or nothing yet)."""

    location: str
    reported: bool
    down: bool
    cause: str = ""


@dataclass(frozen=True)
class Verdict:
    state: str  # UP, DOWN, DEGRADED or UNKNOWN
    down_at: tuple[str, ...]  # the locations that confirm it down
    cause: str  # one sentence; "" when up or unknown


def quorum(locations: Sequence[str], standings: Iterable[Standing]) -> Verdict:
    """The verdict of an endpoint's `locations` from their standings (missing ones: not yet)."""
    by_location = {s.location: s for s in standings if s.location in locations}
    down = [by_location[name] for name in locations
            if name in by_location and by_location[name].down]
    down_at = tuple(s.location for s in down)
    if not any(s.reported for s in by_location.values()):
        return Verdict(UNKNOWN, (), "")
    if 2 * len(down) > len(locations):
        first = down[0]
        where = f"; seen from {_listed(down_at)}" if len(locations) > 1 else ""
        cause = f"{first.cause}{where}"
        return Verdict(DOWN, down_at, cause)
    if down:
        return Verdict(DEGRADED, down_at,
                       f"unreachable from {_listed(down_at)}: {down[0].cause}")
    return Verdict(UP, (), "")


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"
