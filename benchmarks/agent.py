"""`tokvera host-agent`: serve network jobs from a local OpenAI-compatible server.

    tokvera host-agent --coordinator http://127.0.0.1:8000 --token-env TOKVERA_HOST_TOKEN \\
        --upstream http://127.0.0.1:8080/v1 --model gemma-3-270m-q4

The agent heartbeats every 15 s (the coordinator says how often), asks for leases (each held
by the coordinator up to 25 s until a job is assigned to this host), runs each
job as a streaming chat completion against its upstream and reports `complete` (TTFT at the
first output token of any kind, thinking included, completion tokens from the server's usage,
elapsed time; read by the scanner's stream parser, scans/grader/stream.py) or `fail`.
Coordinator restarts and upstream errors are met with backoff, never a crash; reports are
retried until the coordinator answers (completion is idempotent there, so a retry is safe).

Completions are group-committed: while no completion call of this agent is in flight a
finished job is reported at once, alone (`/v1/jobs/{id}/complete`); the reports of slots that
finish while one is in flight wait for it and then go together in one `/v1/jobs/complete`
call, whose next jobs go back to the slots that reported, one each. So a lone report is
never held back, and a busy host with several slots spends fewer calls than jobs.

This module does not import Django: it runs on host machines with httpx only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from scans.grader.cli import UsageError
from scans.grader.openai_chat import chat_request_body, read_sse
from scans.grader.sse import SSEDecoder
from scans.grader.stream import StreamParser, classify_end

__all__ = ["AgentConfig", "Agent", "Outcome", "run_upstream", "add_arguments", "run"]

USER_AGENT = "tokvera-host-agent/1"


class AgentStopped(Exception):
    """The coordinator refused the host token: nothing this agent can do will fix that."""


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


@dataclass(frozen=True)
class Outcome:
    """What one upstream run measured. `reason` is set when the job must be reported failed.

    `ttft_ms` is the time to the first output token of any kind (thinking included), the same
    time the scanner grades; `first_answer_ms` the time to the first answer token. Both from
    the moment the request body was written."""

    ttft_ms: float | None
    completion_tokens: int
    elapsed_ms: float
    content: str
    finish_reason: str | None
    usage_reported: bool
    reason: str | None = None
    first_answer_ms: float | None = None
    thinking_chunks: int = 0
    reasoning_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class Answer:
    """What the coordinator answered for one completion: /complete's status (None: no answer
    before the agent gave up or stopped), its detail when refused, and the next job (started)
    the completion brought."""

    status: int | None
    detail: str = ""
    following: dict | None = None


@dataclass
class PendingReport:
    """One slot's completion, waiting for the call that carries it."""

    job_id: str
    body: dict  # the figures and result, as /complete takes them
    lease_next: bool
    answered: asyncio.Future[Answer]

    def settle(self, answer: Answer) -> None:
        if not self.answered.done():  # a slot cancelled while it waited has gone
            self.answered.set_result(answer)


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


# --- one job against the upstream ------------------------------------------------------------


async def run_upstream(client: httpx.AsyncClient, upstream: str, model: str, job: dict,
                       timeout_s: float = 300.0) -> Outcome:
    """Stream one chat completion and measure it with the scanner's stream parser
    (``scans.grader.stream``), so a job's figures mean what a scan's do. The body is the
    scanner's (``scans.grader.openai_chat.chat_request_body``) with the job's messages and
    max_tokens. Never raises for upstream trouble."""
    body = chat_request_body(model, job["messages"], job["max_tokens"])
    url = upstream.rstrip("/") + "/chat/completions"
    parser = StreamParser(keep_text=True)
    started = time.perf_counter()
    written: list[float] = []

    async def trace(name: str, info: dict) -> None:
        if name == "http11.send_request_body.complete":
            written.append(time.perf_counter())

    try:
        async with asyncio.timeout(timeout_s):
            reason = await _read_upstream(client, url, body, parser, trace)
    except TimeoutError:
        reason = f"upstream did not finish within {timeout_s:.0f} s"
    except httpx.HTTPError as exc:
        reason = f"upstream error: {type(exc).__name__}: {exc}"
    return _outcome(parser, started, written[0] if written else started, reason)


