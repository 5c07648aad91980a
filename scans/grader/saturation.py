"""--stop-on-saturation: when a closed-loop level stops early because the server fell behind.

Two rules, read after each completed request, in the order requests completed:

* ``error_burst``: more than ``ERROR_BURST_SHARE`` of the last ``ERROR_BURST_WINDOW``
  completed requests failed (any failure class).
* ``queue_growth``: the level's completions are cut into waves of ``max(concurrency,
  MIN_WAVE)`` requests; the median TTFT of each of the last ``GROWTH_WAVES`` waves is above
  the one before, and the last is at least ``GROWTH_FACTOR`` times the level's first wave.
  A server keeping up holds TTFT flat from wave to wave; one whose queue grows adds the
  queue's wait to every wave.

Once a rule fires the level takes no new request; those in flight finish and count as they
are (failures included). Later levels are not run. Off by default: grades of scans without
the option are unchanged.
"""

from __future__ import annotations

from .figures import percentile
from .measurement import RequestRecord

__all__ = ["ERROR_BURST_SHARE", "ERROR_BURST_WINDOW", "GROWTH_FACTOR", "GROWTH_WAVES",
           "SaturationWatch"]

ERROR_BURST_WINDOW = 10
ERROR_BURST_SHARE = 0.5
MIN_WAVE = 4
GROWTH_WAVES = 4
GROWTH_FACTOR = 3.0


class SaturationWatch:
    """Fed each completed request of one level; ``stopped`` once a rule fired."""

    def __init__(self, concurrency: int) -> None:
        self.wave_size = max(concurrency, MIN_WAVE)
        self.failed: list[bool] = []
        self._wave: list[float] = []
        self.wave_medians: list[float] = []
        self.stopped: dict | None = None

    def completed(self, record: RequestRecord) -> dict | None:
        """Record `record`'s outcome; the {reason, after_requests, detail} that stops the
        level, once (None before and after)."""
        if self.stopped is not None:
            return None
        self.failed.append(record.failure is not None)
        reason = self._error_burst() or self._queue_growth(record)
        if reason is not None:
            self.stopped = {"reason": reason[0], "after_requests": len(self.failed),
                            "detail": reason[1]}
            return self.stopped
        return None

    def _error_burst(self) -> tuple[str, str] | None:
        last = self.failed[-ERROR_BURST_WINDOW:]
        if len(last) < ERROR_BURST_WINDOW:
            return None
        failures = sum(last)
        if failures > ERROR_BURST_SHARE * ERROR_BURST_WINDOW:
            return "error_burst", (f"{failures} of the last {ERROR_BURST_WINDOW} requests "
                                   "failed")
        return None

    def _queue_growth(self, record: RequestRecord) -> tuple[str, str] | None:
        ttft = record.ttft_ms
        if record.failure is None and ttft is not None:
            self._wave.append(ttft)
        if len(self.failed) % self.wave_size or not self._wave:
            return None
        median = percentile(self._wave, 50)
        self._wave = []
        if median is None:
            return None
        self.wave_medians.append(median)
        waves = self.wave_medians
        if len(waves) <= GROWTH_WAVES:
            return None
        last = waves[-GROWTH_WAVES - 1:]
        rising = all(b > a for a, b in zip(last, last[1:], strict=False))
        if rising and waves[-1] >= GROWTH_FACTOR * waves[0]:
            return "queue_growth", (f"median TTFT rose in each of the last {GROWTH_WAVES} "
                                    f"waves of {self.wave_size} requests, to "
                                    f"{waves[-1] / waves[0]:.1f}x the first wave's")
        return None
