"""The load runner: concurrency levels of streaming chat completions over one httpx client.

One entry point, used by the CLI and the Celery task alike: ``run_scan(plan)`` (sync; runs its
own event loop) or ``await run_scan_async(plan)``. Neither touches global state.

What is measured, per request (see ``RequestRecord``):

* TTFT from the moment the request body was fully written (httpcore's trace event
  ``http11.send_request_body.complete``) to the first chunk whose ``choices[0].delta.content``
  is non-empty; a role-only or empty chunk and the response headers do not count.
* the arrival time of every non-empty content chunk (gaps and rates are derived from them);
* usage (``usage.completion_tokens``), finish reason, failure class.

Connections: a request sent on a reused keep-alive connection that the server had already
closed, failing before any response byte, is retried once on a fresh connection (llama.cpp's
server closes after each streamed response while advertising keep-alive). No other request is
ever retried.

The scanner watches its own event loop: a task sleeps ``LOOP_LAG_INTERVAL_S`` and records how
much later it woke up. A level whose p99 lag exceeds ``LOOP_LAG_THRESHOLD_MS`` is client-bound
(see DECISIONS.md): its latencies say more about this machine than about the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
from array import array
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from .measurement import LevelResult, Measurement, RequestRecord
from .plan import ScanPlan
from .preflight import run_preflight
from .probes import GpuSampler, cost_per_1000_requests, probe_metrics
from .sse import SSEDecoder
from .transport import FRESH_CONNECTION, ConnectGuard, ScanTransport, StaleConnectionError

try:  # a faster JSON parser when installed; the stdlib's otherwise
    import orjson

    _loads = orjson.loads
    _JSON_IMPL = "orjson"
    _JSONError: tuple[type[Exception], ...] = (orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads
    _JSON_IMPL = "json"
    _JSONError = (ValueError,)

__all__ = [
    "LOOP_LAG_INTERVAL_S",
    "LOOP_LAG_THRESHOLD_MS",
    "ProgressCallback",
    "run_scan",
    "run_scan_async",
]

#: The loop-lag monitor's sleep.
LOOP_LAG_INTERVAL_S = 0.010
#: A level whose p99 loop lag (ms) exceeds this is client-bound. See DECISIONS.md.
LOOP_LAG_THRESHOLD_MS = 50.0
#: After ``[DONE]`` the outcome is known; the end of the body is awaited this long at most.
DONE_GRACE_S = 1.0
#: How much of an error body is kept as the failure's detail.
ERROR_DETAIL_BYTES = 512

#: ``progress(concurrency, completed, total, record)``: called when a level starts (completed 0,
#: record None) and after each of its requests ends (with that request's record).
ProgressCallback = Callable[[int, int, int, RequestRecord | None], None]

TOOL_NAME = "tokvera-scan"


def _tool_version() -> str:
    try:
        from importlib.metadata import version

        return version("tokvera-site")
    except Exception:  # pragma: no cover - not installed
        return "0+unknown"


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Scan:
    """The state of one scan (one instance per run; nothing is shared between runs)."""

    def __init__(self, plan: ScanPlan, client: httpx.AsyncClient,
                 progress: ProgressCallback | None, lag_threshold_ms: float,
                 precise_stale_detection: bool) -> None:
        self.plan = plan
        # With ScanTransport, a stale keep-alive connection is recognised exactly
        # (StaleConnectionError: reused, zero response bytes). With another transport, by
        # httpcore's message and the absence of a new TCP connection.
        self.precise = precise_stale_detection
        self.client = client
        self.progress = progress
        self.lag_threshold_ms = lag_threshold_ms
        self.url = plan.chat_url
        self.timeout = plan.timeout_s
        self._next_prompt = 0

    def _body(self) -> bytes:
        index = self._next_prompt
        self._next_prompt += 1
        return json.dumps({
            "model": self.plan.model,
            "messages": [{"role": "user", "content": self.plan.prompt(index)}],
            "max_tokens": self.plan.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }, separators=(",", ":")).encode()

    # -- a level -------------------------------------------------------------------------------
    async def run_level(self, concurrency: int, total: int) -> LevelResult:
        records = [RequestRecord(level=concurrency, index=i) for i in range(total)]
        level = LevelResult(concurrency, records, loop_lag_threshold_ms=self.lag_threshold_ms)
        pending = iter(records)
        completed = 0
        if self.progress:
            self.progress(concurrency, 0, total, None)

        async def worker() -> None:
            nonlocal completed
            for record in pending:
                await self.request(record)
                completed += 1
                if self.progress:
                    self.progress(concurrency, completed, total, record)

        monitor = asyncio.create_task(_lag_monitor(level.loop_lag_ms))
        cpu_start = time.process_time()
        level.started_at = time.perf_counter()
        try:
            await asyncio.gather(*(worker() for _ in range(min(concurrency, total))))
        finally:
            level.finished_at = time.perf_counter()
            level.cpu_s = time.process_time() - cpu_start
            monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await monitor
        return level

    # -- one request ---------------------------------------------------------------------------
    async def request(self, record: RequestRecord) -> None:
        body = self._body()
        record.scheduled_at = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                await self._attempt(record, body, deadline, retry_allowed=True)
        except TimeoutError:
            if record.done_at is not None and record.failure is None:
                self._classify_end(record, done=True, finished=True, events=1, sse=True)
            elif record.failure is None:
                record.failure = "timeout"
                record.error = f"no complete answer within {self.timeout:g} s"
        except Exception as exc:  # never let one request end the scan
            if record.failure is None:
                record.failure = "transport_error"
                record.error = _short(exc)
        record.ended_at = time.perf_counter()

    async def _attempt(self, record: RequestRecord, body: bytes, deadline: asyncio.Timeout,
                       retry_allowed: bool, fresh: bool = False) -> None:
        connected = False
        perf = time.perf_counter

        async def trace(name: str, info: dict) -> None:
            nonlocal connected
            if name == "http11.send_request_body.complete":
                record.body_written_at = perf()
            elif name == "connection.connect_tcp.complete":
                connected = True

        extensions: dict = {"trace": trace}
        if fresh:
            extensions[FRESH_CONNECTION] = True
        request = self.client.build_request("POST", self.url, content=body,
                                            extensions=extensions)
        record.sent_at = perf()
        try:
            response = await self.client.send(request, stream=True)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            if retry_allowed and self._stale(exc, connected):
                # A reused keep-alive connection the server had already closed.
                record.retried = True
                record.body_written_at = None
                await self._attempt(record, body, deadline, retry_allowed=False, fresh=True)
                return
            record.failure = "transport_error"
            record.error = _short(exc)
            record.reused_connection = not connected
            return
        except httpx.TimeoutException as exc:
            record.failure = "timeout"
            record.error = _short(exc)
            return
        except httpx.HTTPError as exc:
            record.failure = "transport_error"
            record.error = _short(exc)
            return
        record.headers_at = perf()
        record.status_code = response.status_code
        record.reused_connection = not connected
        try:
            if not 200 <= response.status_code < 300:
                record.failure = f"http_status_{response.status_code}"
                record.error = await _error_detail(response)
            else:
                await self._read_stream(record, response, deadline)
        finally:
            await response.aclose()

    def _stale(self, exc: httpx.HTTPError, connected: bool) -> bool:
        if isinstance(exc, StaleConnectionError):
            return True
        return not self.precise and not connected and _failed_before_response(exc)

    async def _read_stream(self, record: RequestRecord, response: httpx.Response,
                           deadline: asyncio.Timeout) -> None:
        headers = response.headers
        sse = "event-stream" in headers.get("content-type", "")
        encoding = headers.get("content-encoding", "identity").strip().lower()
        pieces = (response.aiter_raw() if encoding in ("", "identity")
                  else response.aiter_bytes())
        decoder = SSEDecoder()
        times = record.content_times
        append = times.append
        perf = time.perf_counter
        loads = _loads
        json_errors = _JSONError
        done = False
        finished = False
        head = b""
        try:
            async for piece in pieces:
                t = perf()
                if not sse and len(head) < ERROR_DETAIL_BYTES:
                    head += piece[:ERROR_DETAIL_BYTES]
                events = decoder.feed(piece)
                if decoder.oversized:
                    record.failure = "stream_error"
                    record.error = (f"an SSE line or event over {decoder.max_line} bytes "
                                    "(not buffered)")
                    return
                for payload in events:
                    if payload == b"[DONE]":
                        if not done:
                            done = True
                            record.done_at = t
                            _shorten(deadline, DONE_GRACE_S)
                        continue
                    try:
                        obj = loads(payload)
                    except json_errors:
                        obj = _lenient_lines(payload, record)
                        if obj is None:
                            continue
                    if type(obj) is not dict:
                        record.ignored_lines += 1
                        continue
                    error = obj.get("error")
                    if error:
                        record.failure = "stream_error"
                        record.error = _error_message(error)
                        return
                    choices = obj.get("choices")
                    if choices and type(choices) is list:
                        choice = choices[0]
                        if type(choice) is dict:
                            delta = choice.get("delta")
                            if type(delta) is dict:
                                content = delta.get("content")
                                if content and type(content) is str:
                                    append(t)
                            reason = choice.get("finish_reason")
                            if reason is not None:
                                finished = True
                                record.finish_reason = str(reason)[:64]
                    usage = obj.get("usage")
                    if usage and type(usage) is dict:
                        tokens = usage.get("completion_tokens")
                        if type(tokens) is int and tokens >= 0:
                            record.completion_tokens = tokens
                            prompt_tokens = usage.get("prompt_tokens")
                            if type(prompt_tokens) is int and prompt_tokens >= 0:
                                record.prompt_tokens = prompt_tokens
            for payload in decoder.flush():
                if payload == b"[DONE]":
                    done = True
                    record.done_at = perf()
        except httpx.TransportError as exc:  # the body broke off (reset, truncated chunking)
            if not done:
                record.failure = "incomplete_stream"
                record.error = _short(exc)
                return
        finally:
            if times:
                record.first_content_at = times[0]
                record.last_content_at = times[-1]
        if not sse and decoder.events_seen == 0 and head:
            record.failure = "not_sse"
            record.error = (f"{headers.get('content-type', 'no content-type')}: "
                            + head.decode("utf-8", "replace")[:200])
            return
        self._classify_end(record, done=done, finished=finished,
                           events=decoder.events_seen, sse=sse)

    @staticmethod
    def _classify_end(record: RequestRecord, *, done: bool, finished: bool, events: int,
                      sse: bool) -> None:
        if record.failure is not None:
            return
        if not (done or finished):
            if not sse and events == 0:
                record.failure = "not_sse"
                record.error = "the body is not an SSE stream"
            else:
                record.failure = "incomplete_stream"
                record.error = "the stream ended without [DONE] or a finish_reason"
        elif not record.content_times:
            record.failure = "empty_reply"
            record.error = "the stream ended cleanly without any content"


def _failed_before_response(exc: httpx.HTTPError) -> bool:
    """For transports other than ScanTransport: the signature of a keep-alive connection the
    server had already closed (EOF before a response, a reset, a failed write). httpcore's
    message does not tell apart a partial status line, which ScanTransport's byte count does."""
    if isinstance(exc, httpx.RemoteProtocolError):
        return "without sending a response" in str(exc)
    return isinstance(exc, httpx.ReadError | httpx.WriteError)


