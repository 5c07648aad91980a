"""The demo server (`tokvera target`): a small, fast OpenAI-compatible streaming server, the
reference target of demos, calibration and tests, never the endpoint a scan grades.

Real sockets, real HTTP/1.1, real SSE (chunked transfer encoding), real Prometheus text at
``/metrics``; it states its identity like a real engine (``/version`` as vLLM answers it,
``/props`` in llama.cpp's shape). It is built on raw asyncio streams to stay cheap enough that a grader on the
same machine measures itself, not the target.

Timing model: a request is parsed at ``t0``; the first content chunk is due at
``t0 + ttft``, chunk *i* at ``t0 + ttft + i * itl`` (an absolute schedule, so sleep overshoot never
accumulates), each delay plus a uniform jitter in ``[0, jitter]``. With ``max_concurrency`` set, at
most that many streams generate at once and the others wait for a slot before ``t0`` (queueing shows
up as time to first token under load, as it does on a real server with a fixed batch size).

Agent-shaped requests: with ``tools`` (and ``tool_choice`` other than "none") the reply is one
streamed tool call (the declared tools in turn, arguments a value the tool's schema accepts,
streamed a token at a time); with ``response_format`` ``json_schema`` it is a JSON value the
schema accepts. ``bad_tool_share`` / ``bad_json_share`` make exactly that share of them bad
(every 1/share-th), alternately unparsable and wrong (an unknown tool; a value of the wrong
type). Every reply is added to the prefix cache after the prompt, as vLLM caches generated
blocks, so a conversation that resends it finds its history cached. A resent history may hold
an assistant message's ``tool_calls`` and ``tool`` messages with their results: the chat
template renders both (demo_model.render_chat), so they count in the prompt and a tool call
resent as it was streamed is found in the cache.

Other APIs (``tokvera scan --api``): ``/completions``, ``/responses``, ``/messages``
(Anthropic's, ``anthropic-version`` required) and ``/embeddings``, each in its own wire format
(demo_apis.py) on the same timing model (an embedding's answer comes whole after ``ttft``).
Their prompts are counted by the same tokenizer (a completions prompt as its text, the others
through the chat template, as /tokenize counts ``prompt`` and ``messages``), served by the same
prefix cache with their replies added after them, and answered with the same tool calls and
JSON values (the Responses and Messages APIs' own events) when they declare tools or a schema.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import math
import random
import threading
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from .demo_apis import (
    ApiRequestError,
    ToolCall,
    chat_shape,
    embeddings_answer,
    embeddings_inputs,
    end_events,
    error_body,
    read_request,
    shaped_events,
    start_events,
    token_events,
)
from .demo_model import PrefixCache, render_chat, tokenize, tool_call_text

__all__ = ["ENGINE_VERSION", "MODEL_ID", "OPENAI_PARAMS", "REASONING_FIELDS", "StreamTiming",
           "TargetConfig", "TargetServer", "running_target", "serving_target"]

MODEL_ID = "tokvera-target"  # the one model its /models lists
#: What it states of itself like a real engine: /version as vLLM's, /props as llama.cpp's,
#: ``owned_by`` in /models as both do (report.json's ``server`` reads them).
ENGINE_VERSION = "1.0"


_WORDS = (
    " the", " model", " streams", " a", " token", " at", " steady", " pace", " while", " load",
    " grows", " and", " latency", " stays", " low", " for", " every", " request", " it", " serves",
)
_MAX_HEADER_BYTES = 64 * 1024
_MAX_BODY_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class TargetConfig:
    ttft_ms: float = 200.0
    itl_ms: float = 20.0
    tokens: int = 64
    jitter_ms: float = 0.0
    error_rate: float = 0.0
    usage: bool = True
    metrics: bool = True
    role_chunk: bool = False
    max_concurrency: int | None = None
    seed: int | None = None
    #: Thinking tokens streamed before the answer, like a reasoning model (they count
    #: against max_tokens), in this delta field: "reasoning_content" (vLLM and SGLang with a
    #: reasoning parser, llama-server) or "reasoning" (OpenRouter, newer vLLM).
    reasoning_tokens: int = 0
    reasoning_field: str = "reasoning_content"
    #: Prefill time per 1,000 prompt tokens not served from the prefix cache (0: none).
    prefill_ms_per_1k_tokens: float = 0.0
    #: The automatic prefix cache (cached_tokens in usage.prompt_tokens_details).
    prefix_cache: bool = True
    cache_block_tokens: int = 16
    cache_max_blocks: int = 200_000
    #: Serve ``POST /tokenize`` (vLLM's shape: ``messages`` or ``prompt`` in; ``count``,
    #: ``max_model_len`` and ``tokens`` out).
    tokenize: bool = False
    #: The context length: listed in /models and /tokenize, and a prompt plus max_tokens over it
    #: is refused with 400. None: unlimited and not listed.
    max_model_len: int | None = None
    #: Refuse request parameters OpenAI's API does not know (ignore_eos, min_tokens...) with 400.
    strict_params: bool = False
    #: The share of tool-call replies and of JSON-schema replies made bad (see the docstring).
    bad_tool_share: float = 0.0
    bad_json_share: float = 0.0


#: The run command's demo target (`tokvera target --demo`): a small server with eight decode
#: slots, so the default profile's top level queues as it would on a real one. A new endpoint
#: with every default grades A on it; tests that stand in for the demo start this shape.
DEMO_TARGET = TargetConfig(ttft_ms=180.0, itl_ms=15.0, jitter_ms=40.0, tokens=48,
                           max_concurrency=8)


#: The chat-completions parameters OpenAI's API accepts (strict_params refuses any other).
OPENAI_PARAMS = frozenset({
    "model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options",
    "temperature", "top_p", "n", "stop", "seed", "user", "presence_penalty",
    "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "response_format", "tools",
    "tool_choice", "parallel_tool_calls", "metadata", "store", "service_tier",
    "reasoning_effort", "prediction", "modalities", "audio", "functions", "function_call",
})


REASONING_FIELDS = ("reasoning_content", "reasoning")
#: The other APIs it serves (demo_apis), by the last part of their path.
_API_PATHS = {"completions": "completions", "responses": "responses", "messages": "messages",
              "embeddings": "embeddings"}


@dataclass(frozen=True)
class StreamTiming:
    """The target's own clock (``perf_counter``) for one stream it served: when the request
    was read, and when it wrote the first output chunk and the first answer chunk."""

    received_at: float
    first_output_at: float | None
    first_answer_at: float | None


class _BadRequest(Exception):
    pass


class TargetServer:
    """One server instance; no global state (its Prometheus registry is its own)."""

    def __init__(self, config: TargetConfig | None = None) -> None:
        self.config = config or TargetConfig()
        self._rng = random.Random(self.config.seed)  # noqa: S311 - simulated errors, not crypto
        self._server: asyncio.base_events.Server | None = None
        self._slots = (
            asyncio.Semaphore(self.config.max_concurrency) if self.config.max_concurrency else None
        )
        self._counter = 0
        # Agent-shaped replies so far, and of them the bad ones (their kinds alternate).
        self._shaped = {"tool": 0, "json": 0}
        self._bad = {"tool": 0, "json": 0}
        self.prefix_cache = (PrefixCache(self.config.cache_block_tokens,
                                         self.config.cache_max_blocks)
                             if self.config.prefix_cache else None)
        #: Every chat request body the target parsed, last ones first out (for tests).
        self.received: collections.deque[dict] = collections.deque(maxlen=4096)
        #: The last streams served, on the target's clock (for calibration and tests).
        self.stream_timings: collections.deque[StreamTiming] = collections.deque(maxlen=4096)
        self.registry = CollectorRegistry(auto_describe=True)
        self._m_requests = Counter(
            "tokvera_target_requests", "Chat completion requests answered, by status code",
            ["status"], registry=self.registry,
        )
        self._m_tokens = Counter(
            "tokvera_target_completion_tokens", "Completion tokens streamed",
            registry=self.registry,
        )
        self._m_running = Gauge(
            "tokvera_target_streams_running", "Streams generating now", registry=self.registry
        )
        self._m_waiting = Gauge(
            "tokvera_target_streams_waiting", "Streams waiting for a slot", registry=self.registry
        )

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        self._server = await asyncio.start_server(
            self._handle_connection, host, port, backlog=1024, limit=_MAX_HEADER_BYTES
        )
        sock = self._server.sockets[0]
        bound_host, bound_port = sock.getsockname()[:2]
        return bound_host, bound_port

    async def serve_forever(self) -> None:
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    # -- HTTP ----------------------------------------------------------------------------------
    async def _handle_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                try:
                    method, path, headers = _parse_head(head)
                    length = int(headers.get("content-length", "0") or 0)
                    if length < 0 or length > _MAX_BODY_BYTES:
                        raise _BadRequest("bad content-length")
                except (_BadRequest, ValueError):
                    _write_simple(writer, 400, b'{"error":{"message":"bad request"}}', close=True)
                    await writer.drain()
                    return
                body = await reader.readexactly(length) if length else b""
                keep_alive = headers.get("connection", "").lower() != "close"
                await self._route(method, path, body, writer, keep_alive, headers)
                await writer.drain()
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            # The server is shutting down (Ctrl-C): the connection just ends. Re-raised, the
            # cancellation reaches asyncio's stream callback, which prints a traceback.
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _route(
        self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter, keep_alive: bool,
        headers: dict[str, str] | None = None,
    ) -> None:
        path = path.split("?", 1)[0]
        if method == "GET" and path == "/metrics" and self.config.metrics:
            _write_simple(writer, 200, generate_latest(self.registry),
                          content_type=b"text/plain; version=0.0.4; charset=utf-8",
                          close=not keep_alive)
        elif method == "GET" and path == "/version":
            _write_simple(writer, 200, json.dumps({"version": ENGINE_VERSION}).encode(),
                          close=not keep_alive)
        elif method == "GET" and path == "/props":
            _write_simple(writer, 200, json.dumps(self._props()).encode(), close=not keep_alive)
        elif method == "GET" and path.endswith("/models"):
            entry: dict = {"id": MODEL_ID, "object": "model", "owned_by": "tokvera"}
            if self.config.max_model_len:
                entry["max_model_len"] = self.config.max_model_len
            data = {"object": "list", "data": [entry]}
            _write_simple(writer, 200, json.dumps(data).encode(), close=not keep_alive)
        elif method == "POST" and path.endswith("/tokenize") and self.config.tokenize:
            self._tokenize(body, writer, keep_alive)
        elif method == "POST" and path.endswith("/chat/completions"):
            await self._chat(body, writer, keep_alive)
        elif method == "POST" and (api := _API_PATHS.get(path.rsplit("/", 1)[-1])):
            await self._api(api, body, headers or {}, writer, keep_alive)
        else:
            _write_simple(writer, 404, b'{"error":{"message":"not found"}}', close=not keep_alive)

    async def _api(self, api: str, body: bytes, headers: dict[str, str],
                   writer: asyncio.StreamWriter, keep_alive: bool) -> None:
        """A streamed request of another API (demo_apis): the chat stream's timing model,
        that API's wire format."""
        if api == "embeddings":
            await self._embeddings(body, writer, keep_alive)
            return
        received_at = time.perf_counter()
        cfg = self.config
        try:
            req = json.loads(body)
            if not isinstance(req, dict):
                raise ValueError
            request = read_request(api, req, headers, MODEL_ID)
        except ApiRequestError as exc:
            self._m_requests.labels("400").inc()
            _write_simple(writer, 400, exc.body, close=not keep_alive)
            return
        except ValueError:
            self._m_requests.labels("400").inc()
            _write_simple(writer, 400, error_body(api, "body is not JSON"), close=not keep_alive)
            return
        self.received.append(req)
        if cfg.error_rate and self._rng.random() < cfg.error_rate:
            self._m_requests.labels("500").inc()
            _write_simple(writer, 500, error_body(api, "simulated failure"),
                          close=not keep_alive)
            return
        reasoning = 0 if api == "completions" else cfg.reasoning_tokens
        wanted = request.wanted(reasoning + cfg.tokens)
        n_tokens = wanted if request.max_tokens is None else min(wanted, request.max_tokens)
        n_thinking = min(reasoning, n_tokens)
        finish = "length" if n_tokens < wanted else "stop"
        shape = chat_shape(api, req)
        shaped = self._shaped_reply(shape) if shape else None
        if shaped is not None:  # its own length: the tool call's or the JSON value's tokens
            n_tokens, n_thinking, finish = _shaped_length(shaped, request.max_tokens)
        async with self._slot():
            prompt = request.prompt_tokens
            cached = (self.prefix_cache.lookup_and_insert(prompt)
                      if self.prefix_cache is not None else None)
            prefill_s = cfg.prefill_ms_per_1k_tokens * (len(prompt) - (cached or 0)) / 1e6
            self._counter += 1
            ident = f"tv{self._counter}"
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n"
                + (b"connection: keep-alive\r\n" if keep_alive else b"connection: close\r\n")
                + b"\r\n")
            _write_events(writer, start_events(request, ident, len(prompt), cached))
            t0 = time.perf_counter()
            due = t0
            first_output_at = first_answer_at = None
            for i in range(n_tokens):
                nominal = (t0 + cfg.ttft_ms / 1000.0 + prefill_s + i * cfg.itl_ms / 1000.0
                           + (self._rng.random() * cfg.jitter_ms / 1000.0
                              if cfg.jitter_ms else 0.0))
                due = max(due, nominal)
                await self._sleep_until(due)
                written_at = time.perf_counter()
                _write_events(writer, shaped_events(request, ident, i, shaped[0][i])
                              if shaped is not None else
                              token_events(request, ident, i, _WORDS[i % len(_WORDS)],
                                           n_thinking))
                first_output_at = first_output_at or written_at
                if i >= n_thinking and first_answer_at is None:
                    first_answer_at = written_at
            self.stream_timings.append(StreamTiming(received_at, first_output_at,
                                                    first_answer_at))
            usage = {"prompt_tokens": len(prompt), "completion_tokens": n_tokens,
                     "cached": cached, "reasoning": n_thinking}
            call = _streamed_call(shaped[0][:n_tokens]) if shaped is not None else None
            _write_events(writer, end_events(request, ident, finish, usage, call))
            writer.write(b"0\r\n\r\n")
            self._cache_reply(prompt, shaped, n_thinking, n_tokens, api)
            self._m_requests.labels("200").inc()
            self._m_tokens.inc(n_tokens)

    @contextlib.asynccontextmanager
    async def _slot(self, counted: bool = True) -> AsyncIterator[None]:
        """One of the server's slots (``max_concurrency``) for the block, waiting for one; a
        counted request shows in the waiting and running gauges as a stream does."""
        if self._slots is not None:
            if counted:
                self._m_waiting.inc()
            try:
                await self._slots.acquire()
            finally:
                if counted:
                    self._m_waiting.dec()
        if counted:
            self._m_running.inc()
        try:
            yield
        finally:
            if counted:
                self._m_running.dec()
            if self._slots is not None:
                self._slots.release()

    async def _embeddings(self, body: bytes, writer: asyncio.StreamWriter,
                          keep_alive: bool) -> None:
        """One JSON answer after ``ttft_ms`` (plus prefill), in a slot like a stream."""
        cfg = self.config
        try:
            req = json.loads(body)
            if not isinstance(req, dict):
                raise ValueError
            inputs = embeddings_inputs(req)
        except ApiRequestError as exc:
            self._m_requests.labels("400").inc()
            _write_simple(writer, 400, exc.body, close=not keep_alive)
            return
        except ValueError:
            self._m_requests.labels("400").inc()
            _write_simple(writer, 400, error_body("embeddings", "body is not JSON"),
                          close=not keep_alive)
            return
        self.received.append(req)
        if cfg.error_rate and self._rng.random() < cfg.error_rate:
            self._m_requests.labels("500").inc()
            _write_simple(writer, 500, error_body("embeddings", "simulated failure"),
                          close=not keep_alive)
            return
        prompt_tokens = sum(len(tokenize(text)) for text in inputs)
        async with self._slot(counted=False):
            await self._sleep_until(time.perf_counter() + cfg.ttft_ms / 1000.0
                                    + cfg.prefill_ms_per_1k_tokens * prompt_tokens / 1e6)
            answer = embeddings_answer(str(req.get("model") or MODEL_ID), inputs, prompt_tokens)
            _write_simple(writer, 200, answer, close=not keep_alive)
            self._m_requests.labels("200").inc()

    def _props(self) -> dict:
        """llama.cpp's /props shape, with what this server can say of itself: its build, its
        model, its slots and (when it has one) its context length."""
        settings: dict = {"params": {"n_predict": self.config.tokens}}
        if self.config.max_model_len:
            settings["n_ctx"] = self.config.max_model_len
        props: dict = {"build_info": f"tokvera-target {ENGINE_VERSION}", "model_alias": MODEL_ID,
                       "model_path": MODEL_ID, "default_generation_settings": settings}
        if self.config.max_concurrency:
            props["total_slots"] = self.config.max_concurrency
        return props

    def _tokenize(self, body: bytes, writer: asyncio.StreamWriter, keep_alive: bool) -> None:
        try:
            req = json.loads(body)
            if not isinstance(req, dict):
                raise ValueError
        except ValueError:
            _write_simple(writer, 400, b'{"error":{"message":"body is not JSON"}}',
                          close=not keep_alive)
            return
        if isinstance(req.get("messages"), list):
            text = render_chat(req["messages"], bool(req.get("add_generation_prompt", True)))
        elif isinstance(req.get("prompt"), str):
            text = req["prompt"]
        else:
            _write_simple(writer, 400, b'{"error":{"message":"messages or prompt required"}}',
                          close=not keep_alive)
            return
        tokens = [zlib.crc32(t.encode()) % 100_000 for t in tokenize(text)]
        data = {"count": len(tokens), "max_model_len": self.config.max_model_len or 0,
                "tokens": tokens}
        _write_simple(writer, 200, json.dumps(data).encode(), close=not keep_alive)

    async def _chat(self, body: bytes, writer: asyncio.StreamWriter, keep_alive: bool) -> None:
        received_at = time.perf_counter()
        cfg = self.config
        try:
            req = json.loads(body)
            if not isinstance(req, dict):
                raise ValueError
        except ValueError:
            self._m_requests.labels("400").inc()
            _write_simple(writer, 400, b'{"error":{"message":"body is not JSON"}}',
                          close=not keep_alive)
            return
        self.received.append(req)
        if cfg.strict_params:
            unknown = sorted(k for k in req if k not in OPENAI_PARAMS)
            if unknown:
                self._m_requests.labels("400").inc()
                refusal = json.dumps({"error": {
                    "message": f"Unrecognized request argument supplied: {unknown[0]}",
                    "type": "invalid_request_error", "param": None, "code": None}})
                _write_simple(writer, 400, refusal.encode(), close=not keep_alive)
                return
        if cfg.error_rate and self._rng.random() < cfg.error_rate:
            self._m_requests.labels("500").inc()
            _write_simple(writer, 500, b'{"error":{"message":"simulated failure",'
                          b'"type":"server_error"}}', close=not keep_alive)
            return
        wanted = cfg.reasoning_tokens + cfg.tokens  # where the reply ends by itself
        if req.get("ignore_eos") is True and (req.get("max_tokens")
                                               or req.get("max_completion_tokens")):
            wanted = 1_000_000  # no natural end: max_tokens ends it
        min_tokens = req.get("min_tokens")
        if type(min_tokens) is int and min_tokens > wanted:
            wanted = min_tokens
        max_tokens = req.get("max_tokens") or req.get("max_completion_tokens") or wanted
        try:
            n_tokens = max(0, min(wanted, int(max_tokens)))
        except (TypeError, ValueError):
            n_tokens = wanted
        n_thinking = min(cfg.reasoning_tokens, n_tokens)
        finish = "length" if n_tokens < wanted else "stop"
        shaped = self._shaped_reply(req)
        if shaped is not None:  # its own length: the tool call's or the JSON value's tokens
            n_tokens, n_thinking, finish = _shaped_length(shaped, req.get("max_tokens"))
        model = str(req.get("model") or MODEL_ID)
        prompt = tokenize(render_chat(req.get("messages")))
        prompt_tokens = len(prompt)
        if cfg.max_model_len and prompt_tokens + n_tokens > cfg.max_model_len:
            self._m_requests.labels("400").inc()
            refusal = json.dumps({"error": {
                "message": f"This model's maximum context length is {cfg.max_model_len} "
                           f"tokens. However, you requested {prompt_tokens + n_tokens} tokens "
                           f"({prompt_tokens} in the messages, {n_tokens} in the completion).",
                "type": "BadRequestError", "code": 400}})
            _write_simple(writer, 400, refusal.encode(), close=not keep_alive)
            return
        stream = bool(req.get("stream"))
        include_usage = cfg.usage and bool((req.get("stream_options") or {}).get("include_usage"))

        async with self._slot():
            cached = (self.prefix_cache.lookup_and_insert(prompt)
                      if self.prefix_cache is not None else None)
            prefill_s = cfg.prefill_ms_per_1k_tokens * (prompt_tokens - (cached or 0)) / 1e6
            self._counter += 1
            ident = f"chatcmpl-tv{self._counter}"
            if not stream:
                await self._sleep_until(time.perf_counter() + prefill_s + (
                    cfg.ttft_ms + cfg.itl_ms * max(0, n_tokens - 1)) / 1000.0)
                message = self._message(n_tokens, n_thinking, shaped)
                data = {
                    "id": ident, "object": "chat.completion", "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                }
                if cfg.usage:
                    data["usage"] = _usage(prompt_tokens, n_tokens, n_thinking, cached)
                _write_simple(writer, 200, json.dumps(data).encode(), close=not keep_alive)
            else:
                await self._stream(writer, ident, model, (n_tokens, n_thinking), finish,
                                   (prompt_tokens, cached, prefill_s), include_usage, keep_alive,
                                   received_at, shaped)
            self._cache_reply(prompt, shaped, n_thinking, n_tokens)
            self._m_requests.labels("200").inc()
            self._m_tokens.inc(n_tokens)

    async def _stream(self, writer: asyncio.StreamWriter, ident: str, model: str,
                      tokens: tuple[int, int], finish: str,
                      prompt: tuple[int, int | None, float],
                      include_usage: bool, keep_alive: bool, received_at: float,
                      shaped: tuple[list[str], str, str] | None = None) -> None:
        """Stream `tokens` = (all, thinking first) on the absolute schedule; `prompt` is
        (prompt tokens, of them cached or None, prefill seconds); `deltas`: each token's delta
        object, already JSON (an agent-shaped reply), instead of words."""
        cfg = self.config
        deltas = shaped[0] if shaped is not None else None
        prompt_tokens, cached, prefill_s = prompt
        n_tokens, n_thinking = tokens
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n"
            + (b"connection: keep-alive\r\n" if keep_alive else b"connection: close\r\n")
            + b"\r\n"
        )
        prefix = (
            '{"id":"%s","object":"chat.completion.chunk","created":%d,"model":%s,'
            '"choices":[{"index":0,"delta":' % (ident, int(time.time()), json.dumps(model))
        )
        t0 = time.perf_counter()
        ttft = cfg.ttft_ms / 1000.0 + prefill_s
        itl = cfg.itl_ms / 1000.0
        jitter = cfg.jitter_ms / 1000.0
        rng = self._rng
        if cfg.role_chunk:
            _write_event(writer, prefix + '{"role":"assistant","content":""},'
                         '"finish_reason":null}]}')
        due = t0
        first_output_at = first_answer_at = None
        for i in range(n_tokens):
            nominal = t0 + ttft + i * itl + (rng.random() * jitter if jitter else 0.0)
            due = max(due, nominal)
            await self._sleep_until(due)
            name = cfg.reasoning_field if i < n_thinking else "content"
            role = '"role":"assistant",' if i == 0 and not cfg.role_chunk else ""
            delta = (deltas[i] if deltas is not None
                     else '{%s"%s":"%s"}' % (role, name, _WORDS[i % len(_WORDS)]))
            written_at = time.perf_counter()
            _write_event(writer, prefix + delta + ',"finish_reason":null}]}')
            if first_output_at is None:
                first_output_at = written_at
            if i >= n_thinking and first_answer_at is None:
                first_answer_at = written_at
            if writer.transport.get_write_buffer_size() > 256 * 1024:
                await writer.drain()
        self.stream_timings.append(StreamTiming(received_at, first_output_at, first_answer_at))
        _write_event(writer, prefix + '{},"finish_reason":"%s"}]}' % finish)
        if include_usage:
            usage = json.dumps(_usage(prompt_tokens, n_tokens, n_thinking, cached),
                               separators=(",", ":"))
            _write_event(
                writer,
                '{"id":"%s","object":"chat.completion.chunk","created":%d,"model":%s,'
                '"choices":[],"usage":%s}' % (ident, int(time.time()), json.dumps(model), usage),
            )
        _write_event(writer, "[DONE]")
        writer.write(b"0\r\n\r\n")

    def _message(self, n_tokens: int, n_thinking: int,
                 shaped: tuple[list[str], str, str] | None) -> dict:
        """A non-streamed reply's message."""
        if shaped is not None:
            return _joined_message(shaped[0][:n_tokens])
        words = [_WORDS[i % len(_WORDS)] for i in range(n_tokens)]
        message = {"role": "assistant", "content": "".join(words[n_thinking:])}
        if n_thinking:
            message[self.config.reasoning_field] = "".join(words[:n_thinking])
        return message

    def _cache_reply(self, prompt: list[str], shaped: tuple[list[str], str, str] | None,
                     n_thinking: int, n_tokens: int, api: str = "chat") -> None:
        """The reply's content after its prompt into the prefix cache, as the chat template
        renders it when the next turn resends it (a completions prompt has no template: the
        reply just follows it)."""
        if self.prefix_cache is None:
            return
        if shaped is not None:
            whole = n_tokens >= len(shaped[0])  # a tool call is cached whole or cut as a text
            reply = shaped[2] if whole else "".join(tokenize(shaped[2])[:n_tokens])
        else:
            reply = "".join(_WORDS[i % len(_WORDS)] for i in range(n_thinking, n_tokens))
        end = "" if api == "completions" else "<|im_end|>\n"
        self.prefix_cache.lookup_and_insert(prompt + tokenize(reply + end))

    def _shaped_reply(self, req: dict) -> tuple[list[str], str, str] | None:
        """A tool call or a JSON value for an agent-shaped request: (each token's delta as
        JSON, the finish reason, the text the chat template renders for it when resent);
        None for a plain request."""
        tools, choice = req.get("tools"), req.get("tool_choice")
        if isinstance(tools, list) and tools and choice != "none":
            return self._tool_call(tools, choice)
        response_format = req.get("response_format")
        if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
            spec = response_format.get("json_schema")
            return self._json_value(spec.get("schema") if isinstance(spec, dict) else None)
        return None

    def _is_bad(self, kind: str, share: float) -> int:
        """0 for a good reply; else 1 or 2, the kind of bad, alternating. Every 1/share-th
        reply is bad, so any run of replies holds the share to within one."""
        n = self._shaped[kind]
        self._shaped[kind] = n + 1
        if math.floor((n + 1) * share + 1e-9) <= math.floor(n * share + 1e-9):
            return 0
        self._bad[kind] += 1
        return 1 if self._bad[kind] % 2 else 2

    def _tool_call(self, tools: list, choice: object) -> tuple[list[str], str, str]:
        named = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
        candidates: list[dict] = [t["function"] for t in tools if isinstance(t, dict)
                                  and isinstance(t.get("function"), dict)] or [{"name": "unnamed"}]
        chosen = next((f for f in candidates if f.get("name") == named),
                      candidates[self._shaped["tool"] % len(candidates)])
        bad = self._is_bad("tool", self.config.bad_tool_share)
        name = str(chosen.get("name")) if bad != 2 else "tokvera_unknown_tool"
        arguments = json.dumps(_instance(chosen.get("parameters")))
        if bad == 1:
            arguments = arguments[:-1] or "{"  # the arguments never close
        deltas = ['{"role":"assistant","tool_calls":[{"index":0,"id":"call_tv%d",'
                  '"type":"function","function":{"name":%s,"arguments":""}}]}'
                  % (self._shaped["tool"], json.dumps(name))]
        deltas += ['{"tool_calls":[{"index":0,"function":{"arguments":%s}}]}' % json.dumps(p)
                   for p in tokenize(arguments)]
        return deltas, "tool_calls", tool_call_text(name, arguments)

    def _json_value(self, schema: object) -> tuple[list[str], str, str]:
        bad = self._is_bad("json", self.config.bad_json_share)
        text = json.dumps(_instance(schema))
        if bad == 1:
            text = text[:-1] or "{"  # cut short: not JSON
        elif bad == 2:  # JSON of the wrong type for the schema
            wants_array = isinstance(schema, dict) and schema.get("type") == "array"
            text = "{}" if wants_array else "[]"
        pieces = tokenize(text)
        deltas = ['{%s"content":%s}' % ('"role":"assistant",' if i == 0 else "", json.dumps(p))
                  for i, p in enumerate(pieces)]
        return deltas, "stop", text

    @staticmethod
    async def _sleep_until(deadline: float) -> None:
        delay = deadline - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)


