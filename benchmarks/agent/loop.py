"""The host agent's loops: heartbeats that keep the host online, leases that fill its slots,
and each slot running its job and the next ones its completions bring back."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable

import httpx

from benchmarks.agent.backoff import Backoff
from benchmarks.agent.config import AgentConfig
from benchmarks.agent.coordinator import AgentStopped, Coordinator
from benchmarks.agent.reports import CompletionReports
from benchmarks.agent.upstream import run_upstream


class Agent:
    """One host agent: heartbeats, a lease loop that fills the slots, and each slot's jobs run
    against the upstream and reported (several at once: reports.py)."""

    def __init__(self, config: AgentConfig, log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.log = log or (lambda line: sys.stderr.write(f"host-agent: {line}\n"))
        self.served = 0
        self.online = asyncio.Event()
        self._stop = asyncio.Event()
        self._upstream_backoff = Backoff(1.0, config.max_backoff_s)
        self._upstream_wait_until = 0.0
        self._heartbeat_s = config.heartbeat_s
        self.coordinator = Coordinator(config, self._stop, self.log)
        self.reports = CompletionReports(self.coordinator, self.log)

    def _upstream_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=httpx.Timeout(self.config.job_timeout_s, connect=5.0),
            limits=httpx.Limits(max_connections=self.config.slots + 2), trust_env=False,
        )

    def stop(self) -> None:
        self._stop.set()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=max(0.0, seconds))

    async def run(self) -> int:
        """Serve until stop() (or max_jobs, or a refused token). Returns an exit status."""
        async with self.coordinator.session(), self._upstream_client() as upstream:
            tasks = [
                asyncio.create_task(self._heartbeats()),
                asyncio.create_task(self._leases(upstream)),
            ]
            await self._stop.wait()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, AgentStopped):
                    await task
            await self.reports.finish()
        if self.coordinator.refused:
            self.log(self.coordinator.refused)
            return 1
        return 0

    async def _heartbeats(self) -> None:
        backoff = Backoff(0.5, self.config.max_backoff_s)
        body = {"models": list(self.config.models), "slots": self.config.slots,
                "hardware": self.config.hardware}
        while not self._stop.is_set():
            try:
                response = await self.coordinator.post("/v1/hosts/heartbeat", body)
            except httpx.HTTPError as exc:
                self.online.clear()
                delay = backoff.next()
                self.log(f"heartbeat failed ({type(exc).__name__}); retrying in {delay:.1f} s")
                await self._sleep(delay)
                continue
            self.coordinator.check(response)
            if response.status_code == 200:
                backoff.reset()
                answer = response.json()
                self._heartbeat_s = float(answer.get("heartbeat_interval_s") or self.config.heartbeat_s)
                if answer.get("online"):
                    self.online.set()
                else:
                    self.online.clear()
                await self._sleep(min(self._heartbeat_s, self.config.heartbeat_s))
            elif response.status_code == 429:
                await self._sleep(float(response.headers.get("Retry-After", "5")))
            else:
                self.online.clear()
                delay = backoff.next()
                self.log(f"heartbeat answered {response.status_code}: {response.text[:200]}")
                await self._sleep(max(delay, 5.0) if response.status_code < 500 else delay)

    async def _leases(self, upstream: httpx.AsyncClient) -> None:
        slots = asyncio.Semaphore(self.config.slots)
        running: set[asyncio.Task] = set()
        backoff = Backoff(0.5, self.config.max_backoff_s)
        try:
            while not self._stop.is_set():
                if not self.online.is_set():
                    await self._wait_online()
                    continue
                wait = self._upstream_wait_until - time.monotonic()
                if wait > 0:  # the upstream just failed: do not take jobs it would fail too
                    await self._sleep(wait)
                    continue
                await slots.acquire()
                try:
                    # Started by the coordinator as it is handed out: no separate start call.
                    # The coordinator holds the call until a job is assigned (or wait_s).
                    asked = time.monotonic()
                    response = await self.coordinator.post(
                        "/v1/hosts/lease", {"start": True, "wait_s": self.config.lease_wait_s},
                        timeout=self._waiting_timeout())
                except httpx.HTTPError as exc:
                    slots.release()
                    delay = backoff.next()
                    self.log(f"lease failed ({type(exc).__name__}); retrying in {delay:.1f} s")
                    await self._sleep(delay)
                    continue
                if response.status_code != 200:
                    slots.release()
                    self.coordinator.check(response)
                    if response.status_code == 204:
                        backoff.reset()
                        quick = min(1.0, self.config.lease_wait_s / 2)
                        if not self.config.lease_wait_s or time.monotonic() - asked < quick:
                            await self._sleep(self.config.poll_s)  # it did not wait: poll
                    elif response.status_code == 429:
                        await self._sleep(float(response.headers.get("Retry-After", "5")))
                    else:
                        await self._sleep(backoff.next())
                    continue
                backoff.reset()
                task = asyncio.create_task(self._serve(upstream, response.json()))
                running.add(task)

                def finished(t: asyncio.Task) -> None:
                    running.discard(t)
                    slots.release()

                task.add_done_callback(finished)
        finally:
            # Stopping: let jobs in flight finish briefly; the coordinator requeues the rest.
            if running:
                await asyncio.wait(running, timeout=10)
                for task in running:
                    task.cancel()

    async def _wait_online(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.online.wait(), timeout=1.0)

    async def _serve(self, upstream: httpx.AsyncClient, job: dict) -> None:
        with contextlib.suppress(AgentStopped):  # run() reports the refused token
            await self._serve_one(upstream, job)

    async def _serve_one(self, upstream: httpx.AsyncClient, job: dict | None) -> None:
        """Run the job, then each next job the completion hands back (already started), until
        the coordinator has none for this slot."""
        while job is not None:
            job = await self._run_job(upstream, job)

    def _wants_next(self) -> bool:
        """Ask for the next job with a completion only while this agent will run it."""
        more = self.config.max_jobs is None or self.served + 1 < self.config.max_jobs
        return more and not self._stop.is_set()

    async def _run_job(self, upstream: httpx.AsyncClient, job: dict) -> dict | None:
        """Run one job and report it; returns the next job, when the completion brought one."""
        job_id = job["id"]
        following = None
        if job.get("status") != "running":  # a coordinator that does not start on lease
            started = await self.coordinator.report(f"/v1/jobs/{job_id}/start", None)
            if started is None or started.status_code != 200:
                self.log(f"job {job_id}: could not start ({getattr(started, 'status_code', 'no answer')})")
                return None
        model = self.config.upstream_model or job["model"]
        outcome = await run_upstream(upstream, self.config.upstream, model, job,
                                     timeout_s=self.config.job_timeout_s)
        if outcome.ok:
            self._upstream_backoff.reset()
            self._upstream_wait_until = 0.0
            answer = await self.reports.complete(job_id, {
                "ttft_ms": outcome.ttft_ms,
                "completion_tokens": outcome.completion_tokens,
                "elapsed_ms": outcome.elapsed_ms,
                "result": {"content": outcome.content, "finish_reason": outcome.finish_reason,
                           "usage_reported": outcome.usage_reported,
                           "first_answer_ms": outcome.first_answer_ms,
                           "thinking_chunks": outcome.thinking_chunks,
                           "reasoning_tokens": outcome.reasoning_tokens},
            }, lease_next=self._wants_next())
            if answer.status == 400:
                # The coordinator found the figures implausible; say so rather than drop the job.
                await self.coordinator.report(f"/v1/jobs/{job_id}/fail",
                                              {"reason": f"figures refused: {answer.detail}"})
            elif answer.status == 200:
                ttft = "—" if outcome.ttft_ms is None else f"{outcome.ttft_ms:.0f} ms"
                self.log(f"job {job_id}: completed, TTFT {ttft}, {outcome.completion_tokens} tokens "
                         f"in {outcome.elapsed_ms:.0f} ms")
                following = answer.following
            elif answer.status is not None:  # 404 or 409: not this host's job, or settled
                self.log(f"job {job_id}: completion refused ({answer.status}): {answer.detail}")
        else:
            self._upstream_wait_until = time.monotonic() + self._upstream_backoff.next()
            self.log(f"job {job_id}: failed: {outcome.reason}")
            await self.coordinator.report(f"/v1/jobs/{job_id}/fail", {"reason": outcome.reason})
        self.served += 1
        if self.config.max_jobs is not None and self.served >= self.config.max_jobs:
            self._stop.set()
        return following

    def _waiting_timeout(self) -> httpx.Timeout:
        """For a call the coordinator may hold for lease_wait_s: that, plus the usual 10 s."""
        return httpx.Timeout(10.0, read=self.config.lease_wait_s + 10.0)
