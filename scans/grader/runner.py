"""The load runner: concurrency levels of streaming chat completions over one httpx client.

One entry point, used by the CLI and the Celery task alike: ``run_scan(plan)`` (sync; runs its
own event loop) or ``await run_scan_async(plan)``. Neither touches global state.

What is measured, per request (see ``RequestRecord``):

* the arrival of every chunk with output (``stream.StreamParser`` says what output is:
  content, reasoning, refusal or tool calls), timed from the moment the request body was fully
  written (httpcore's trace event ``http11.send_request_body.complete``): time to the first
  output token (graded as TTFT), to the first answer token, chunk gaps and rates;
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
import threading
import time
from array import array
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import httpx

from .budget import StreamBudget
from .measurement import LevelResult, Measurement, ModelsListing, RequestRecord
from .openai_chat import read_sse
from .openloop import arrival_offsets
from .plan import MAX_LEVEL, ScanPlan, builtin_prompt
from .preflight import fetch_models, run_preflight
from .probes import GpuSampler, cost_per_1000_requests, probe_metrics
from .slo import MAX_SEARCH_REQUESTS, evaluate_level, next_search_level, search_requests
from .sse import SSEDecoder
from .stopping import until_stopped
from .stream import JSON_IMPL, StreamParser, classify_end
from .transport import FRESH_CONNECTION, ConnectGuard, ScanTransport, StaleConnectionError
from .workload import LoadBodies, PreparedWorkload, initial_workload, prepare_workload

__all__ = [
    "LOOP_LAG_INTERVAL_S",
    "LOOP_LAG_THRESHOLD_MS",
    "ProgressCallback",
    "RateProgressCallback",
    "list_models",
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
#: ``rate_progress(rate_per_s, completed, total, record)``: the same for an open-loop rate level.
RateProgressCallback = Callable[[float, int, int, RequestRecord | None], None]
#: A rate level's first deadline is this long after its set-up, so set-up is not lateness.
RATE_LEAD_S = 0.005

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
                 precise_stale_detection: bool,
                 rate_progress: RateProgressCallback | None = None) -> None:
        self.plan = plan
        self.rate_progress = rate_progress
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
        self.workload: PreparedWorkload = initial_workload(plan.workload, plan.max_tokens)
        # Until the workload is prepared (the preflight's probe): the plain body, nonce included.
        self.bodies = LoadBodies(plan.model, plan.max_tokens, self.workload.scan_nonce,
                                 dataset=plan.workload.dataset, prompts=plan.prompts,
                                 builtin=builtin_prompt)

    def _body(self) -> bytes:
        index = self._next_prompt
        self._next_prompt += 1
        return self.bodies.body(index)

    async def prepare(self) -> None:
        """Ask the server what the workload needs (reply-length parameters, prompt sizes)."""
        self.bodies = await prepare_workload(
            self.workload, self.bodies, client=self.client, base_url=self.plan.base_url,
            chat_url=self.url, model=self.plan.model, timeout=self.timeout)

    async def warm_up(self, concurrency: int, count: int) -> None:
        """`count` requests at up to `concurrency` at once, before a level; not counted."""
        if count <= 0:
            return
        pending = iter(range(count))

        async def worker() -> None:
            for i in pending:
                await self.request(RequestRecord(level=concurrency, index=-1 - i))

        await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))

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

    # -- an open-loop rate level -------------------------------------------------------------
    async def run_rate_level(self, rate: float, total: int, index: int) -> LevelResult:
        """`total` requests due at absolute deadlines (``openloop.arrival_offsets``), each sent
        whether or not the earlier ones are done; at most ``max_connections`` in flight."""
        spec = self.plan.open_loop
        assert spec is not None
        perf = time.perf_counter
        offsets = arrival_offsets(spec.arrival, rate, total, index)
        records = [RequestRecord(level=0, index=i) for i in range(total)]
        level = LevelResult(0, records, loop_lag_threshold_ms=self.lag_threshold_ms,
                            rate_per_s=rate, arrival=spec.arrival.text,
                            max_connections=spec.max_connections)
        gate = asyncio.Semaphore(spec.max_connections) if spec.max_connections else None
        in_flight = peak = completed = 0
        if self.rate_progress:
            self.rate_progress(rate, 0, total, None)

        async def send(record: RequestRecord) -> None:
            nonlocal in_flight, peak, completed
            record.dispatched_at = perf()
            if gate is not None:
                record.waited_for_connection = gate.locked()
                await gate.acquire()
                record.connection_wait_s = perf() - record.dispatched_at
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                await self.request(record, scheduled=True)
            finally:
                in_flight -= 1
                if gate is not None:
                    gate.release()
            completed += 1
            if self.rate_progress:
                self.rate_progress(rate, completed, total, record)

        monitor = asyncio.create_task(_lag_monitor(level.loop_lag_ms))
        cpu_start = time.process_time()
        start = level.started_at = perf() + RATE_LEAD_S
        tasks = []
        try:
            for record, offset in zip(records, offsets, strict=True):
                due = record.scheduled_at = start + offset
                # To the deadline, never "a gap after the last send": lateness does not add up.
                slept = False
                while (wait := due - perf()) > 0:
                    await asyncio.sleep(wait)
                    slept = True
                if not slept:
                    await asyncio.sleep(0)  # behind schedule: let the streams run meanwhile
                tasks.append(asyncio.create_task(send(record)))
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            level.finished_at = perf()
            level.cpu_s = time.process_time() - cpu_start
            monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await monitor
        level.concurrency = max(1, peak)
        return level

    # -- one request ---------------------------------------------------------------------------
    async def request(self, record: RequestRecord, *, scheduled: bool = False) -> None:
        """Send one request and fill `record`; `scheduled`: its ``scheduled_at`` is already
        set (a rate level's deadline), else it is now."""
        body = self._body()
        if not scheduled:
            record.scheduled_at = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                await self._attempt(record, body, deadline, retry_allowed=True)
        except TimeoutError:
            if record.done_at is not None and record.failure is None:
                # [DONE] came, then the body did not end within the grace period
                failure = classify_end(record, events_seen=1, sse=True)
                if failure is not None:
                    record.failure, record.error = failure
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
        """Read one 2xx body: socket I/O here, SSE decoding in ``SSEDecoder`` and chunk meaning
        in ``StreamParser`` (which fills `record`), fed by ``openai_chat.read_sse`` (after
        ``[DONE]`` the end of the body is awaited ``DONE_GRACE_S`` at most), failure classes in
        ``_classify``."""
        sse = "event-stream" in response.headers.get("content-type", "")
        head = bytearray()  # a non-SSE body's first bytes, for the failure's detail
        pieces = _body_pieces(response)
        if not sse:
            pieces = _keeping_head(pieces, head)
        decoder = SSEDecoder()
        broke: httpx.TransportError | None = None
        try:
            await read_sse(pieces, decoder, StreamParser(record),
                           on_done=lambda: _shorten(deadline, DONE_GRACE_S))
        except httpx.TransportError as exc:  # the body broke off (reset, truncated chunking)
            broke = exc
        if record.failure is None:
            failure = _classify(record, decoder, sse=sse, head=bytes(head), broke=broke,
                                content_type=response.headers.get("content-type"))
            if failure is not None:
                record.failure, record.error = failure


def _body_pieces(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body as it arrives: raw bytes unless the server compressed it anyway."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    return response.aiter_raw() if encoding in ("", "identity") else response.aiter_bytes()


async def _keeping_head(pieces: AsyncIterator[bytes], head: bytearray) -> AsyncIterator[bytes]:
    async for piece in pieces:
        if len(head) < ERROR_DETAIL_BYTES:
            head += piece[:ERROR_DETAIL_BYTES]
        yield piece


def _classify(record: RequestRecord, decoder: SSEDecoder, *, sse: bool, head: bytes,
              broke: httpx.TransportError | None,
              content_type: str | None) -> tuple[str, str] | None:
    """The failure class of a 2xx stream that was read to its end (or broke off), or None."""
    if decoder.oversized:
        return "stream_error", f"an SSE line or event over {decoder.max_line} bytes (not buffered)"
    if broke is not None and record.done_at is None:
        return "incomplete_stream", _short(broke)
    if not sse and decoder.events_seen == 0 and head:
        return "not_sse", (f"{content_type or 'no content-type'}: "
                           + head.decode("utf-8", "replace")[:200])
    return classify_end(record, events_seen=decoder.events_seen, sse=sse)


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
    stream_budget: StreamBudget | None = None,
    rate_progress: RateProgressCallback | None = None,
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
                     precise_stale_detection=isinstance(own_transport, ScanTransport),
                     rate_progress=rate_progress)
        preflight = await run_preflight(plan, client, scan.request)
        levels: list[LevelResult] = []
        searched: list[LevelResult] = []
        rate_levels: list[LevelResult] = []
        exhausted = False
        if not (preflight.stopped or preflight_only):
            await scan.prepare()  # WorkloadError (one line) before any load
        if preflight.stopped or preflight_only:
            levels, gpu = preflight.without_load(lag_threshold_ms)
        else:
            sampler = GpuSampler(client, dcgm_url=plan.dcgm_url, target_host=plan.host,
                                 use_nvidia_smi=plan.use_nvidia_smi)
            sampler.start()
            try:
                wait_left = stream_budget.scan_wait_s if stream_budget else None
                for concurrency in plan.levels:
                    sampler.level = None  # GPU samples taken while waiting belong to no level
                    waiting_since = time.perf_counter()
                    async with (stream_budget.level(concurrency, wait_left) if stream_budget
                                else contextlib.nullcontext()):
                        if wait_left is not None:
                            wait_left = max(0.0, wait_left - (time.perf_counter() - waiting_since))
                        await scan.warm_up(concurrency, plan.workload.warmup)
                        sampler.level = concurrency
                        levels.append(await scan.run_level(concurrency,
                                                           plan.requests_at(concurrency)))
            finally:
                gpu = await sampler.stop()
            # After the GPU sampler stopped: nothing the search measures reaches a check.
            if plan.find_capacity and plan.slo is not None:
                exhausted = await _search(scan, plan, levels, searched, stream_budget,
                                          wait_left)
            if plan.open_loop is not None:  # measured, never graded: after everything else
                for index, rate in enumerate(plan.open_loop.rates):
                    await scan.warm_up(1, plan.workload.warmup)
                    rate_levels.append(await scan.run_rate_level(
                        rate, plan.open_loop.requests_at(rate), index))
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
        workload=scan.workload.public_dict(),
        searched_levels=searched,
        search_exhausted=exhausted,
        rate_levels=rate_levels,
        scanner={
            "tool": TOOL_NAME,
            "version": _tool_version(),
            "event_loop": type(loop).__module__.split(".")[0],
            "json": JSON_IMPL,
            "transport": type(own_transport).__name__,
            "loop_lag_interval_ms": LOOP_LAG_INTERVAL_S * 1000.0,
            "loop_lag_threshold_ms": lag_threshold_ms,
        },
    )