def _instance(schema: object) -> object:
    """A value `schema` accepts, for the schemas tools and replies use (objects, arrays,
    strings, numbers, booleans, enums, const, anyOf/oneOf); not every keyword is honoured."""
    if not isinstance(schema, dict):
        return {}
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _instance(schema[key][0])
    kind = schema.get("type", "object" if "properties" in schema else None)
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties")
        return ({k: _instance(v) for k, v in properties.items()}
                if isinstance(properties, dict) else {})
    if kind == "array":
        return [_instance(schema.get("items"))] * max(1, int(schema.get("minItems") or 1))
    if kind == "string":
        text = "tokvera".ljust(int(schema.get("minLength") or 0), "x")
        return text[:int(schema["maxLength"])] if "maxLength" in schema else text
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", 1), schema.get("maximum")
        value = low if high is None else min(low, high)
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return {}


def _shaped_length(shaped: tuple[list[str], str, str],
                   max_tokens: object) -> tuple[int, int, str]:
    """(tokens, thinking tokens, finish reason) of an agent-shaped reply under max_tokens."""
    deltas, natural_finish, _ = shaped
    try:
        n_tokens = min(len(deltas), int(max_tokens or len(deltas)))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        n_tokens = len(deltas)
    return n_tokens, 0, natural_finish if n_tokens == len(deltas) else "length"


