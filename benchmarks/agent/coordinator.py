"""The agent's session with the coordinator: one HTTP client carrying the host's token, calls
retried until the coordinator answers, and a refused token that stops the agent."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import httpx

from benchmarks.agent.backoff import Backoff
from benchmarks.agent.config import AgentConfig

USER_AGENT = "tokvera-host-agent/1"


class AgentStopped(Exception):
    """The coordinator refused the host token: nothing this agent can do will fix that."""


class Coordinator:
    """Calls to the coordinator. A refused token (401) sets `refused` (why), sets `stopped` and
    raises AgentStopped."""

    def __init__(self, config: AgentConfig, stopped: asyncio.Event, log: Callable[[str], object]) -> None:
        self.config = config
        self.stopped = stopped
        self.log = log
        self.refused: str | None = None
        self._client: httpx.AsyncClient | None = None

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Coordinator]:
        """The client's connections, open for the length of the `with` block."""
        async with httpx.AsyncClient(
            base_url=self.config.coordinator.rstrip("/"),
            headers={"Authorization": f"Bearer {self.config.token}", "User-Agent": USER_AGENT},
            timeout=httpx.Timeout(10.0), trust_env=False,
        ) as client:
            self._client = client
            try:
                yield self
            finally:
                self._client = None

    async def post(self, path: str, body: dict | None, **options) -> httpx.Response:
        if self._client is None:
            raise RuntimeError("no session with the coordinator is open")
        return await self._client.post(path, json=body, **options)

    def check(self, response: httpx.Response) -> None:
        """Raises AgentStopped when the coordinator refused this host's token."""
        if response.status_code == 401:
            self.refused = "the coordinator refused this host token (401); stopping"
            self.stopped.set()
            raise AgentStopped(self.refused)

    async def report(self, path: str, body: dict | None,
                     give_up_s: float = 600.0) -> httpx.Response | None:
        """POST until the coordinator answers (any status below 500), or give up."""
        backoff = Backoff(0.5, self.config.max_backoff_s)
        deadline = time.monotonic() + give_up_s
        while time.monotonic() < deadline:
            try:
                response = await self.post(path, body)
            except httpx.HTTPError as exc:
                reason = type(exc).__name__
            else:
                if response.status_code < 500 and response.status_code != 429:
                    self.check(response)
                    return response
                reason = f"HTTP {response.status_code}"
            if self.stopped.is_set() and self.refused:
                return None
            delay = backoff.next()
            self.log(f"{path}: {reason}; retrying in {delay:.1f} s")
            await asyncio.sleep(delay)
        return None
