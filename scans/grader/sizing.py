"""Sizing the workload against the server, before any load: the HTTP I/O that workload.py
(which the plan imports) must not carry. Only the runner's load.py imports it.

* **Reply length**: a probe before the load finds out whether the server accepts
  ``ignore_eos`` and ``min_tokens`` (outside the preflight's stop rule: a 400 for an unknown
  parameter is not a dead endpoint); what it refuses is never sent, so no request of the load
  fails because of it, and the report says whether the length was enforced.
* **Prompt length**: each prompt is N tokens as the server counts them, chat template
  included, within ``tolerance(N)``. Counted, preferred first, by the server's ``/tokenize``
  (vLLM: ``messages``, template included, or ``prompt`` for the completions API, which applies
  none; llama.cpp: ``content``, plus the template overhead measured once with a probe per
  arrangement of messages), else by probes in the plan's own API (its body with the smallest
  reply cap, its usage as its parser reads it: ``usage.prompt_tokens``, the Responses API's
  ``input_tokens``, the Messages API's ``message_start``): two counts give the tokens per
  filler word and the fixed part, then corrections until within tolerance. What is counted is
  the prompt as it is sent (the Messages API's shared prefix as its ``system`` prompt). A
  server with neither usage nor ``/tokenize`` is refused: a guess would be reported as a
  length it is not (DECISIONS.md, 2026-12-01).
* **A spread of prompt lengths**: the anchor lengths are sized as above, and each request's
  filler is chosen by a model fitted to every sizing count (tokens = a + b·words +
  c·characters), near the anchors' interpolation.

Sizing results are kept per plan (``_SIZING_CACHE``) and checked with one count on reuse.
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from .apis import MAX_TOKENS_FIELDS, probe_max_tokens, prompt_messages, prompt_text, request_body
from .load_bodies import ASK, LoadBodies, filler, filler_chars, nonce_text
from .openai_chat import encode_body, user_message
from .sse import SSEDecoder
from .stream import StreamParser, StreamTally
from .stream_apis import parser_class as api_parser_class
from .workload import PRESETS, Workload, WorkloadError

__all__ = ["PreparedWorkload", "initial_workload", "prepare_workload", "tolerance"]

#: Output-length probe: at most this many tokens (enough to see a length held).
OUTPUT_PROBE_TOKENS = 16
#: Corrections after the first two counts before sizing gives up.
SIZING_ROUNDS = 8
_SIZING_CACHE: dict[tuple, tuple[int, int]] = {}
_SIZING_CACHE_MAX = 256


def tolerance(tokens: int) -> int:
    """How far a sized prompt may be from the length asked: max(2, 1 %)."""
    return max(2, math.ceil(tokens * 0.01))


def _fit_lengths(points: list[tuple[int, int]]) -> tuple[float, float, float] | None:
    """Least squares of counted tokens = a + b·words + c·characters over the sizing counts
    (filler words differ in length, and a server may count by either), or None when the
    counts cannot fix three numbers."""
    rows = [(1.0, float(k), float(filler_chars(k)), float(t)) for k, t in set(points)]
    if len(rows) < 4:
        return None
    m = [[sum(r[i] * r[j] for r in rows) for j in range(3)] + [sum(r[i] * r[3] for r in rows)]
         for i in range(3)]
    for col in range(3):  # Gaussian elimination with partial pivoting
        pivot = max(range(col, 3), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-9:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(3):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return m[0][3] / m[0][0], m[1][3] / m[1][1], m[2][3] / m[2][2]


@dataclass
class PreparedWorkload:
    """What a scan will send, once the server was asked (``prepare_workload``)."""

    workload: Workload
    max_tokens: int
    scan_nonce: int
    sizing: str = "builtin"
    sizing_detail: str | None = None
    sent: list[str] = field(default_factory=lambda: ["max_tokens"])
    enforced: bool | None = None
    output_note: str = "max_tokens is a ceiling: each reply ends where the model stops"
    max_model_len: int | None = None
    sizing_requests: int = 0
    prompt_tokens_expected: int | None = None
    #: An input spread's sized anchors: (tokens asked, filler words).
    input_anchors: list[tuple[int, int]] = field(default_factory=list)

    def public_dict(self) -> dict:
        w = self.workload
        extra: dict[str, Any] = {}
        if w.preset is not None:
            tokens_in, tokens_out, what = PRESETS[w.preset]
            extra["preset"] = {"name": w.preset, "input_tokens": tokens_in,
                               "output_tokens": tokens_out, "what": what}
        if w.input_spread is not None:
            extra["input_distribution"] = {
                **w.input_spread.public_dict(),
                "sized_at": [tokens for tokens, _ in self.input_anchors],
                "note": "each request draws its own length; sized_at are lengths sized "
                        "against the server (as it counted them), those between interpolated"}
        return {
            "input_tokens": w.input_tokens,
            "output_tokens": w.output_tokens,
            "shared_prefix_tokens": w.shared_prefix_tokens,
            "max_tokens": self.max_tokens,
            "dataset": w.dataset.public_dict() if w.dataset is not None else None,
            "warmup": w.warmup,
            "nonce": {"scan": f"{self.scan_nonce:010d}",
                      "format": "[scan-request] at the start of every prompt's text, after "
                                "the shared prefix"},
            "sizing": self.sizing,
            "sizing_detail": self.sizing_detail,
            "sizing_requests": self.sizing_requests,
            "max_model_len": self.max_model_len,
            "output_length": {"enforced": self.enforced, "sent": list(self.sent),
                              "note": self.output_note},
            **extra,
        }


def initial_workload(workload: Workload, max_tokens: int, *, scan_nonce: int | None = None,
                     api: str = "chat") -> PreparedWorkload:
    prepared = PreparedWorkload(workload, max_tokens,
                                secrets.randbelow(10**10) if scan_nonce is None else scan_nonce)
    cap = MAX_TOKENS_FIELDS.get(api)
    if cap is not None:  # the API's own name for the reply's cap, wherever it is said
        prepared.sent = [cap]
        prepared.output_note = prepared.output_note.replace("max_tokens", cap)
    if workload.dataset is not None:
        prepared.sizing = "dataset"
    return prepared


def _root(base_url: str) -> str:
    return base_url[:-3] if base_url.endswith("/v1") else base_url


async def _post(client: httpx.AsyncClient, url: str, content: bytes,
                timeout: float) -> tuple[int | None, bytes]:
    """POST `content`; (status or None on no answer, body up to 1 MiB). Never raises."""
    try:
        async with asyncio.timeout(timeout):
            async with client.stream("POST", url, content=content, headers={
                    "content-type": "application/json"}) as response:
                body = bytearray()
                async for piece in response.aiter_bytes():
                    body += piece
                    if len(body) > 1024 * 1024:
                        break
                return response.status_code, bytes(body)
    except (TimeoutError, httpx.HTTPError):
        return None, b""


def _usage_of(body: bytes, parser_class: type[StreamParser] = StreamParser) -> StreamTally:
    """What a probe's whole stream said, read by its API's parser."""
    decoder = SSEDecoder()
    parser = parser_class()
    parser.feed(decoder.feed(body), 0.0)
    parser.feed(decoder.flush(), 0.0)
    return parser.tally


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


PromptMessages = list[dict[str, Any]]


class _Sizer:
    """Counts prompt tokens as the server does, by /tokenize or by probes, each prompt as the
    plan's API sends it (``count`` takes its messages, ``apis.prompt_messages``)."""

    def __init__(self, plan_base: str, model: str, client: httpx.AsyncClient, timeout: float,
                 bodies: LoadBodies, url: str) -> None:
        self.root = _root(plan_base)
        self.model = model
        self.client = client
        self.timeout = timeout
        self.api = bodies.api
        self.url = url  # the plan's API's path, where probes go
        self.method: str | None = None
        self.flavour = "probe"   # or "vllm" (messages or prompt) or "llamacpp" (content)
        self.detail = ""
        #: llama.cpp: the template's tokens around the content, by the messages' roles.
        self.overheads: dict[tuple[str, ...], int] = {}
        self.requests = 0
        self.max_model_len: int | None = None

    def _probe_body(self, messages: PromptMessages) -> bytes:
        return encode_body(request_body(self.api, self.model, messages,
                                        probe_max_tokens(self.api)))

    async def probe_count(self, messages: PromptMessages) -> int | None:
        self.requests += 1
        status, body = await _post(self.client, self.url, self._probe_body(messages),
                                   self.timeout)
        if status is None or not 200 <= status < 300:
            return None
        return _usage_of(body, api_parser_class(self.api)).prompt_tokens

    async def _tokenize(self, payload: dict) -> Any:
        self.requests += 1
        status, body = await _post(self.client, f"{self.root}/tokenize",
                                   json.dumps(payload).encode(), self.timeout)
        return _json(body) if status is not None and 200 <= status < 300 else None

    def _vllm_payload(self, messages: PromptMessages) -> dict:
        """vLLM's /tokenize request: the completions API applies no chat template, so its
        prompt is counted as text; every other API's messages with the template."""
        if self.api == "completions":
            return {"model": self.model, "prompt": prompt_text(messages)}
        return {"model": self.model, "add_generation_prompt": True, "messages": messages}

    async def _overhead(self, messages: PromptMessages, raw: int) -> int | None:
        """llama.cpp's template tokens around messages of these roles: one probe, kept."""
        roles = tuple(str(m.get("role")) for m in messages)
        if roles not in self.overheads:
            counted = await self.probe_count(messages)
            if counted is None:
                return None
            self.overheads[roles] = counted - raw
        return self.overheads[roles]

    async def detect(self, sample: PromptMessages) -> None:
        """Choose the counting method: vLLM /tokenize, llama.cpp /tokenize, probes."""
        answer = await self._tokenize(self._vllm_payload(sample))
        if isinstance(answer, dict) and type(answer.get("count")) is int:
            self.method, self.flavour = "tokenize", "vllm"
            limit = answer.get("max_model_len")
            self.max_model_len = limit if type(limit) is int and limit > 0 else None
            self.detail = ("the server's /tokenize (prompt)" if self.api == "completions" else
                           "the server's /tokenize (messages, chat template included)")
            return
        answer = await self._tokenize({"content": prompt_text(sample)})
        if isinstance(answer, dict) and isinstance(answer.get("tokens"), list):
            overhead = await self._overhead(sample, len(answer["tokens"]))
            self.method, self.flavour = "tokenize", "llamacpp"
            if overhead is not None:
                self.detail = (f"the server's /tokenize (content) plus the chat template's "
                               f"{overhead} tokens, measured once")
            else:
                self.detail = ("the server's /tokenize (content); the chat template's overhead "
                               "could not be measured (no usage reported)")
            return
        if await self.probe_count(sample) is not None:
            self.method = "probe"
            self.detail = (f"probes with {MAX_TOKENS_FIELDS.get(self.api, 'max_tokens')} "
                           f"{probe_max_tokens(self.api)}, read from the usage reported")
            return
        raise WorkloadError("cannot size prompts: the server reports no token usage and has "
                            "no /tokenize endpoint; drop --input-tokens and "
                            "--shared-prefix-tokens (tokvera needs the server's count)")

    async def count(self, messages: PromptMessages) -> int:
        if self.method == "tokenize":
            if self.flavour == "llamacpp":
                answer = await self._tokenize({"content": prompt_text(messages)})
                tokens = answer.get("tokens") if isinstance(answer, dict) else None
                if isinstance(tokens, list):
                    return len(tokens) + (await self._overhead(messages, len(tokens)) or 0)
            else:
                answer = await self._tokenize(self._vllm_payload(messages))
                if isinstance(answer, dict) and type(answer.get("count")) is int:
                    return answer["count"]
            raise WorkloadError(f"prompt sizing stopped: {self.root}/tokenize stopped answering")
        counted = await self.probe_count(messages)
        if counted is None:
            raise WorkloadError("prompt sizing stopped: a probe request (the shortest reply) "
                                "failed or reported no usage")
        return counted