def _streamed_call(deltas: list[str]) -> ToolCall | None:
    """The tool call an agent-shaped reply streamed (its id, name, arguments), or None."""
    ident, name, arguments = "", None, ""
    for text in deltas:
        for call in json.loads(text).get("tool_calls") or ():
            ident = ident or str(call.get("id") or "")
            name = name or call["function"].get("name")
            arguments += call["function"].get("arguments") or ""
    return None if name is None else (ident, str(name), arguments)


def _joined_message(deltas: list[str]) -> dict:
    """The non-streamed message of an agent-shaped reply: its deltas joined."""
    content, name, arguments = "", None, ""
    for text in deltas:
        delta = json.loads(text)
        content += delta.get("content") or ""
        for call in delta.get("tool_calls") or []:
            function: dict = call["function"]
            name = function.get("name") or name
            arguments += function.get("arguments") or ""
    if name is None:
        return {"role": "assistant", "content": content}
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_tv", "type": "function",
         "function": {"name": name, "arguments": arguments}}]}


def _usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int = 0,
           cached_tokens: int | None = None) -> dict:
    usage: dict = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                   "total_tokens": prompt_tokens + completion_tokens}
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes everything
        raise _BadRequest("head") from exc
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest("request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise _BadRequest("header line")
        headers[name.strip().lower()] = value.strip()
    return parts[0], parts[1], headers


def _write_events(writer: asyncio.StreamWriter, events: list[tuple[str | None, str]]) -> None:
    """Named events (Responses, Messages) or data-only ones, in one chunk."""
    payload = b"".join((b"event: %s\n" % name.encode() if name else b"")
                       + b"data: " + data.encode() + b"\n\n" for name, data in events)
    if payload:
        writer.write(b"%x\r\n%s\r\n" % (len(payload), payload))


def _write_event(writer: asyncio.StreamWriter, data: str) -> None:
    payload = b"data: " + data.encode() + b"\n\n"
    writer.write(b"%x\r\n%s\r\n" % (len(payload), payload))


_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 500: b"Internal Server Error"}


