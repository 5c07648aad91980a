"""A running scan's progress as figures: the level running, its requests done of its total, the
running TTFT p50 and output rate of its successful requests, and how long the level has left.

`LevelFigures` is one level's running figures (the CLI's bars show them); `ScanProgress` is the
runner's progress callback for a whole scan (`progress=`, `.rate` as `rate_progress=` and
`.trace` as `trace_progress=`) that
keeps the latest figures for another thread to read (`snapshot()`): the site's worker
publishes them for the scan page (scans/running/live_progress.py). No Django here.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from . import formatting as fmt
from .figures import percentile

if TYPE_CHECKING:
    from .plan import ScanPlan


class LevelFigures:
    """A level's figures so far, from its finished requests."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._started = clock()
        self.ttft: list[float] = []
        self.tokens = 0
        self.chunks = 0
        self.all_usage = True

    def add(self, record) -> None:
        if not record.succeeded:
            return
        if record.ttft_ms is not None:
            self.ttft.append(record.ttft_ms)
        self.chunks += record.output_chunks
        if record.completion_tokens is None:
            self.all_usage = False
        else:
            self.tokens += record.completion_tokens

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._started

    @property
    def ttft_p50_ms(self) -> float | None:
        return percentile(self.ttft, 50) if self.ttft else None

    def output_rate(self) -> tuple[float, str] | None:
        """(rate, unit) of the level's output so far: tokens/s when every stream reported its
        usage, else chunks/s; None before the first success."""
        elapsed = self.elapsed_s
        if not self.ttft or elapsed <= 0:
            return None
        if self.all_usage:
            return self.tokens / elapsed, "tokens/s"
        return self.chunks / elapsed, "chunks/s"

    def seconds_per_request(self, completed: int) -> float | None:
        """The level's pace so far: seconds per finished request; None before the first."""
        return self.elapsed_s / completed if completed > 0 else None

    def eta_s(self, completed: int, total: int) -> float | None:
        """Seconds the level has left at its pace so far; None before its first request ends."""
        if completed <= 0 or total <= completed:
            return 0.0 if total and completed >= total else None
        pace = self.seconds_per_request(completed)
        return None if pace is None else pace * (total - completed)

    def ttft_text(self) -> str:
        return fmt.ms(self.ttft_p50_ms) if self.ttft else "—"

    def rate_text(self) -> str:
        rate = self.output_rate()
        return fmt.rate(*rate) if rate else ""


