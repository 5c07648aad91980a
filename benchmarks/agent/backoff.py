"""The agent's waits after a failure: exponential, with jitter, reset by a success."""

from __future__ import annotations

import random


class Backoff:
    """Exponential backoff with jitter, reset by a success."""

    def __init__(self, first_s: float = 0.5, max_s: float = 30.0) -> None:
        self.first_s, self.max_s = first_s, max_s
        self.delay_s = 0.0

    def reset(self) -> None:
        self.delay_s = 0.0

    def next(self) -> float:
        self.delay_s = self.first_s if not self.delay_s else min(self.max_s, self.delay_s * 2)
        return self.delay_s * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not crypto