async def _read_upstream(client: httpx.AsyncClient, url: str, body: dict,
                         parser: StreamParser, trace: Callable) -> str | None:
    """Read the stream into `parser` (``scans.grader.openai_chat.read_sse``, as the scanner
    does); the failure reason, or None for a reply."""
    async with client.stream("POST", url, json=body, extensions={"trace": trace}) as response:
        if response.status_code != 200:
            await response.aread()
            return f"upstream answered HTTP {response.status_code}"
        sse = "event-stream" in response.headers.get("content-type", "")
        decoder = SSEDecoder()
        # Up to [DONE] or an error in the stream: the outcome is then known, and the end of
        # the body is not awaited.
        await read_sse(response.aiter_raw(), decoder, parser)
        if decoder.oversized:
            return f"upstream sent an SSE event over {decoder.max_line} bytes"
    failure = classify_end(parser.tally, events_seen=decoder.events_seen, sse=sse)
    return None if failure is None else f"{failure[0]}: {failure[1]}"


def _outcome(parser: StreamParser, started: float, written: float,
             reason: str | None) -> Outcome:
    tally = parser.tally

    def since_written_ms(moment: float | None) -> float | None:
        return None if moment is None else max(0.0, (moment - written) * 1000)

    return Outcome(
        ttft_ms=since_written_ms(tally.first_output_at),
        completion_tokens=tally.output_units,
        elapsed_ms=(time.perf_counter() - started) * 1000,
        content="".join(parser.answer_text or ()),
        finish_reason=tally.finish_reason,
        usage_reported=tally.reported_usage,
        reason=None if reason is None else reason[:180],
        first_answer_ms=since_written_ms(tally.first_answer_at),
        thinking_chunks=tally.thinking_chunks,
        reasoning_tokens=tally.reasoning_tokens,
    )


# --- the agent -------------------------------------------------------------------------------


