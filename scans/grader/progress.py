"""A running scan's progress as figures: the level running, its requests done of its total, the
running TTFT p50 and output rate of its successful requests, and how long the level has left.

`LevelFigures` is one level's running figures (the CLI's bars show them); `ScanProgress` is the
runner's progress callback for a whole scan (`progress=`, and `.rate` as `rate_progress=`) that
keeps the latest figures for another thread to read (`snapshot()`): the site's worker
publishes them for the scan page (scans/progress.py). No Django here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from . import formatting as fmt
from .stats import percentile


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

    def eta_s(self, completed: int, total: int) -> float | None:
        """Seconds the level has left at its pace so far; None before its first request ends."""
        if completed <= 0 or total <= completed:
            return 0.0 if total and completed >= total else None
        return self.elapsed_s / completed * (total - completed)

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

    def __call__(self, level: int, completed: int, total: int, record=None) -> None:
        self._update("concurrency", level, completed, total, record)

    def rate(self, rate: float, completed: int, total: int, record=None) -> None:
        """An open-loop rate level's progress (runner.RateProgressCallback)."""
        self._update("rate", rate, completed, total, record)

    def _update(self, kind: str, value: float, completed: int, total: int, record) -> None:
        with self._lock:
            if record is None and completed == 0:  # a level starts
                self._done_before += self._completed
                self._levels_started += 1
                self._kind, self._value = kind, value
                self._figures = LevelFigures(self._clock)
            elif record is not None and self._figures is not None:
                self._figures.add(record)
            self._completed, self._total = completed, total
            self.version += 1

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
            if self._kind == "rate":
                stage = "rate"
            elif number <= planned:
                stage = "level"
            else:
                stage = "search"
            rate = figures.output_rate()
            eta = figures.eta_s(self._completed, self._total)
            ttft = figures.ttft_p50_ms
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
        left = fmt.seconds(eta) if eta >= 60 else f"{max(1, round(eta))} s"
        parts.append(f"about {left} left in this level")
    return " · ".join(parts)