def _shorten(deadline: asyncio.Timeout, seconds: float) -> None:
    when = asyncio.get_running_loop().time() + seconds
    current = deadline.when()
    if current is None or when < current:
        deadline.reschedule(when)


def _lenient_lines(payload: bytes, record: RequestRecord) -> dict | None:
    """A data payload that is not JSON: if it is several JSON lines (a server that omits the
    blank line between events), take the first object; otherwise count it and skip it."""
    if b"\n" in payload:
        for line in payload.split(b"\n"):
            try:
                obj = _loads(line)
            except _JSONError:
                continue
            if type(obj) is dict:
                return obj
    record.ignored_lines += 1
    return None


def _error_message(error: object) -> str:
    if isinstance(error, dict):
        message = error.get("message") or error.get("type") or error
        return f"error in stream: {message}"[:300]
    return f"error in stream: {error}"[:300]


async def _error_detail(response: httpx.Response) -> str:
    detail = b""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(2.0):
            async for piece in response.aiter_bytes():
                detail += piece
                if len(detail) >= ERROR_DETAIL_BYTES:
                    break
    text = detail[:ERROR_DETAIL_BYTES].decode("utf-8", "replace").strip()
    return f"HTTP {response.status_code}" + (f": {text[:200]}" if text else "")


async def _lag_monitor(samples: array, interval: float = LOOP_LAG_INTERVAL_S) -> None:
    perf = time.perf_counter
    sleep = asyncio.sleep
    while True:
        start = perf()
        await sleep(interval)
        samples.append(max(0.0, (perf() - start - interval) * 1000.0))