class ScanProgress:
    """The runner's progress callback for one scan, readable from another thread.

    `planned_levels`: the plan's concurrency levels, so that a snapshot can say "level 2 of 3";
    levels beyond them (the capacity search) are labelled as such, rate levels by their rate.
    The runner calls it on the scan's event loop; `snapshot()` may be called from any thread.
    """

    def __init__(
        self, planned_levels: Sequence[int] = (), clock: Callable[[], float] = time.perf_counter
    ) -> None:
        #: Settable until the first level starts (the site learns its plan after the start).
        self.planned_levels = tuple(planned_levels)
        self._clock = clock
        self._lock = threading.Lock()
        self._started = clock()
        self._levels_started = 0
        self._kind = ""
        self._value: float = 0
        self._completed = 0
        self._total = 0
        self._done_before = 0  # requests of the levels already over
        self._figures: LevelFigures | None = None
        #: Goes up on every change, so a reader publishes only what is new.
        self.version = 0
        # What the plan still holds after the level running (expect()): for the whole scan's
        # time left. Requests per planned level, warm-up requests before each level, the
        # open-loop levels' (rate, requests), and whether a capacity search follows.
        self._planned_requests: tuple[int, ...] = ()
        self._warmup = 0
        self._rates: tuple[tuple[float, int], ...] = ()
        self._search = False
        self._rates_started = 0
        self._latency_s: float | None = None  # one request's time at the last closed-loop level
        # The trace replay, last of all: its span (the last request's due time over the speed)
        # and when it started.
        self._trace_span_s: float | None = None
        self._trace_started: float | None = None

    def expect(self, plan: ScanPlan) -> None:
        """Learn the plan (before the first level): its levels ("level 2 of 3") and what each
        sends, so that a snapshot can say how long the whole scan has left."""
        self.planned_levels = tuple(plan.levels)
        self._planned_requests = tuple(plan.requests_per_level)
        self._warmup = plan.workload.warmup or 0
        if plan.open_loop is not None:
            self._rates = tuple((rate, plan.open_loop.requests_at(rate))
                                for rate in plan.open_loop.rates)
        self._search = bool(plan.find_capacity)
        self._trace_span_s = plan.trace.span_s if plan.trace is not None else None

    def __call__(self, level: int, completed: int, total: int, record=None) -> None:
        self._update("concurrency", level, completed, total, record)

    def rate(self, rate: float, completed: int, total: int, record=None) -> None:
        """An open-loop rate level's progress (load.RateProgressCallback)."""
        self._update("rate", rate, completed, total, record)

    def trace(self, completed: int, total: int, record=None) -> None:
        """The trace replay's progress (runner.TraceProgressCallback)."""
        self._update("trace", 0, completed, total, record)

    def _update(self, kind: str, value: float, completed: int, total: int, record) -> None:
        with self._lock:
            if record is None and completed == 0:  # a level starts
                self._keep_latency()
                self._done_before += self._completed
                self._levels_started += 1
                self._rates_started += kind == "rate"
                self._kind, self._value = kind, value
                self._figures = LevelFigures(self._clock)
                if kind == "trace":
                    self._trace_started = self._clock()
            elif record is not None and self._figures is not None:
                self._figures.add(record)
            self._completed, self._total = completed, total
            self.version += 1

    def _keep_latency(self) -> None:
        """One request's time at the closed-loop level so far (its pace times its
        concurrency), kept for the levels to come."""
        if self._figures is None or self._kind != "concurrency":
            return
        pace = self._figures.seconds_per_request(self._completed)
        if pace is not None:
            self._latency_s = pace * max(1, int(self._value))

    def _trace_left_s(self, latency: float) -> float:
        """The trace replay's time left while it runs: to its last request's due time, then
        that request's own time (one request time so far)."""
        if self._completed >= self._total:
            return 0.0
        started = self._trace_started if self._trace_started is not None else self._clock()
        span = self._trace_span_s or 0.0
        return max(0.0, span - (self._clock() - started)) + latency

    def _scan_eta_s(self, stage: str, level_eta: float | None) -> float | None:
        """Seconds the whole scan has left: the level running (its own estimate, eta_s), then
        each level still to come at one request's time so far (a closed loop of c streams
        sends n requests in about n/c request times; latency that grows with concurrency
        makes it longer), each open-loop level at its rate and the trace replay (its span over
        the speed, then its last request's time). Not the capacity search, whose levels are
        not known ahead. None before a request time is known."""
        self._keep_latency()
        latency = self._latency_s
        if latency is None:
            return None
        if stage == "trace":
            return self._trace_left_s(latency)
        if level_eta is None:  # no request of this level has ended yet: the last level's time
            if self._kind != "concurrency":
                return None
            level_eta = (self._total - self._completed) * latency / max(1, int(self._value))
        left = level_eta
        if stage == "level":
            later = list(zip(self.planned_levels, self._planned_requests, strict=False))
            for concurrency, total in later[self._levels_started:]:
                warm = self._warmup / min(self._warmup, concurrency) if self._warmup else 0.0
                left += latency * (warm + math.ceil(total / concurrency))
        upcoming = self._rates if stage != "rate" else self._rates[self._rates_started:]
        for rate, total in upcoming:
            left += latency * self._warmup + total / rate  # its warm-up runs one at a time
        if self._trace_span_s is not None:
            left += latency * self._warmup + self._trace_span_s + latency
        return left

    def snapshot(self) -> dict:
        """Where the scan stands, JSON-ready. Before the first level: phase "preflight" (the
        preflight's /models and probe request, the workload's set-up and the warm-up)."""
        with self._lock:
            elapsed = self._clock() - self._started
            figures = self._figures
            if figures is None:
                return {"phase": "preflight", "elapsed_s": round(elapsed, 1)}
            number = self._levels_started
            planned = len(self.planned_levels)
            if self._kind in ("rate", "trace"):
                stage = self._kind
            elif number <= planned:
                stage = "level"
            else:
                stage = "search"
            rate = figures.output_rate()
            eta = figures.eta_s(self._completed, self._total)
            ttft = figures.ttft_p50_ms
            scan_eta = self._scan_eta_s(stage, eta)
            if stage == "trace":  # sent on the trace's clock, not at a pace
                eta = scan_eta
            # The capacity search's levels are not known ahead: the time left is without them.
            excludes = ("the capacity search" if self._search and stage == "level" else
                        "any further search levels" if stage == "search" else "")
            return {
                "phase": stage,
                "concurrency": int(self._value) if self._kind == "concurrency" else None,
                "rate_per_s": self._value if self._kind == "rate" else None,
                "level_number": number,
                "levels_planned": planned,
                "completed": self._completed,
                "total": self._total,
                "requests_done": self._done_before + self._completed,
                "ttft_p50_ms": None if ttft is None else round(ttft, 1),
                "output_per_s": None if rate is None else round(rate[0], 1),
                "output_unit": None if rate is None else rate[1],
                "eta_s": None if eta is None else round(eta, 1),
                "scan_eta_s": None if scan_eta is None else round(scan_eta, 1),
                "scan_eta_excludes": excludes,
                "elapsed_s": round(elapsed, 1),
            }


