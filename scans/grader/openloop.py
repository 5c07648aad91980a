"""Open-loop rate levels: requests sent at a given rate whether or not the
server is done with the earlier ones. Measured, never graded.

A rate level of R requests/s and N requests draws N inter-arrival gaps (``constant``: 1/R each;
``poisson``: exponential; ``gamma:B``: gamma with shape B and mean 1/R, vLLM's
``--burstiness``: B < 1 burstier than Poisson, B = 1 Poisson, B > 1 steadier), seeded, and
scales them so the N-th request is due exactly N/R after the level starts. The runner sends
each request at its absolute deadline (``level start + offset``), never "a gap after the last
send", so a late wake-up does not push every later request back (vLLM #21104).

Every latency is also measured from the request's scheduled time, so time spent waiting in the
client (for the event loop, for a connection under ``--max-connections``) counts as the user
would feel it (vLLM #54101). The grader's own lateness (its task woke up after the deadline)
is its send lag: a level whose p95 send lag exceeds ``SEND_LAG_THRESHOLD_MS`` is a rate the
scanner could not hold, flagged client-bound like a level whose event loop lagged. (A scanner
that cannot keep up falls further behind with every request, so most of its requests are
late; a p95 ignores the odd hiccup of a busy machine, which the loop-lag flag reports.)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from scans.grader.figures import percentile, percentiles, rounded
from scans.grader.measurement import LevelResult, RequestRecord

__all__ = [
    "ARRIVALS",
    "MAX_RATE",
    "MAX_RATE_REQUESTS",
    "MIN_RATE_REQUESTS",
    "SEND_LAG_THRESHOLD_MS",
    "Arrival",
    "OpenLoop",
    "OpenLoopError",
    "arrival_offsets",
    "default_rate_requests",
    "parse_arrival",
    "parse_rates",
    "rate_figures",
]

ARRIVALS = ("poisson", "constant", "gamma")
#: Requests per second, at most (a typo guard: a grader on one core holds about a thousand).
MAX_RATE = 100_000.0
#: Fewer samples than this and a nearest-rank p95 is the maximum.
MIN_RATE_REQUESTS = 20
MAX_RATE_REQUESTS = 100_000
#: Without --rate-requests a level lasts about this long (and has at least MIN_RATE_REQUESTS).
DEFAULT_RATE_SECONDS = 10.0
#: A rate level whose p95 send lag (ms) exceeds this was not held by the grader. The same bound
#: as the event loop's lag (runner.LOOP_LAG_THRESHOLD_MS; DECISIONS.md).
SEND_LAG_THRESHOLD_MS = 50.0


class OpenLoopError(ValueError):
    """A bad --rate, --arrival or --rate-requests; the message is one line meant for the user."""


@dataclass(frozen=True)
class Arrival:
    """How requests arrive within a rate level."""

    kind: str = "poisson"
    #: The gamma shape (vLLM's burstiness); 1 for poisson, None for constant.
    burstiness: float | None = 1.0
    seed: int = 0

    def validate(self) -> Arrival:
        if self.kind not in ARRIVALS:
            raise OpenLoopError(
                f"--arrival: unknown arrival {self.kind!r} (expected poisson, constant or gamma:B)"
            )
        if self.kind == "gamma":
            b = self.burstiness
            if not (isinstance(b, int | float) and math.isfinite(b) and 0 < b <= 1000):
                raise OpenLoopError(
                    "--arrival gamma:B: the burstiness B must be a number "
                    "above 0 and at most 1000 (1 is Poisson)"
                )
        return self

    @property
    def text(self) -> str:
        return f"gamma:{self.burstiness:g}" if self.kind == "gamma" else self.kind


def parse_arrival(text: str, seed: int = 0) -> Arrival:
    """``"poisson"``, ``"constant"`` or ``"gamma:0.5"`` → Arrival (validated)."""
    name, sep, value = text.strip().lower().partition(":")
    if name == "gamma":
        try:
            burstiness = float(value) if sep else math.nan
        except ValueError:
            raise OpenLoopError(f"--arrival {text!r}: gamma:B needs a number B, e.g. gamma:0.5") from None
        return Arrival("gamma", burstiness, seed).validate()
    if sep:
        raise OpenLoopError(f"--arrival {text!r}: only gamma takes a parameter (gamma:B)")
    return Arrival(name, 1.0 if name == "poisson" else None, seed).validate()


def parse_rates(text: str) -> tuple[float, ...]:
    """``"2,8,32"`` → (2.0, 8.0, 32.0); OpenLoopError for anything not a positive rate."""
    rates = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            rate = float(part)
        except ValueError:
            raise OpenLoopError(f"--rate {part!r}: expected requests per second, e.g. 2,8,32") from None
        rates.append(rate)
    if not rates:
        raise OpenLoopError("--rate: give at least one rate in requests per second, e.g. 2,8")
    return tuple(rates)


def default_rate_requests(rate: float) -> int:
    """Requests a rate level sends when not told: about ``DEFAULT_RATE_SECONDS`` of arrivals,
    and at least ``MIN_RATE_REQUESTS``."""
    return min(MAX_RATE_REQUESTS, max(MIN_RATE_REQUESTS, math.ceil(rate * DEFAULT_RATE_SECONDS)))


@dataclass(frozen=True)
class OpenLoop:
    """The plan's rate levels: requests per second, how they arrive, how many each sends, and
    at most how many may be in flight at once (None: as many as the schedule asks)."""

    rates: tuple[float, ...]
    arrival: Arrival = Arrival()
    requests: int | None = None
    max_connections: int | None = None

    def requests_at(self, rate: float) -> int:
        return self.requests if self.requests is not None else default_rate_requests(rate)

    def validate(self) -> OpenLoop:
        if not self.rates:
            raise OpenLoopError("--rate: give at least one rate in requests per second")
        for rate in self.rates:
            if not (isinstance(rate, int | float) and math.isfinite(rate) and rate > 0):
                raise OpenLoopError(f"--rate {rate:g}: rates must be positive requests per second")
            if rate > MAX_RATE:
                raise OpenLoopError(f"--rate {rate:g}: at most {MAX_RATE:,.0f} requests per second")
        if len(set(self.rates)) != len(self.rates):
            raise OpenLoopError("--rate: a rate is given twice")
        self.arrival.validate()
        if self.requests is not None and not (MIN_RATE_REQUESTS <= self.requests <= MAX_RATE_REQUESTS):
            raise OpenLoopError(
                f"--rate-requests {self.requests}: a rate level needs at least "
                f"{MIN_RATE_REQUESTS} requests for its p95 (and at most "
                f"{MAX_RATE_REQUESTS:,})"
            )
        if self.max_connections is not None and not 1 <= self.max_connections <= 100_000:
            raise OpenLoopError("--max-connections must be from 1 to 100000")
        return self

    def public_dict(self) -> dict:
        """report.json's ``plan.open_loop``."""
        return {
            "rates_per_s": list(self.rates),
            "arrival": self.arrival.kind,
            "burstiness": self.arrival.burstiness,
            "seed": self.arrival.seed,
            "requests_per_level": [self.requests_at(r) for r in self.rates],
            "max_connections": self.max_connections,
        }


