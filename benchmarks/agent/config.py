"""What one host agent serves, and how (the command line's flags: command.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class AgentConfig:
    coordinator: str  # base URL of the site, e.g. http://127.0.0.1:8000
    token: str
    upstream: str  # base URL of the OpenAI-compatible server, ending in /v1
    models: tuple[str, ...]
    upstream_model: str | None = None  # the name the upstream knows the model by
    slots: int = 1
    heartbeat_s: float = 15.0
    poll_s: float = 1.0  # after a lease answered 204 at once (a coordinator that does not wait)
    # A lease waits this long on the coordinator for a job assigned to this host (its maximum
    # is 30 s), so an idle host costs one call per wait instead of one per poll_s.
    lease_wait_s: float = 25.0
    # Below the coordinator's 300 s run deadline, so a slow job reports before it expires.
    job_timeout_s: float = 270.0
    max_backoff_s: float = 30.0
    hardware: dict = field(default_factory=dict)
    max_jobs: int | None = None  # stop after serving this many (demos, tests)