def progress_text(snapshot: dict | None) -> str:
    """One line for people: "Level 2 of 3, concurrency 4: 12 of 40 requests · TTFT p50
    182.0 ms · 310.2 tokens/s · about 8 s left in this level"."""
    if not snapshot:
        return ""
    if snapshot.get("phase") == "preflight":
        return "Checking the endpoint (GET /models and one probe request) before the load…"
    phase = snapshot["phase"]
    if phase == "rate":
        where = f"Open-loop rate {snapshot['rate_per_s']:g} requests/s"
    elif phase == "trace":
        where = "Trace replay"
    elif phase == "search":
        where = f"Capacity search, concurrency {snapshot['concurrency']}"
    else:
        where = (
            f"Level {snapshot['level_number']} of {snapshot['levels_planned']}, "
            f"concurrency {snapshot['concurrency']}"
        )
    parts = [f"{where}: {snapshot['completed']:,} of {snapshot['total']:,} requests"]
    if snapshot.get("ttft_p50_ms") is not None:
        parts.append(f"TTFT p50 {fmt.ms(snapshot['ttft_p50_ms'])}")
    if snapshot.get("output_per_s") is not None:
        parts.append(fmt.rate(snapshot["output_per_s"], snapshot["output_unit"]))
    eta = snapshot.get("eta_s")
    if eta is not None and snapshot["completed"] < snapshot["total"]:
        parts.append(f"about {_left(eta)} left in this level")
    whole, excludes = snapshot.get("scan_eta_s"), snapshot.get("scan_eta_excludes")
    # The whole scan's time left, when it says more than this level's
    if whole is not None and (eta is None or whole - eta >= 1 or excludes):
        more = f", plus {excludes}" if excludes else ""
        parts.append(f"about {_left(whole)} left in the scan{more}")
    return " · ".join(parts)


def time_left(seconds: float) -> str:
    """"40 s", "6 min 10 s": a time left as people say it (never "0 s")."""
    return fmt.seconds(seconds) if seconds >= 60 else f"{max(1, round(seconds))} s"


_left = time_left