def arrival_offsets(arrival: Arrival, rate: float, count: int, level_index: int = 0) -> list[float]:
    """When each of `count` requests is due, in seconds after the level starts: cumulative
    inter-arrival gaps, scaled so the last is due at count / rate. Seeded by the arrival's seed
    and the level's index, so the same plan sends on the same schedule."""
    if count <= 0:
        return []
    mean = 1.0 / rate
    if arrival.kind == "constant":
        gaps = [mean] * count
    else:
        rng = random.Random(f"tokvera-arrival/{arrival.seed}/{level_index}")
        shape = arrival.burstiness if arrival.kind == "gamma" else 1.0
        assert shape is not None
        gaps = [rng.gammavariate(shape, mean / shape) for _ in range(count)]
    offsets = []
    total = 0.0
    for gap in gaps:
        total += gap
        offsets.append(total)
    scale = (count / rate) / total if total > 0 else 1.0
    return [t * scale for t in offsets]


# -- what a rate level measured -------------------------------------------------------------------


def _since_scheduled_ms(record: RequestRecord, moment: float | None) -> float | None:
    return None if moment is None else (moment - record.scheduled_at) * 1000.0


def e2e_from_schedule_ms(record: RequestRecord) -> float | None:
    """From the request's scheduled time to the end of its stream ([DONE], else the end)."""
    end = record.done_at if record.done_at is not None else record.ended_at
    return _since_scheduled_ms(record, end)


def ttft_from_schedule_ms(record: RequestRecord) -> float | None:
    """From the request's scheduled time to its first output token (the graded TTFT's end)."""
    return _since_scheduled_ms(record, record.first_output_at)


def send_lag_ms(record: RequestRecord) -> float | None:
    """How late the grader itself took up the request after its deadline."""
    return _since_scheduled_ms(record, record.dispatched_at)


def rate_held(level: LevelResult) -> bool:
    lags = [t for r in level.requests if (t := send_lag_ms(r)) is not None]
    p95 = percentile(lags, 95)
    return p95 is None or p95 <= SEND_LAG_THRESHOLD_MS


def rate_figures(level: LevelResult) -> dict:
    """The open-loop part of a rate level's report.json entry (besides the usual figures,
    which are measured from the request body written)."""
    assert level.rate_per_s is not None
    succeeded = level.succeeded
    written = [r.body_written_at for r in level.requests if r.body_written_at is not None]
    span = (max(written) - level.started_at) if written else 0.0
    lags = [t for r in level.requests if (t := send_lag_ms(r)) is not None]
    waits = [r.connection_wait_s * 1000.0 for r in level.requests if r.connection_wait_s is not None]
    held = rate_held(level)
    return {
        "rate_per_s": level.rate_per_s,
        "arrival": level.arrival,
        # As the server's clock would see it: requests written over the time from the level's
        # start to the last write (the schedule puts the last at N / rate).
        "achieved_rate_per_s": rounded(len(written) / span) if span > 0 else None,
        "e2e_from_schedule_ms": percentiles(
            [t for r in succeeded if (t := e2e_from_schedule_ms(r)) is not None]
        ),
        "ttft_from_schedule_ms": percentiles(
            [t for r in succeeded if (t := ttft_from_schedule_ms(r)) is not None]
        ),
        "send_lag_ms": (
            {
                "p50": rounded(percentile(lags, 50)),
                "p95": rounded(percentile(lags, 95)),
                "p99": rounded(percentile(lags, 99)),
                "max": rounded(max(lags)),
                "threshold": SEND_LAG_THRESHOLD_MS,
            }
            if lags
            else None
        ),
        "rate_held": held,
        "waited_for_connection": sum(1 for r in level.requests if r.waited_for_connection),
        "connection_wait_ms": (
            {"p50": rounded(percentile(waits, 50)), "p95": rounded(percentile(waits, 95)),
             "max": rounded(max(waits))}
            if any(waits)
            else None
        ),
        "max_connections": level.max_connections,
        "peak_in_flight": level.concurrency,
        # A rate the grader could not hold says more about this machine than the server.
        "client_bound": level.client_bound or not held,
    }

