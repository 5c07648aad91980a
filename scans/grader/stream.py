"""The one reading of an OpenAI-compatible streamed chat completion.

The grader (``runner``) and the host agent (``benchmarks.agent``) both feed the SSE payloads
of a stream (``sse.SSEDecoder``) to a ``StreamParser`` with the moment each network read
arrived, and read the result from its ``StreamTally``. So time to first token, chunk gaps,
usage, "the stream is complete" and "the stream is a reply" are defined once, here:

* **Output** is any non-empty string in ``delta.content``, ``delta.refusal``,
  ``delta.reasoning_content`` (vLLM and SGLang with a reasoning parser, llama.cpp's
  ``llama-server``) or ``delta.reasoning`` (OpenRouter, newer vLLM), or a ``delta.tool_calls``
  entry carrying a function name or an arguments fragment. A chunk with output is counted once,
  whatever fields it fills. Empty strings, ``null``, numbers and objects in those fields are
  not output (and never a crash).
* **Thinking** is output in ``reasoning_content`` / ``reasoning``; **answer** is output in
  ``content``, ``refusal`` or ``tool_calls`` (what the caller asked for, as opposed to the
  model's reasoning about it). See DECISIONS.md, "Reasoning models".
* Only the first choice is read: the request asks for one completion (``n`` defaults to 1).
* ``[DONE]`` (surrounding whitespace ignored) marks the stream done; events after it are
  still read (usage sometimes comes last).
* Usage: ``usage.completion_tokens`` (and ``prompt_tokens``,
  ``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``)
  when the server states it; otherwise the output chunks stand in for tokens and
  ``usage_reported`` says so.
* A stream is **complete** when it said ``[DONE]`` or gave a ``finish_reason``; a complete
  stream is a **reply** when it produced any output (``empty_reply`` otherwise), so a model
  still thinking when ``max_tokens`` ran out has replied.

No Django, no I/O: the callers read the socket and decide what a broken connection means.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

try:  # a faster JSON parser when installed; the stdlib's otherwise
    import orjson

    _loads: Callable[[bytes | str], Any] = orjson.loads
    JSON_IMPL = "orjson"
    _JSONError: tuple[type[Exception], ...] = (orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads
    JSON_IMPL = "json"
    _JSONError = (ValueError,)

__all__ = [
    "ANSWER",
    "JSON_IMPL",
    "THINKING",
    "THINKING_FIELDS",
    "StreamParser",
    "StreamTally",
    "classify_end",
    "output_kind",
]

#: Bits of ``output_kind``.
THINKING = 1
ANSWER = 2
#: The delta fields that carry a model's thinking, in the order servers adopted them.
THINKING_FIELDS = ("reasoning_content", "reasoning")


@dataclass(slots=True, kw_only=True)
class StreamTally:
    """What one stream carried. Times are ``time.perf_counter()`` seconds of the network read
    that brought the event (None when the moment never came)."""

    output_times: array = field(default_factory=lambda: array("d"))
    first_output_at: float | None = None
    first_answer_at: float | None = None
    last_output_at: float | None = None
    thinking_chunks: int = 0
    answer_chunks: int = 0
    done_at: float | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    reasoning_tokens: int | None = None
    #: ``usage.prompt_tokens_details.cached_tokens``: prompt tokens served from the server's
    #: prefix cache, where it says so.
    cached_tokens: int | None = None
    ignored_lines: int = 0
    stream_error: str | None = None

    @property
    def output_chunks(self) -> int:
        return len(self.output_times)

    @property
    def complete(self) -> bool:
        """The stream said it was over: ``[DONE]`` or a ``finish_reason``."""
        return self.done_at is not None or self.finish_reason is not None

    @property
    def reported_usage(self) -> bool:
        return self.completion_tokens is not None

    @property
    def output_units(self) -> int:
        """Completion tokens when the server stated them, else output chunks."""
        tokens = self.completion_tokens
        return tokens if tokens is not None else len(self.output_times)

    @property
    def thought(self) -> bool:
        return self.thinking_chunks > 0

    @property
    def stopped_while_thinking(self) -> bool:
        """Ran out of ``max_tokens`` (finish_reason ``length``) after thinking, before any
        answer: the budget did not fit the model."""
        return self.thought and self.first_answer_at is None and self.finish_reason == "length"

    def gaps_ms(self) -> list[float]:
        """Gaps between consecutive output chunks, thinking and answer alike."""
        times = self.output_times
        return [(times[i] - times[i - 1]) * 1000.0 for i in range(1, len(times))]

    def rate(self, basis: str) -> float | None:
        """(units - 1) / (last output - first output), units being completion tokens
        (``basis == "tokens"``) or output chunks; None below 2 units or with no elapsed time."""
        units = self.completion_tokens if basis == "tokens" else len(self.output_times)
        if units is None or units < 2 or self.first_output_at is None:
            return None
        elapsed = (self.last_output_at or 0.0) - self.first_output_at
        if elapsed <= 0:
            return None
        return (units - 1) / elapsed

    def thinking_ms(self) -> float | None:
        """First answer minus first output, for a stream that thought and then answered."""
        if not self.thought or self.first_answer_at is None or self.first_output_at is None:
            return None
        return (self.first_answer_at - self.first_output_at) * 1000.0


def _text(value: object) -> bool:
    return type(value) is str and value != ""


def _tool_call_output(calls: object) -> bool:
    """A ``tool_calls`` delta entry naming a function or carrying an arguments fragment."""
    if type(calls) is not list:
        return False
    for call in calls:
        function = call.get("function") if type(call) is dict else None
        if type(function) is dict and (_text(function.get("name"))
                                       or _text(function.get("arguments"))):
            return True
    return False


def output_kind(delta: dict) -> int:
    """``THINKING | ANSWER`` bits for the output one delta carries (0: none)."""
    content = delta.get("content")
    if content and type(content) is str:
        kind = ANSWER
    elif _text(delta.get("refusal")) or _tool_call_output(delta.get("tool_calls")):
        kind = ANSWER
    else:
        kind = 0
    for name in THINKING_FIELDS:
        value = delta.get(name)
        if value and type(value) is str:
            return kind | THINKING
    return kind


def _error_message(error: object) -> str:
    if isinstance(error, dict):
        message = error.get("message") or error.get("type") or error
        return f"error in stream: {message}"[:300]
    return f"error in stream: {error}"[:300]


class StreamParser:
    """SSE data payloads in, a ``StreamTally`` out. ``answer_text`` collects the ``content``
    strings when asked (the host agent returns them to the buyer; a conversation resends
    them); ``tool_calls`` the streamed tool calls, by their ``index``: [name, arguments
    fragments...] (the name as first given, the fragments in arrival order), and
    ``tool_call_ids`` their ids as first given (a conversation resends them)."""

    __slots__ = ("tally", "answer_text", "tool_calls", "tool_call_ids")
    #: What says a stream of this API is over (``classify_end``'s words for one that is not).
    ENDING = "[DONE] or a finish_reason"

    def __init__(self, tally: StreamTally | None = None, *, keep_text: bool = False,
                 keep_tool_calls: bool = False) -> None:
        self.tally = tally if tally is not None else StreamTally()
        self.answer_text: list[str] | None = [] if keep_text else None
        self.tool_calls: dict[int, list[str]] | None = {} if keep_tool_calls else None
        self.tool_call_ids: dict[int, str] = {}

    def joined_tool_calls(self) -> list[tuple[str, str]]:
        """Each streamed tool call as (name, arguments joined), in index order."""
        calls = self.tool_calls or {}
        return [(parts[0], "".join(parts[1:])) for _, parts in sorted(calls.items())]

    def received_tool_calls(self) -> list[tuple[str, str, str]]:
        """Each streamed tool call as (id, name, arguments joined), in index order; a call
        the server gave no id is named by its index (a client needs one to answer it)."""
        calls = self.tool_calls or {}
        return [(self.tool_call_ids.get(index, f"call_{index}"), parts[0],
                 "".join(parts[1:])) for index, parts in sorted(calls.items())]

    def feed(self, payloads: list[bytes], at: float) -> None:
        """The payloads of one network read, all arrived at `at`. Stops at an ``error``
        object (``tally.stream_error``): nothing after it is read."""
        for payload in payloads:
            if self.tally.stream_error is not None:
                return
            self.event(payload, at)

    def event(self, payload: bytes, at: float) -> None:
        tally = self.tally
        if payload == b"[DONE]" or (len(payload) < 16 and payload.strip() == b"[DONE]"):
            if tally.done_at is None:
                tally.done_at = at
            return
        try:
            obj = _loads(payload)
        except _JSONError:
            obj = _first_json_line(payload)
        if type(obj) is not dict:
            tally.ignored_lines += 1
            return
        self.chunk(obj, at)

    def chunk(self, obj: dict, at: float) -> None:
        """One decoded chunk object."""
        error = obj.get("error")
        if error:
            self.tally.stream_error = _error_message(error)
            return
        choices = obj.get("choices")
        if choices and type(choices) is list and type(choices[0]) is dict:
            self._choice(choices[0], at)
        usage = obj.get("usage")
        if usage and type(usage) is dict:
            self._usage(usage)

    def _choice(self, choice: dict, at: float) -> None:
        delta = choice.get("delta")
        if type(delta) is dict:
            kind = output_kind(delta)
            if kind:
                self._output(kind, at)
                if self.answer_text is not None and kind & ANSWER:
                    content = delta.get("content")
                    if type(content) is str:
                        self.answer_text.append(content)
                if self.tool_calls is not None and kind & ANSWER:
                    self._keep_tool_calls(delta.get("tool_calls"))
        reason = choice.get("finish_reason")
        if reason is not None:
            self.tally.finish_reason = str(reason)[:64]

    def _keep_tool_calls(self, calls: object) -> None:
        if type(calls) is not list or self.tool_calls is None:
            return
        for call in calls:
            function = call.get("function") if type(call) is dict else None
            if type(function) is not dict:
                continue
            index = call.get("index", 0)
            index = index if type(index) is int else 0
            parts = self.tool_calls.setdefault(index, [""])
            ident = call.get("id")
            if type(ident) is str and ident and index not in self.tool_call_ids:
                self.tool_call_ids[index] = ident
            name = function.get("name")
            if type(name) is str and name and not parts[0]:
                parts[0] = name
            arguments = function.get("arguments")
            if type(arguments) is str and arguments:
                parts.append(arguments)

    def _output(self, kind: int, at: float) -> None:
        tally = self.tally
        tally.output_times.append(at)
        tally.last_output_at = at
        if tally.first_output_at is None:
            tally.first_output_at = at
        if kind & ANSWER:
            tally.answer_chunks += 1
            if tally.first_answer_at is None:
                tally.first_answer_at = at
        if kind & THINKING:
            tally.thinking_chunks += 1

    def _usage(self, usage: dict) -> None:
        tokens = usage.get("completion_tokens")
        if type(tokens) is not int or tokens < 0:
            return
        tally = self.tally
        tally.completion_tokens = tokens
        prompt_tokens = usage.get("prompt_tokens")
        if type(prompt_tokens) is int and prompt_tokens >= 0:
            tally.prompt_tokens = prompt_tokens
            prompt_details = usage.get("prompt_tokens_details")
            cached = (prompt_details.get("cached_tokens") if type(prompt_details) is dict
                      else None)
            if type(cached) is int and 0 <= cached <= prompt_tokens:
                tally.cached_tokens = cached
        details = usage.get("completion_tokens_details")
        reasoning = details.get("reasoning_tokens") if type(details) is dict else None
        if type(reasoning) is int and 0 <= reasoning <= tokens:
            tally.reasoning_tokens = reasoning


def _first_json_line(payload: bytes) -> object:
    """A data payload that is not JSON: if it is several JSON lines (a server that omits the
    blank line between events), the first object among them; otherwise None."""
    if b"\n" not in payload:
        return None
    for line in payload.split(b"\n"):
        try:
            obj = _loads(line)
        except _JSONError:
            continue
        if type(obj) is dict:
            return obj
    return None


def classify_end(tally: StreamTally, *, events_seen: int, sse: bool,
                 ending: str = StreamParser.ENDING) -> tuple[str, str] | None:
    """How a stream whose body ended without a transport error turned out: None for a reply,
    else ``(failure class, message)`` (classes in ``measurement.FAILURE_CLASSES``); `ending`
    names what would have ended it (the API's parser's ``ENDING``)."""
    if tally.stream_error is not None:
        return "stream_error", tally.stream_error
    if not tally.complete:
        if not sse and events_seen == 0:
            return "not_sse", "the body is not an SSE stream"
        return "incomplete_stream", f"the stream ended without {ending}"
    if not tally.output_times:
        return "empty_reply", ("the stream ended cleanly without any output (no content, "
                               "reasoning, refusal or tool call)")
    return None