async def _solve(count: Callable[[int], Awaitable[int]], target: int, what: str,
                 flag: str, below: Callable[[int], str] | None = None) -> tuple[int, int]:
    """The number of filler words k such that count(k) is within tolerance(target)."""
    tol = tolerance(target)
    base = await count(0)
    if target < base - tol:
        raise WorkloadError(below(base) if below else
                            f"{flag} {target} is below the prompt's fixed part: {base} tokens")
    if abs(base - target) <= tol:
        return 0, base
    k = max(1, target - base)  # first guess: one token per word
    counted = await count(k)
    for _ in range(SIZING_ROUNDS):
        if abs(counted - target) <= tol:
            return k, counted
        rate = (counted - base) / k if k else 0
        if rate <= 0:
            break
        k = max(0, k + round((target - counted) / rate))
        counted = await count(k)
    if abs(counted - target) <= tol:
        return k, counted
    raise WorkloadError(f"prompt sizing did not converge: {what} came to {counted} tokens for "
                        f"{target} asked (tolerance ±{tol}); the scan stops before the load")


async def _context_from_models(client: httpx.AsyncClient, base_url: str, model: str,
                               timeout: float) -> int | None:
    try:
        async with asyncio.timeout(timeout):
            response = await client.get(f"{base_url}/models")
    except (TimeoutError, httpx.HTTPError):
        return None
    data = _json(response.content) if response.status_code == 200 else None
    entries = data.get("data") if isinstance(data, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("id") == model:
            for key in ("max_model_len", "context_length", "context_window"):
                value = entry.get(key)
                if type(value) is int and value > 0:
                    return value
    return None


async def _output_length(prepared: PreparedWorkload, bodies: LoadBodies,
                         client: httpx.AsyncClient, url: str, timeout: float,
                         parser_class: type[StreamParser] = StreamParser) -> dict:
    """Which of ignore_eos / min_tokens the server accepts, by a short probe per choice."""
    m = prepared.workload.output_tokens
    assert m is not None
    cap = MAX_TOKENS_FIELDS.get(bodies.api, "max_tokens")
    probe_m = min(m, OUTPUT_PROBE_TOKENS)
    tried: list[str] = []
    for params in ({"ignore_eos": True, "min_tokens": probe_m}, {"ignore_eos": True},
                   {"min_tokens": probe_m}):
        probe = bodies.with_changes(max_tokens=probe_m, params=params)
        prepared.sizing_requests += 1
        status, body = await _post(client, url, probe.body(990_000 + prepared.sizing_requests),
                                   timeout)
        if status is not None and 200 <= status < 300:
            tally = _usage_of(body, parser_class)
            load_params = {k: (m if k == "min_tokens" else v) for k, v in params.items()}
            prepared.sent = [cap, *params]
            got = tally.completion_tokens
            if got is not None and got < probe_m and tally.finish_reason != "length":
                prepared.enforced = False
                prepared.output_note = (f"not enforced: the server accepted {' and '.join(params)}"
                                        f" but a {probe_m}-token probe stopped at {got}")
            else:
                prepared.enforced = True
                prepared.output_note = f"enforced with {' and '.join(params)} ({cap} {m})"
            return load_params
        if status is None or status >= 500:
            prepared.enforced = False
            prepared.output_note = ("not enforced: the probe for ignore_eos and min_tokens got "
                                    f"{'no answer' if status is None else f'HTTP {status}'}; "
                                    f"{cap} alone is sent")
            return {}
        tried.append(f"HTTP {status}")
    prepared.enforced = False
    prepared.sent = [cap]
    prepared.output_note = ("not enforced: the server refused ignore_eos and min_tokens "
                            f"({', '.join(sorted(set(tried)))}); {cap} alone is sent, so "
                            "replies may end early")
    return {}


def _check_context(prepared: PreparedWorkload, limit: int | None) -> None:
    """Refuse prompts (the longest of a spread) that with max_tokens exceed the context."""
    prepared.max_model_len = limit
    longest = prepared.workload.longest_input
    if limit is not None and longest is not None and longest + prepared.max_tokens > limit:
        raise WorkloadError(f"--input-tokens {longest} plus max_tokens "
                            f"{prepared.max_tokens} exceed the model's context of {limit:,} "
                            "tokens")


async def _prefix_words(w: Workload, sizer: _Sizer) -> int:
    """The filler words of the shared prefix, sized to --shared-prefix-tokens (0 without one)."""
    if w.shared_prefix_tokens is None:
        return 0

    async def count_prefix(k: int) -> int:
        return await sizer.count(user_message(filler(k, 7)))
    words, _ = await _solve(count_prefix, w.shared_prefix_tokens,
                            "the shared prefix", "--shared-prefix-tokens")
    return words


async def _size_spread(prepared: PreparedWorkload, bodies: LoadBodies, sizer: _Sizer,
                       prompt: Callable[[int, int], PromptMessages]) -> LoadBodies:
    """Size an input spread: the shared prefix, then each anchor length exactly (not cached
    between scans: a handful of counts)."""
    w = prepared.workload
    spread = w.input_spread
    assert spread is not None
    prefix_words = await _prefix_words(w, sizer)

    points: list[tuple[int, int]] = []  # every (filler words, tokens counted): the fit's data

    async def count_prompt(k: int) -> int:
        counted = await sizer.count(prompt(prefix_words, k))
        points.append((k, counted))
        return counted

    def below(base: int) -> str:
        return (f"--input-tokens {spread.text()} reaches down to {spread.low}, below the "
                f"prompt's fixed part ({base} tokens: chat template, shared prefix, nonce and "
                "instruction)")

    anchors = []  # (tokens the server counted, filler words): interpolated between
    for tokens in spread.anchors():  # ascending: only the first can be below the fixed part
        words, counted = await _solve(count_prompt, tokens, f"the {tokens}-token prompt",
                                      "--input-tokens", below=below)
        anchors.append((counted, words))
    prepared.input_anchors = anchors
    prepared.prompt_tokens_expected = spread.center
    prepared.sizing = sizer.method or "probe"
    prepared.sizing_detail = sizer.detail
    prepared.sizing_requests += sizer.requests
    prefix = filler(prefix_words, 7) + "\n" if prefix_words else ""
    return bodies.with_changes(prefix=prefix, text=None,
                               spread=(spread, tuple(anchors), _fit_lengths(points)))


async def prepare_workload(prepared: PreparedWorkload, bodies: LoadBodies, *,
                           client: httpx.AsyncClient, base_url: str, chat_url: str, model: str,
                           timeout: float,
                           parser_class: type[StreamParser] = StreamParser) -> LoadBodies:
    """Ask the server what it needs to know (output-length parameters, prompt sizes, context)
    and return the load's bodies; raise WorkloadError (one line) before any load otherwise."""
    w = prepared.workload
    params: dict = {}
    if w.output_tokens is not None:
        params = await _output_length(prepared, bodies, client, chat_url, timeout,
                                      parser_class)
    bodies = bodies.with_changes(params=params)
    if not w.sized:
        return bodies
    sizer = _Sizer(base_url, model, client, timeout, bodies, chat_url)
    await sizer.detect(user_message(f"{nonce_text(prepared.scan_nonce, 0)} {ASK}"))
    limit = sizer.max_model_len or await _context_from_models(client, base_url, model,
                                                              min(timeout, 10.0))
    _check_context(prepared, limit)
    key = (base_url, model, bodies.api, w.input_tokens, w.shared_prefix_tokens, sizer.method)
    prefix = ""
    text = None
    cached = _SIZING_CACHE.get(key)
    sizing_nonce = nonce_text(prepared.scan_nonce, 0)

    def prompt(prefix_words: int, words: int) -> PromptMessages:
        """A prompt as the API sends it (the shared prefix where it keeps it)."""
        pre = filler(prefix_words, 7) + "\n" if prefix_words else ""
        return prompt_messages(bodies.api, pre, f"{sizing_nonce} {ASK}{filler(words)}")

    if w.input_spread is not None:
        return await _size_spread(prepared, bodies, sizer, prompt)

    if cached is not None and w.input_tokens is not None:
        counted = await sizer.count(prompt(*cached))
        if abs(counted - w.input_tokens) > tolerance(w.input_tokens):
            cached = None
    if cached is None:
        prefix_words = await _prefix_words(w, sizer)
        words = 0
        if w.input_tokens is not None:
            async def count_prompt(k: int) -> int:
                return await sizer.count(prompt(prefix_words, k))
            n = w.input_tokens
            words, _ = await _solve(
                count_prompt, n, "the prompt", "--input-tokens",
                below=lambda base: (f"--input-tokens {n} is below the prompt's fixed part "
                                    f"({base} tokens: chat template, shared prefix, nonce and "
                                    "instruction)"))
        cached = (prefix_words, words)
        if len(_SIZING_CACHE) >= _SIZING_CACHE_MAX:
            _SIZING_CACHE.pop(next(iter(_SIZING_CACHE)))
        _SIZING_CACHE[key] = cached
    prefix_words, words = cached
    if prefix_words:
        prefix = filler(prefix_words, 7) + "\n"
    if w.input_tokens is not None:
        text = f"{ASK}{filler(words)}"
        prepared.prompt_tokens_expected = w.input_tokens
    prepared.sizing = sizer.method or "probe"
    prepared.sizing_detail = sizer.detail
    prepared.sizing_requests += sizer.requests
    return bodies.with_changes(prefix=prefix, text=text)