async def _search(scan: _Scan, plan: ScanPlan, levels: list[LevelResult],
                  searched: list[LevelResult], stream_budget: StreamBudget | None = None,
                  wait_left: float | None = None) -> bool:
    """The capacity search (scans.grader.slo): run the levels it asks for, appending them to
    `searched`; True when it stopped at its bound rather than at the boundary it sought. Each
    searched level waits for the stream budget like a plan level (the site's workers share
    one per process)."""
    assert plan.slo is not None
    ceiling = min(MAX_LEVEL, plan.search_max_level)
    tried = {lv.concurrency: evaluate_level(lv, plan.slo)["met"] for lv in levels}
    sent = spent = 0  # measured requests; requests with their warm-up
    warmup = plan.workload.warmup
    while (nxt := next_search_level(tried, ceiling)) is not None:
        count = search_requests(nxt)
        if (len(searched) >= plan.search_levels or sent + count > MAX_SEARCH_REQUESTS
                or (plan.search_max_requests is not None
                    and spent + count + warmup > plan.search_max_requests)):
            return True
        waiting_since = time.perf_counter()
        async with (stream_budget.level(nxt, wait_left) if stream_budget
                    else contextlib.nullcontext()):
            if wait_left is not None:
                wait_left = max(0.0, wait_left - (time.perf_counter() - waiting_since))
            await scan.warm_up(nxt, warmup)
            level = await scan.run_level(nxt, count)
        searched.append(level)
        sent += count
        spent += count + warmup
        tried[nxt] = evaluate_level(level, plan.slo)["met"]
    best = max((c for c, ok in tried.items() if ok), default=None)
    return best is not None and best >= ceiling


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
    stream_budget: StreamBudget | None = None,
    rate_progress: RateProgressCallback | None = None,
    stop: threading.Event | None = None,
) -> Measurement:
    """Synchronous wrapper of `run_scan_async` on a fresh event loop (uvloop when installed,
    unless `use_uvloop` is False). Must not be called from a running event loop.

    `tune_gc`: while the scan runs, raise the garbage collector's young-generation threshold
    (``GC_GEN0_THRESHOLD``) and freeze older objects; both are restored when it returns.
    `stop`: set from another thread, it stops the scan within ``stopping.STOP_POLL_S`` (its
    requests abandoned) and ``stopping.ScanStopped`` is raised."""
    with _gc_tuned(tune_gc), asyncio.Runner(loop_factory=_loop_factory(use_uvloop)) as runner:
        scan = run_scan_async(plan, progress, transport=transport,
                              connect_guard=connect_guard,
                              lag_threshold_ms=lag_threshold_ms,
                              preflight_only=preflight_only,
                              stream_budget=stream_budget,
                              rate_progress=rate_progress)
        return runner.run(scan if stop is None else until_stopped(scan, stop))


def list_models(plan: ScanPlan, *, connect_guard: ConnectGuard | None = None) -> ModelsListing:
    """Only the preflight's ``GET {base}/models``, with the scan's client (its headers, API key
    and connect guard): what a server lists before anyone has picked one of its models.
    `plan.model` may be blank here; it only decides ``model_listed``."""

    async def listing() -> ModelsListing:
        timeout = httpx.Timeout(min(plan.timeout_s, 10.0))
        async with httpx.AsyncClient(transport=ScanTransport(connect_guard=connect_guard),
                                     timeout=timeout, follow_redirects=False, trust_env=False,
                                     headers=_client_headers(plan)) as client:
            return await fetch_models(client, plan.base_url, plan.model,
                                      min(plan.timeout_s, 10.0))

    with asyncio.Runner() as runner:
        return runner.run(listing())
