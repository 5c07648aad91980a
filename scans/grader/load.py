"""One scan's load (``ScanLoad``): its workload prepared against the server, then its levels,
closed-loop (a concurrency) or open-loop (a rate), each request timed and its stream read.

What is measured, per request (see ``RequestRecord``):

* the arrival of every chunk with output (``stream.StreamParser`` says what output is:
  content, reasoning, refusal or tool calls), timed from the moment the request body was fully
  written (httpcore's trace event ``http11.send_request_body.complete``): time to the first
  output token (graded as TTFT), to the first answer token, chunk gaps and rates;
* usage (``usage.completion_tokens``), finish reason, failure class;
* with ``--tools`` / ``--json-schema``, whether the reply's tool calls or JSON were valid
  (``agent_load``), judged once the stream has ended, by what that request declared (with a
  session mix, each kind of session declares its own: ``Workload.request_shape``).

A conversation level (``--turns N``) runs sessions: each sends N requests one after another,
each resending the history so far (the system prompt once, the user messages, the reply text
actually received and, after a reply that called tools, the calls as received and one tool
result per call, as an agent's client does), ``--think-time-ms`` apart; its concurrency
counts sessions in flight.

Connections: a request sent on a reused keep-alive connection that the server had already
closed, failing before any response byte, is retried once on a fresh connection (llama.cpp's
server closes after each streamed response while advertising keep-alive). No other request is
ever retried.

The grader watches its own event loop: a task sleeps ``LOOP_LAG_INTERVAL_S`` and records how
much later it woke up. A level whose p99 lag exceeds the runner's ``LOOP_LAG_THRESHOLD_MS`` is
client-bound (see DECISIONS.md): its latencies say more about this machine than about the
server.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx

from .agent_load import RequestShape, tool_history
from .load_bodies import LoadBodies
from .measurement import AgentRecord, LevelResult, RequestRecord
from .openai_chat import read_sse
from .openloop import arrival_offsets
from .plan import ScanPlan, builtin_prompt
from .replicas import Balancer
from .saturation import SaturationWatch
from .sizing import PreparedWorkload, initial_workload, prepare_workload
from .sse import SSEDecoder
from .stream import StreamParser, classify_end
from .stream_apis import parser_class, read_embeddings
from .transport import FRESH_CONNECTION, StaleConnectionError

__all__ = ["LOOP_LAG_INTERVAL_S", "ProgressCallback", "RateProgressCallback", "ScanLoad"]

#: The loop-lag monitor's sleep.
LOOP_LAG_INTERVAL_S = 0.010
#: After ``[DONE]`` the outcome is known; the end of the body is awaited this long at most.
DONE_GRACE_S = 1.0
#: How much of an error body is kept as the failure's detail.
ERROR_DETAIL_BYTES = 512
#: An embeddings answer larger than this is not read (a failure, not a measurement).
EMBEDDINGS_BODY_LIMIT = 64 * 1024 * 1024
#: ``progress(concurrency, completed, total, record)``: called when a level starts (completed 0,
#: record None) and after each of its requests ends (with that request's record).
ProgressCallback = Callable[[int, int, int, RequestRecord | None], None]
#: ``rate_progress(rate_per_s, completed, total, record)``: the same for an open-loop rate level.
RateProgressCallback = Callable[[float, int, int, RequestRecord | None], None]
#: A rate level's first deadline is this long after its set-up, so set-up is not lateness.
RATE_LEAD_S = 0.005


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


class ScanLoad:
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
        self.urls = plan.request_urls
        self.url = self.urls[0]
        # The stream parser of the plan's API (stream_apis).
        self.parser_class = parser_class(plan.api)
        self.balancer = Balancer(len(self.urls), plan.balance)
        self.timeout = plan.timeout_s
        self._next_prompt = 0
        self.workload: PreparedWorkload = initial_workload(plan.workload, plan.max_tokens,
                                                           api=plan.api)
        # Until the workload is prepared (the preflight's probe): the plain body, nonce included.
        self.bodies = LoadBodies(plan.model, plan.max_tokens, self.workload.scan_nonce,
                                 dataset=plan.workload.dataset, prompts=plan.prompts,
                                 builtin=builtin_prompt, extra=plan.workload.agent_body(),
                                 api=plan.api)
        # What a request declares when nothing else says: every request alike without a mix;
        # with one, the shape of a request that belongs to no session kind (a trace's) is plain.
        self.shape = (plan.workload.request_shape(0) if not plan.workload.mix
                      else RequestShape())
        # With a mix, each shaped kind's bodies (derived from self.bodies, once prepared).
        self._shaped_bodies: dict[tuple[bool, bool], LoadBodies] = {}
        # Reply text is kept only when something reads it: a conversation or a schema.
        self.keep_text = (plan.workload.turns > 1
                          or plan.workload.structured_output is not None)
        self.agent_shaped = plan.workload.agent_dict() is not None
        # AgentRecord carries what RequestRecord's proven timeline does not: the URL among them.
        self.record_type = (AgentRecord if self.agent_shaped or len(self.urls) > 1
                            else RequestRecord)
        # The warm-up just sent, handed to the level it warmed (LevelResult.warmup).
        self._warmup: list[RequestRecord] = []

    def _body(self) -> tuple[bytes, RequestShape]:
        """The next prompt's body and what it declares (its kind's, with a mix)."""
        index = self._next_prompt
        self._next_prompt += 1
        shape = self.plan.workload.request_shape(index)  # a mix: by request
        return self._bodies_for(shape).body(index), shape

    def _bodies_for(self, shape: RequestShape) -> LoadBodies:
        """The bodies of requests of `shape`. With a mix, a tool or structured-output kind
        sends its tools or schema and max_tokens as its only length: ignore_eos or min_tokens
        would push a reply past the end of its JSON."""
        if not self.plan.workload.mix or not shape.shaped:
            return self.bodies
        key = (shape.tools is not None, shape.structured_output is not None)
        bodies = self._shaped_bodies.get(key)
        if bodies is None:
            bodies = self._shaped_bodies[key] = self.bodies.with_changes(
                extra=shape.body(), params={})
        return bodies

    async def prepare(self) -> None:
        """Ask the server what the workload needs (reply-length parameters, prompt sizes)."""
        self.bodies = await prepare_workload(
            self.workload, self.bodies, client=self.client, base_url=self.plan.base_url,
            chat_url=self.url, model=self.plan.model, timeout=self.timeout,
            parser_class=self.parser_class)
        self._shaped_bodies = {}

    async def warm_up(self, concurrency: int, count: int) -> None:
        """`count` requests at up to `concurrency` at once, before a level; not counted."""
        if count <= 0:
            return
        records = [self.record_type(level=concurrency, index=-1 - i) for i in range(count)]
        self._warmup.extend(records)
        pending = iter(records)

        async def worker() -> None:
            for record in pending:
                await self.request(record)

        await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))

    def _take_warmup(self) -> list[RequestRecord]:
        records, self._warmup = self._warmup, []
        return records

    # -- a level -------------------------------------------------------------------------------
    async def run_level(self, concurrency: int, total: int) -> LevelResult:
        if self.plan.workload.turns > 1:
            return await self._run_conversations(concurrency, total)
        make = self.record_type
        records: list[RequestRecord] = [make(level=concurrency, index=i) for i in range(total)]
        level = LevelResult(concurrency, records, loop_lag_threshold_ms=self.lag_threshold_ms,
                            warmup=self._take_warmup())
        pending = iter(records)
        completed = 0
        watch = SaturationWatch(concurrency) if self.plan.stop_on_saturation else None
        if self.progress:
            self.progress(concurrency, 0, total, None)

        async def worker() -> None:
            nonlocal completed
            for record in pending:
                await self.request(record)
                completed += 1
                if self.progress:
                    self.progress(concurrency, completed, total, record)
                if watch is not None and (watch.completed(record) or watch.stopped):
                    return  # no new request; the others in flight finish

        await _timed_workers(level, worker, min(concurrency, total))
        _keep_sent(level, watch)
        return level

    async def _run_conversations(self, concurrency: int, total: int) -> LevelResult:
        """`total` requests rounded up to whole sessions of ``turns``; `concurrency` sessions
        in flight."""
        turns = self.plan.workload.turns
        think_s = self.plan.workload.think_time_ms / 1000.0
        sessions = -(-total // turns)
        records = [AgentRecord(level=concurrency, index=i, session=i // turns,
                               turn=i % turns + 1) for i in range(sessions * turns)]
        level = LevelResult(concurrency, list[RequestRecord](records),
                            loop_lag_threshold_ms=self.lag_threshold_ms,
                            warmup=self._take_warmup())
        pending = iter(range(sessions))
        completed = 0
        watch = SaturationWatch(concurrency) if self.plan.stop_on_saturation else None
        if self.progress:
            self.progress(concurrency, 0, len(records), None)

        async def worker() -> None:
            nonlocal completed
            for session in pending:
                history: list[Mapping[str, Any]] = []
                # A session stays on one URL: its history is that replica's prefix cache.
                url_index = self.balancer.take()
                try:
                    await session_turns(session, history, url_index)
                finally:
                    self.balancer.release(url_index)
                if watch is not None and watch.stopped:
                    return

        async def session_turns(session: int, history: list[Mapping[str, Any]],
                                url_index: int) -> None:
            nonlocal completed
            shape = self.plan.workload.request_shape(session)
            bodies = self._bodies_for(shape)
            for turn in range(turns):
                if turn and think_s:
                    await asyncio.sleep(think_s)
                record = records[session * turns + turn]
                index = self._next_prompt
                self._next_prompt += 1
                messages = bodies.turn_messages(index, first=turn == 0)
                parser = await self._exchange(record, bodies.turn_body(history, messages),
                                              url_index=url_index, shape=shape)
                # What a client would resend: its own messages, the text it received and the
                # tool calls it received, each answered.
                history.extend(messages)
                reply = "".join(parser.answer_text or ())
                calls = parser.received_tool_calls()
                if calls:
                    history.extend(tool_history(reply, calls))
                else:
                    history.append({"role": "assistant", "content": reply})
                completed += 1
                if self.progress:
                    self.progress(concurrency, completed, len(records), record)
                if watch is not None and (watch.completed(record) or watch.stopped):
                    return

        await _timed_workers(level, worker, min(concurrency, sessions))
        _keep_sent(level, watch)
        return level

    # -- an open-loop rate level -------------------------------------------------------------
    async def run_rate_level(self, rate: float, total: int, index: int) -> LevelResult:
        """`total` requests due at absolute deadlines (``openloop.arrival_offsets``), each sent
        whether or not the earlier ones are done; at most ``max_connections`` in flight."""
        spec = self.plan.open_loop
        assert spec is not None
        offsets = arrival_offsets(spec.arrival, rate, total, index)
        make = self.record_type
        records: list[RequestRecord] = [make(level=0, index=i) for i in range(total)]
        level = LevelResult(0, records, loop_lag_threshold_ms=self.lag_threshold_ms,
                            rate_per_s=rate, arrival=spec.arrival.text,
                            max_connections=spec.max_connections)
        if self.rate_progress:
            self.rate_progress(rate, 0, total, None)

        def done(completed: int, record: RequestRecord) -> None:
            if self.rate_progress:
                self.rate_progress(rate, completed, total, record)

        shapes: dict[int, RequestShape] = {}

        def body(index: int) -> bytes:
            data, shapes[index] = self._body()
            return data

        await self.run_scheduled(level, offsets, body, done, shape=shapes.pop)
        return level

    async def run_scheduled(self, level: LevelResult, offsets: Sequence[float],
                            body: Callable[[int], bytes],
                            done: Callable[[int, RequestRecord], None] | None = None,
                            shape: Callable[[int], RequestShape] | None = None) -> None:
        """Send ``level.requests[i]`` (body ``body(i)``, declaring ``shape(i)``, after the
        body was made; the scan's shape without it) at the level's start plus ``offsets[i]``
        seconds, whether or not the earlier ones are done, at most ``level.max_connections``
        in flight; `done(completed, record)` after each. An open-loop rate level's loop, and a
        replayed trace's (trace_replay.py)."""
        perf = time.perf_counter
        level.warmup = self._take_warmup()
        gate = asyncio.Semaphore(level.max_connections) if level.max_connections else None
        in_flight = peak = completed = 0

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
                data = body(record.index)
                await self._exchange(record, data, scheduled=True,
                                     shape=shape(record.index) if shape is not None else None)
            finally:
                in_flight -= 1
                if gate is not None:
                    gate.release()
            completed += 1
            if done is not None:
                done(completed, record)

        monitor = asyncio.create_task(_lag_monitor(level.loop_lag_ms))
        cpu_start = time.process_time()
        start = level.started_at = perf() + RATE_LEAD_S
        tasks = []
        try:
            for record, offset in zip(level.requests, offsets, strict=True):
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

    # -- one request ---------------------------------------------------------------------------
    async def request(self, record: RequestRecord, *, scheduled: bool = False) -> None:
        """Send one request and fill `record`; `scheduled`: its ``scheduled_at`` is already
        set (a rate level's deadline), else it is now."""
        data, shape = self._body()
        await self._exchange(record, data, scheduled=scheduled, shape=shape)

    async def _exchange(self, record: RequestRecord, body: bytes, *,
                        scheduled: bool = False, url_index: int | None = None,
                        shape: RequestShape | None = None) -> StreamParser:
        """Send `body` (to the balancer's URL unless `url_index` is given), declaring `shape`
        (the scan's when None), fill `record`; the parser that read the reply (its text and
        tool calls, when kept)."""
        index = self.balancer.take() if url_index is None else url_index
        if isinstance(record, AgentRecord):
            record.url_index = index
        try:
            return await self._exchange_at(record, body, self.urls[index], scheduled=scheduled,
                                           shape=shape or self.shape)
        finally:
            if url_index is None:
                self.balancer.release(index)

    async def request_at(self, record: RequestRecord, url_index: int) -> None:
        """One request to the plan's URL `url_index` (the preflight's probe of a replica)."""
        data, shape = self._body()
        await self._exchange(record, data, url_index=url_index, shape=shape)

    async def _exchange_at(self, record: RequestRecord, body: bytes, url: str, *,
                           scheduled: bool, shape: RequestShape) -> StreamParser:
        if not scheduled:
            record.scheduled_at = time.perf_counter()
        if isinstance(record, AgentRecord):
            # Judged only by what it declared: a record of another kind stays None.
            if shape.tools is not None:
                record.tool_calls = 0
            if shape.structured_output is not None:
                record.structured = "unanswered"
        parser = self.parser_class(record, keep_text=self.keep_text,
                                   keep_tool_calls=shape.tools is not None)
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                await self._attempt(record, body, url, deadline, retry_allowed=True,
                                    parser=parser)
        except TimeoutError:
            if record.done_at is not None and record.failure is None:
                # [DONE] came, then the body did not end within the grace period
                failure = classify_end(record, events_seen=1, sse=True,
                                       ending=self.parser_class.ENDING)
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
        if record.failure is None and isinstance(record, AgentRecord):
            self._judge(record, parser, shape)
        return parser

    @staticmethod
    def _judge(record: AgentRecord, parser: StreamParser, shape: RequestShape) -> None:
        """Were the reply's tool calls and JSON what the request declared?"""
        if shape.tools is not None:
            calls = parser.joined_tool_calls()
            record.tool_calls = len(calls)
            (record.tool_calls_parsed, record.tool_calls_named,
             record.tool_calls_valid) = shape.tools.judge(calls)
        if shape.structured_output is not None and not parser.tool_calls:
            text = "".join(parser.answer_text or ())
            parsed, valid = shape.structured_output.judge(text)
            record.structured = "valid" if valid else "invalid" if parsed else "unparsed"

    async def _attempt(self, record: RequestRecord, body: bytes, url: str,
                       deadline: asyncio.Timeout,
                       retry_allowed: bool, parser: StreamParser,
                       fresh: bool = False) -> None:
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
        request = self.client.build_request("POST", url, content=body,
                                            extensions=extensions)
        record.sent_at = perf()
        try:
            response = await self.client.send(request, stream=True)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            if retry_allowed and self._stale(exc, connected):
                # A reused keep-alive connection the server had already closed.
                record.retried = True
                record.body_written_at = None
                await self._attempt(record, body, url, deadline, retry_allowed=False,
                                    parser=parser, fresh=True)
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
            elif self.plan.api == "embeddings":
                await _read_embeddings(record, response)
            else:
                await self._read_stream(record, response, deadline, parser)
        finally:
            await response.aclose()

    def _stale(self, exc: httpx.HTTPError, connected: bool) -> bool:
        if isinstance(exc, StaleConnectionError):
            return True
        return not self.precise and not connected and _failed_before_response(exc)

    async def _read_stream(self, record: RequestRecord, response: httpx.Response,
                           deadline: asyncio.Timeout, parser: StreamParser) -> None:
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
            await read_sse(pieces, decoder, parser,
                           on_done=lambda: _shorten(deadline, DONE_GRACE_S))
        except httpx.TransportError as exc:  # the body broke off (reset, truncated chunking)
            broke = exc
        if record.failure is None:
            failure = _classify(record, decoder, sse=sse, head=bytes(head), broke=broke,
                                content_type=response.headers.get("content-type"),
                                ending=self.parser_class.ENDING)
            if failure is not None:
                record.failure, record.error = failure


async def _read_embeddings(record: RequestRecord, response: httpx.Response) -> None:
    """Read one 2xx embeddings answer whole (``stream_apis.read_embeddings`` says what it
    carried); its last byte is the moment it was done."""
    body = bytearray()
    try:
        async for piece in _body_pieces(response):
            body += piece
            if len(body) > EMBEDDINGS_BODY_LIMIT:
                record.failure = "stream_error"
                record.error = (f"an answer over {EMBEDDINGS_BODY_LIMIT // 2**20} MiB "
                                "(not read)")
                return
    except httpx.TransportError as exc:  # the body broke off
        record.failure, record.error = "incomplete_stream", _short(exc)
        return
    failure = read_embeddings(bytes(body), record, time.perf_counter())
    if failure is not None:
        record.failure, record.error = failure


def _keep_sent(level: LevelResult, watch: SaturationWatch | None) -> None:
    """A level that stopped early keeps the requests it sent, as they ended."""
    if watch is None or watch.stopped is None:
        return
    level.requests = [r for r in level.requests if r.ended_at is not None]
    level.stopped_early = {**watch.stopped}


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
              content_type: str | None, ending: str) -> tuple[str, str] | None:
    """The failure class of a 2xx stream that was read to its end (or broke off), or None."""
    if decoder.oversized:
        return "stream_error", f"an SSE line or event over {decoder.max_line} bytes (not buffered)"
    if broke is not None and record.done_at is None:
        return "incomplete_stream", _short(broke)
    if not sse and decoder.events_seen == 0 and head:
        return "not_sse", (f"{content_type or 'no content-type'}: "
                           + head.decode("utf-8", "replace")[:200])
    return classify_end(record, events_seen=decoder.events_seen, sse=sse, ending=ending)


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


async def _timed_workers(level: LevelResult, worker: Callable[[], Awaitable[None]],
                         count: int) -> None:
    """Run `count` copies of a closed-loop level's worker, timing the level (wall and CPU)
    and sampling the event loop's lag while they run."""
    monitor = asyncio.create_task(_lag_monitor(level.loop_lag_ms))
    cpu_start = time.process_time()
    level.started_at = time.perf_counter()
    try:
        await asyncio.gather(*(worker() for _ in range(count)))
    finally:
        level.finished_at = time.perf_counter()
        level.cpu_s = time.process_time() - cpu_start
        monitor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await monitor


async def _lag_monitor(samples: array, interval: float = LOOP_LAG_INTERVAL_S) -> None:
    perf = time.perf_counter
    sleep = asyncio.sleep
    while True:
        start = perf()
        await sleep(interval)
        samples.append(max(0.0, (perf() - start - interval) * 1000.0))