def _client_headers(plan: ScanPlan) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream",
        "accept-encoding": "identity",
        "user-agent": f"{TOOL_NAME}/{_tool_version()}",
    }
    for name, value in plan.extra_headers:
        headers[name.lower()] = value
    if plan.api_key:
        headers["authorization"] = f"Bearer {plan.api_key}"
    return headers


async def run_scan_async(
    plan: ScanPlan,
    progress: ProgressCallback | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    connect_guard: ConnectGuard | None = None,
    lag_threshold_ms: float = LOOP_LAG_THRESHOLD_MS,
    preflight_only: bool = False,
) -> Measurement:
    """Run the preflight (``preflight.run_preflight``), then every level of `plan` unless the
    preflight stopped the scan or `preflight_only`; return what was measured.

    `transport`: an httpx transport to send everything through (the load, the /metrics probe,
    the DCGM exporter). By default a ``ScanTransport``; `connect_guard(host, port, ip)` is
    called for every address of every connection it opens and refuses it by raising. Pass one
    or the other, not both (build your transport with the guard in it).
    """
    plan.validate()
    if transport is not None and connect_guard is not None:
        raise ValueError("pass connect_guard or transport, not both")
    own_transport = transport or ScanTransport(connect_guard=connect_guard)
    timeout = httpx.Timeout(connect=min(plan.timeout_s, 30.0), read=None,
                            write=plan.timeout_s, pool=None)
    started_at = _now_iso()
    origin_time = time.perf_counter()
    async with httpx.AsyncClient(transport=own_transport, timeout=timeout,
                                 follow_redirects=False, trust_env=False,
                                 headers=_client_headers(plan)) as client:
        scan = _Scan(plan, client, progress, lag_threshold_ms,
                     precise_stale_detection=isinstance(own_transport, ScanTransport))
        preflight = await run_preflight(scan)
        levels: list[LevelResult] = []
        if preflight.stopped or preflight_only:
            levels, gpu = preflight.without_load(lag_threshold_ms)
        else:
            sampler = GpuSampler(client, dcgm_url=plan.dcgm_url, target_host=plan.host,
                                 use_nvidia_smi=plan.use_nvidia_smi)
            sampler.start()
            try:
                for concurrency in plan.levels:
                    sampler.level = concurrency
                    levels.append(await scan.run_level(concurrency,
                                                       plan.requests_at(concurrency)))
            finally:
                gpu = await sampler.stop()
        if preflight.server_answered and not preflight_only:
            metrics = await probe_metrics(client, plan.origin,
                                          timeout=min(plan.timeout_s, 10.0))
        else:
            metrics = preflight.metrics_not_probed(plan.origin)
    finished_at = _now_iso()
    records = [r for level in levels for r in level.requests]
    cost = cost_per_1000_requests(records, plan.price_input_per_mtok,
                                  plan.price_output_per_mtok)
    loop = asyncio.get_running_loop()
    return Measurement(
        base_url=plan.base_url,
        model=plan.model,
        started_at=started_at,
        finished_at=finished_at,
        levels=levels,
        metrics=metrics,
        gpu=gpu,
        cost=cost,
        loop_lag_threshold_ms=lag_threshold_ms,
        origin_time=origin_time,
        preflight=preflight,
        scanner={
            "tool": TOOL_NAME,
            "version": _tool_version(),
            "event_loop": type(loop).__module__.split(".")[0],
            "json": _JSON_IMPL,
            "transport": type(own_transport).__name__,
            "loop_lag_interval_ms": LOOP_LAG_INTERVAL_S * 1000.0,
            "loop_lag_threshold_ms": lag_threshold_ms,
        },
    )