def _write_simple(writer: asyncio.StreamWriter, status: int, body: bytes, *,
                  content_type: bytes = b"application/json", close: bool = False) -> None:
    writer.write(
        b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n"
        % (status, _REASONS.get(status, b"Status"), content_type, len(body),
           b"connection: close\r\n" if close else b"")
        + body
    )


@contextlib.contextmanager
def running_target(
    config: TargetConfig | None = None, host: str = "127.0.0.1"
) -> Iterator[tuple[str, int]]:
    """Run a target on its own event loop in a background thread; yields ``(host, port)``.

    For tests and demos that drive the grader synchronously from the main thread.
    """
    with serving_target(config, host) as (_, bound_host, bound_port):
        yield bound_host, bound_port


@contextlib.contextmanager
def serving_target(
    config: TargetConfig | None = None, host: str = "127.0.0.1"
) -> Iterator[tuple[TargetServer, str, int]]:
    """Like ``running_target``, yielding ``(server, host, port)``: the server's record of what
    it received and its own clock (``stream_timings``) are there to read."""
    loop = asyncio.new_event_loop()
    server = TargetServer(config)
    ready = threading.Event()
    bound: dict[str, tuple[str, int]] = {}

    def _run() -> None:
        asyncio.set_event_loop(loop)
        bound["addr"] = loop.run_until_complete(server.start(host, 0))
        ready.set()
        loop.run_forever()
        loop.run_until_complete(server.close())
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=_run, name="tokvera-target", daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("the target did not start")
    try:
        yield server, *bound["addr"]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