class Agent:
    def __init__(self, config: AgentConfig, log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.log = log or (lambda line: sys.stderr.write(f"host-agent: {line}\n"))
        self.served = 0
        self.online = asyncio.Event()
        self._stop = asyncio.Event()
        self._fatal: str | None = None
        self._upstream_backoff = Backoff(1.0, config.max_backoff_s)
        self._upstream_wait_until = 0.0
        self._heartbeat_s = config.heartbeat_s
        # Group commit: the reports waiting for the next completion call, and the task that
        # sends them (None while no completion call is in flight).
        self._pending: list[PendingReport] = []
        self._reporter: asyncio.Task | None = None
        self._batch_call = True  # False after the coordinator answered it has no batch call

    # HTTP to the coordinator

    def _coordinator_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.config.coordinator.rstrip("/"),
            headers={"Authorization": f"Bearer {self.config.token}", "User-Agent": USER_AGENT},
            timeout=httpx.Timeout(10.0), trust_env=False,
        )

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

    def _refused(self, response: httpx.Response) -> None:
        if response.status_code == 401:
            self._fatal = "the coordinator refused this host token (401); stopping"
            self._stop.set()
            raise AgentStopped(self._fatal)

    async def run(self) -> int:
        """Serve until stop() (or max_jobs, or a refused token). Returns an exit status."""
        async with self._coordinator_client() as coordinator, self._upstream_client() as upstream:
            tasks = [
                asyncio.create_task(self._heartbeats(coordinator)),
                asyncio.create_task(self._leases(coordinator, upstream)),
            ]
            await self._stop.wait()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, AgentStopped):
                    await task
            await self._finish_reports()
        if self._fatal:
            self.log(self._fatal)
            return 1
        return 0

    async def _heartbeats(self, coordinator: httpx.AsyncClient) -> None:
        backoff = Backoff(0.5, self.config.max_backoff_s)
        body = {"models": list(self.config.models), "slots": self.config.slots,
                "hardware": self.config.hardware}
        while not self._stop.is_set():
            try:
                response = await coordinator.post("/v1/hosts/heartbeat", json=body)
            except httpx.HTTPError as exc:
                self.online.clear()
                delay = backoff.next()
                self.log(f"heartbeat failed ({type(exc).__name__}); retrying in {delay:.1f} s")
                await self._sleep(delay)
                continue
            self._refused(response)
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

    async def _leases(self, coordinator: httpx.AsyncClient, upstream: httpx.AsyncClient) -> None:
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
                    response = await coordinator.post(
                        "/v1/hosts/lease", json={"start": True, "wait_s": self.config.lease_wait_s},
                        timeout=self._waiting_timeout())
                except httpx.HTTPError as exc:
                    slots.release()
                    delay = backoff.next()
                    self.log(f"lease failed ({type(exc).__name__}); retrying in {delay:.1f} s")
                    await self._sleep(delay)
                    continue
                if response.status_code != 200:
                    slots.release()
                    self._refused(response)
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
                task = asyncio.create_task(self._serve(coordinator, upstream, response.json()))
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

    async def _serve(self, coordinator: httpx.AsyncClient, upstream: httpx.AsyncClient, job: dict) -> None:
        with contextlib.suppress(AgentStopped):  # run() reports the refused token
            await self._serve_one(coordinator, upstream, job)

    async def _serve_one(self, coordinator: httpx.AsyncClient, upstream: httpx.AsyncClient,
                         job: dict | None) -> None:
        """Run the job, then each next job the completion hands back (already started), until
        the coordinator has none for this slot."""
        while job is not None:
            job = await self._run_job(coordinator, upstream, job)

    def _wants_next(self) -> bool:
        """Ask for the next job with a completion only while this agent will run it."""
        more = self.config.max_jobs is None or self.served + 1 < self.config.max_jobs
        return more and not self._stop.is_set()

    async def _run_job(self, coordinator: httpx.AsyncClient, upstream: httpx.AsyncClient,
                       job: dict) -> dict | None:
        """Run one job and report it; returns the next job, when the completion brought one."""
        job_id = job["id"]
        following = None
        if job.get("status") != "running":  # a coordinator that does not start on lease
            started = await self._report(coordinator, f"/v1/jobs/{job_id}/start", None)
            if started is None or started.status_code != 200:
                self.log(f"job {job_id}: could not start ({getattr(started, 'status_code', 'no answer')})")
                return None
        model = self.config.upstream_model or job["model"]
        outcome = await run_upstream(upstream, self.config.upstream, model, job,
                                     timeout_s=self.config.job_timeout_s)
        if outcome.ok:
            self._upstream_backoff.reset()
            self._upstream_wait_until = 0.0
            answer = await self._complete(coordinator, job_id, {
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
                await self._report(coordinator, f"/v1/jobs/{job_id}/fail",
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
            await self._report(coordinator, f"/v1/jobs/{job_id}/fail", {"reason": outcome.reason})
        self.served += 1
        if self.config.max_jobs is not None and self.served >= self.config.max_jobs:
            self._stop.set()
        return following

    # Completions, group-committed

    async def _complete(self, coordinator: httpx.AsyncClient, job_id: str, body: dict,
                        lease_next: bool) -> Answer:
        """Report a completion and return what the coordinator answered for it. Sent at once
        when no completion call is in flight; otherwise it waits for that call and goes with
        every report that finished meanwhile, in the one call that follows."""
        report = PendingReport(job_id, body, lease_next, asyncio.get_running_loop().create_future())
        self._pending.append(report)
        if self._reporter is None:
            self._reporter = asyncio.create_task(self._send_reports(coordinator))
            # Its slots learn a refused token from their answers; the task's own is dropped.
            self._reporter.add_done_callback(lambda task: task.cancelled() or task.exception())
        return await report.answered

    async def _send_reports(self, coordinator: httpx.AsyncClient) -> None:
        """One completion call after another, each with every report waiting when it starts,
        until none waits."""
        reports: list[PendingReport] = []
        try:
            while self._pending:
                reports, self._pending = self._pending, []
                if len(reports) == 1 or not self._batch_call:
                    await self._complete_each(coordinator, reports)
                else:
                    await self._complete_together(coordinator, reports)
        except BaseException as exc:  # a refused token, the agent stopping, an unreadable answer
            for report in [*reports, *self._pending]:
                if isinstance(exc, AgentStopped):
                    if not report.answered.done():
                        report.answered.set_exception(AgentStopped(str(exc)))
                else:
                    report.settle(Answer(None, f"not reported: {type(exc).__name__}"))
            self._pending = []
            raise
        finally:
            self._reporter = None

    async def _complete_each(self, coordinator: httpx.AsyncClient,
                             reports: list[PendingReport]) -> None:
        """Each report by its own `/v1/jobs/{id}/complete`, as a lone report goes."""
        await asyncio.gather(*(self._complete_alone(coordinator, report) for report in reports))

    async def _complete_alone(self, coordinator: httpx.AsyncClient, report: PendingReport) -> None:
        # lease_next not waited for here: the lease loop holds this host's one waiting call.
        response = await self._report(coordinator, f"/v1/jobs/{report.job_id}/complete",
                                      {**report.body, "lease_next": report.lease_next})
        if response is None:
            report.settle(Answer(None))
        elif response.status_code == 200:
            report.settle(Answer(200, following=response.json().get("next")))
        else:
            report.settle(Answer(response.status_code, response.text[:120]))

    async def _complete_together(self, coordinator: httpx.AsyncClient,
                                 reports: list[PendingReport]) -> None:
        """Several reports in one `/v1/jobs/complete`; each gets its item of the answer, and the
        next jobs go to the reports completed, one each (those that asked for one first)."""
        response = await self._report(coordinator, "/v1/jobs/complete", {
            "jobs": [{"id": report.job_id, **report.body} for report in reports],
            "lease_next": any(report.lease_next for report in reports),
        })
        if response is None:
            for report in reports:
                report.settle(Answer(None))
            return
        if response.status_code != 200:
            # A coordinator without the batch call (404, 405), or one that refused the call as
            # a whole (400: a report it could not read): each report alone, answered as today.
            if response.status_code in (404, 405):
                self._batch_call = False
                self.log("the coordinator has no batch completion call; reporting each job alone")
            await self._complete_each(coordinator, reports)
            return
        answer = response.json()
        items = {str(item.get("id")): item for item in answer.get("jobs") or ()}
        following = list(answer.get("next") or ())
        completed = []
        for report in reports:
            item = items.get(report.job_id)
            if item is None:
                report.settle(Answer(None, "not in the coordinator's answer"))
            elif "error" in item:
                error = item["error"] or {}
                report.settle(Answer(int(error.get("status") or 0) or None,
                                     str(error.get("detail", ""))[:120]))
            else:
                completed.append(report)
        completed.sort(key=lambda report: not report.lease_next)  # stable: the askers first
        for report in completed:
            report.settle(Answer(200, following=following.pop(0) if following else None))

    async def _finish_reports(self) -> None:
        """Stopping: let the completion calls under way end briefly, then give them up."""
        reporter = self._reporter
        if reporter is None:
            return
        await asyncio.wait({reporter}, timeout=10)
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError, AgentStopped):
            await reporter

    def _waiting_timeout(self) -> httpx.Timeout:
        """For a call the coordinator may hold for lease_wait_s: that, plus the usual 10 s."""
        return httpx.Timeout(10.0, read=self.config.lease_wait_s + 10.0)

    async def _report(self, coordinator: httpx.AsyncClient, path: str, body: dict | None,
                      give_up_s: float = 600.0) -> httpx.Response | None:
        """POST until the coordinator answers (any status below 500), or give up."""
        backoff = Backoff(0.5, self.config.max_backoff_s)
        deadline = time.monotonic() + give_up_s
        while time.monotonic() < deadline:
            try:
                response = await coordinator.post(path, json=body)
            except httpx.HTTPError as exc:
                reason = type(exc).__name__
            else:
                if response.status_code < 500 and response.status_code != 429:
                    self._refused(response)
                    return response
                reason = f"HTTP {response.status_code}"
            if self._stop.is_set() and self._fatal:
                return None
            delay = backoff.next()
            self.log(f"{path}: {reason}; retrying in {delay:.1f} s")
            await asyncio.sleep(delay)
        return None


# --- the command -----------------------------------------------------------------------------


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()[:100]
    return ""


def _ram_mb() -> int | None:
    with contextlib.suppress(ValueError, OSError, AttributeError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coordinator", required=True, metavar="URL",
                        help="the Tokvera site, e.g. http://127.0.0.1:8000")
    parser.add_argument("--token-env", required=True, metavar="VAR",
                        help="environment variable that holds the host token (tkh_…)")
    parser.add_argument("--upstream", required=True, metavar="URL",
                        help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--model", required=True, action="append", metavar="ID",
                        help="catalog id served (repeat for several)")
    parser.add_argument("--upstream-model", default=None, metavar="NAME",
                        help="model name to send upstream (default: the catalog id)")
    parser.add_argument("--slots", type=int, default=1, help="jobs run at once (default 1)")
    parser.add_argument("--heartbeat-s", type=float, default=15.0, help=argparse.SUPPRESS)
    parser.add_argument("--poll-s", type=float, default=1.0,
                        help="seconds between lease calls when the coordinator does not hold "
                             "them (default 1)")
    parser.add_argument("--lease-wait-s", type=float, default=25.0,
                        help="how long the coordinator holds a lease call for a job "
                             "(0 to 30, default 25)")
    parser.add_argument("--job-timeout-s", type=float, default=270.0,
                        help="give up on an upstream stream after this long (default 270, below the "
                             "coordinator's 300 s run deadline)")
    parser.add_argument("--gpu-model", default="", help="GPU model, for the hardware inventory")
    parser.add_argument("--vram-mb", type=int, default=None, help="GPU memory in MiB")
    parser.add_argument("--max-jobs", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true", help="log only problems")


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    token = os.environ.get(args.token_env, "").strip()
    if not token:
        raise UsageError(f"environment variable {args.token_env} holds no host token")
    if not token.startswith("tkh_"):
        raise UsageError(f"{args.token_env} does not hold a host token (tkh_…)")
    for name in ("coordinator", "upstream"):
        url = getattr(args, name)
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--{name} {url!r}: expected an http:// or https:// URL")
    if not 1 <= args.slots <= 64:
        raise UsageError("--slots must be between 1 and 64")
    if not 0 <= args.lease_wait_s <= 30:
        raise UsageError("--lease-wait-s must be between 0 and 30")
    if args.poll_s <= 0 or args.heartbeat_s <= 0 or args.job_timeout_s <= 0:
        raise UsageError("--poll-s, --heartbeat-s and --job-timeout-s must be positive")
    hardware: dict[str, str | int] = {"cpu_model": _cpu_model()}
    if args.gpu_model:
        hardware["gpu_model"] = args.gpu_model[:100]
    if args.vram_mb is not None:
        hardware["vram_mb"] = args.vram_mb
    ram = _ram_mb()
    if ram is not None:
        hardware["ram_mb"] = ram
    return AgentConfig(
        coordinator=args.coordinator, token=token, upstream=args.upstream,
        models=tuple(dict.fromkeys(args.model)), upstream_model=args.upstream_model,
        slots=args.slots, heartbeat_s=args.heartbeat_s, poll_s=args.poll_s,
        lease_wait_s=args.lease_wait_s,
        job_timeout_s=args.job_timeout_s, hardware=hardware, max_jobs=args.max_jobs,
    )


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    quiet = getattr(args, "quiet", False)

    def log(line: str) -> None:
        if quiet and (": completed" in line):
            return
        sys.stderr.write(f"host-agent: {line}\n")
        sys.stderr.flush()

    async def main() -> int:
        agent = Agent(config, log=log)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, agent.stop)
        log(f"serving {', '.join(config.models)} from {config.upstream} for {config.coordinator} "
            f"({config.slots} slot{'s' if config.slots != 1 else ''})")
        return await agent.run()

    return asyncio.run(main())