#: During a scan the youngest GC generation is collected after this many allocations instead of
#: Python's 700: a stream allocates a handful of short-lived objects per chunk, and with the
#: default threshold the collector took a fifth of the scanner's CPU at 128 streams.
GC_GEN0_THRESHOLD = 100_000


@contextlib.contextmanager
def _gc_tuned(enabled: bool):
    """Freeze the objects that exist before the scan and collect the young generation less
    often while it runs; both are restored afterwards."""
    if not enabled:
        yield
        return
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(old[0], GC_GEN0_THRESHOLD), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _loop_factory(use_uvloop: bool | None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if use_uvloop is False:
        return None
    try:
        import uvloop
    except ImportError:
        if use_uvloop:
            raise
        return None
    return uvloop.new_event_loop


def run_scan(
    plan: ScanPlan,
    progress: ProgressCallback | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    connect_guard: ConnectGuard | None = None,
    lag_threshold_ms: float = LOOP_LAG_THRESHOLD_MS,
    use_uvloop: bool | None = None,
    tune_gc: bool = True,
    preflight_only: bool = False,
) -> Measurement:
    """Synchronous wrapper of `run_scan_async` on a fresh event loop (uvloop when installed,
    unless `use_uvloop` is False). Must not be called from a running event loop.

    `tune_gc`: while the scan runs, raise the garbage collector's young-generation threshold
    (``GC_GEN0_THRESHOLD``) and freeze older objects; both are restored when it returns."""
    with _gc_tuned(tune_gc), asyncio.Runner(loop_factory=_loop_factory(use_uvloop)) as runner:
        return runner.run(run_scan_async(plan, progress, transport=transport,
                                         connect_guard=connect_guard,
                                         lag_threshold_ms=lag_threshold_ms,
                                         preflight_only=preflight_only))
