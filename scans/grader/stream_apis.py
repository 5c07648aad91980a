"""One stream parser per API besides chat completions, each with ``stream.StreamParser``'s
interface (``feed`` SSE payloads stamped with their network read, ``tally`` out), so the load,
the preflight's probe and ``stream.classify_end`` read every API the same way:

* **completions** (``POST /completions``): output is a non-empty ``choices[0].text``; usage,
  ``finish_reason`` and ``[DONE]`` as in chat.
* **responses** (the Responses API): output is the delta of ``response.output_text.delta``,
  ``response.refusal.delta`` or ``response.function_call_arguments.delta`` (answer) and of
  ``response.reasoning_text.delta`` / ``response.reasoning_summary_text.delta`` (thinking);
  ``response.completed`` / ``response.incomplete`` end the stream with its usage
  (``input_tokens``, ``output_tokens``); ``response.failed`` and ``error`` are errors in the
  stream. A tool call is a ``function_call`` item: its name (output, as chat's first tool-call
  delta is) in ``response.output_item.added``, its arguments in the deltas, by
  ``output_index``.
* **messages** (Anthropic's Messages API): output is a ``content_block_delta``'s ``text_delta``
  or ``input_json_delta`` (answer) or ``thinking_delta`` (thinking), or a ``tool_use`` block's
  name; ``message_start`` states the prompt's tokens, ``message_delta`` the stop reason and
  ``usage.output_tokens``; ``message_stop`` ends the stream; ``error`` is an error in it. A
  tool call is a ``tool_use`` block (its name and id in ``content_block_start``, its arguments
  the ``input_json_delta`` fragments), by the block's ``index``.

**embeddings** has no stream: ``read_embeddings`` reads its whole JSON answer (``data[]``
with an ``embedding`` each, ``usage.prompt_tokens``) into the same tally; ``done_at`` is the
moment its last byte arrived and it produces no output chunk, so no time to first token.

The event's name is read from the ``type`` inside its data (both APIs repeat it there), so the
SSE decoder keeps skipping ``event:`` lines. A stop for the length limit (``max_tokens``,
``max_output_tokens``) is recorded as ``finish_reason`` "length", as chat says it, so the
tally's "stopped while thinking" holds for every API.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeGuard

from .stream import ANSWER, THINKING, StreamParser, StreamTally

try:  # embeddings answers are large: the faster parser when installed
    import orjson

    _loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

__all__ = ["STREAM_PARSERS", "CompletionsParser", "MessagesParser", "ResponsesParser",
           "parser_class", "read_embeddings"]


def _text(value: object) -> TypeGuard[str]:
    return type(value) is str and value != ""


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _index(obj: dict, key: str) -> int:
    value = obj.get(key)
    return value if type(value) is int else 0


def _error(message: object) -> str:
    if isinstance(message, dict):
        message = message.get("message") or message.get("type") or message
    return f"error in stream: {message}"[:300]


class CompletionsParser(StreamParser):
    """``/completions``: the text of the first choice."""

    __slots__ = ()
    ENDING = "[DONE] or a finish_reason"

    def chunk(self, obj: dict, at: float) -> None:
        error = obj.get("error")
        if error:
            self.tally.stream_error = _error(error)
            return
        choices = obj.get("choices")
        if choices and type(choices) is list and type(choices[0]) is dict:
            choice = choices[0]
            text = choice.get("text")
            if _text(text):
                self._output(ANSWER, at)
                if self.answer_text is not None:
                    self.answer_text.append(text)
            reason = choice.get("finish_reason")
            if reason is not None:
                self.tally.finish_reason = str(reason)[:64]
        usage = obj.get("usage")
        if usage and type(usage) is dict:
            self._usage(usage)


_RESPONSES_ANSWER = frozenset({"response.output_text.delta", "response.refusal.delta",
                               "response.function_call_arguments.delta"})
_ARGUMENTS_DELTA = "response.function_call_arguments.delta"
_RESPONSES_THINKING = frozenset({"response.reasoning_text.delta",
                                 "response.reasoning_summary_text.delta"})


class ResponsesParser(StreamParser):
    """The Responses API's streamed events."""

    __slots__ = ()
    ENDING = "response.completed or response.incomplete"

    def chunk(self, obj: dict, at: float) -> None:
        kind = obj.get("type")
        if kind in _RESPONSES_ANSWER or kind in _RESPONSES_THINKING:
            delta = obj.get("delta")
            if _text(delta):
                self._output(ANSWER if kind in _RESPONSES_ANSWER else THINKING, at)
                if self.answer_text is not None and kind == "response.output_text.delta":
                    self.answer_text.append(delta)
                elif self.tool_calls is not None and kind == _ARGUMENTS_DELTA:
                    self.tool_calls.setdefault(_index(obj, "output_index"), [""]).append(delta)
        elif kind == "response.output_item.added":
            self._item_added(obj, at)
        elif kind == "response.function_call_arguments.done" and self.tool_calls is not None:
            # A server that sends the arguments only whole: they are the call's
            parts = self.tool_calls.setdefault(_index(obj, "output_index"), [""])
            if len(parts) == 1 and _text(obj.get("arguments")):
                parts.append(obj["arguments"])
        elif kind in ("response.completed", "response.incomplete"):
            self._finish(obj.get("response"), at)
        elif kind == "response.failed":
            response = obj.get("response")
            error = response.get("error") if type(response) is dict else None
            self.tally.stream_error = _error(error or "the response failed")
        elif kind == "error":
            self.tally.stream_error = _error(obj.get("message") or obj.get("error")
                                             or obj.get("code") or "error")

    def _item_added(self, obj: dict, at: float) -> None:
        """A function call begins: its name is output, and kept with its call id."""
        item = obj.get("item")
        if type(item) is not dict or item.get("type") != "function_call":
            return
        name = item.get("name")
        if not _text(name):
            return
        self._output(ANSWER, at)
        if self.tool_calls is not None:
            index = _index(obj, "output_index")
            parts = self.tool_calls.setdefault(index, [""])
            parts[0] = parts[0] or name
            ident = item.get("call_id")
            if _text(ident):
                self.tool_call_ids.setdefault(index, ident)

    def _finish(self, response: object, at: float) -> None:
        tally = self.tally
        if tally.done_at is None:
            tally.done_at = at
        if type(response) is not dict:
            tally.finish_reason = "stop"
            return
        details = response.get("incomplete_details")
        reason = details.get("reason") if type(details) is dict else None
        if reason is not None:
            tally.finish_reason = "length" if reason == "max_output_tokens" else str(reason)[:64]
        else:
            tally.finish_reason = "stop"
        usage = response.get("usage")
        if type(usage) is dict:
            _read_usage(tally, usage.get("output_tokens"), usage.get("input_tokens"),
                        _detail(usage, "input_tokens_details", "cached_tokens"),
                        _detail(usage, "output_tokens_details", "reasoning_tokens"))


class MessagesParser(StreamParser):
    """Anthropic's Messages API events."""

    __slots__ = ()
    ENDING = "message_stop or a stop_reason"

    def chunk(self, obj: dict, at: float) -> None:
        kind = obj.get("type")
        if kind == "content_block_delta":
            self._block_delta(obj, at)
        elif kind == "content_block_start":
            block = obj.get("content_block")
            if type(block) is dict and (
                    (block.get("type") == "tool_use" and _text(block.get("name")))
                    or (block.get("type") == "text" and _text(block.get("text")))):
                self._output(ANSWER, at)
                if self.tool_calls is not None and block["type"] == "tool_use":
                    self._tool_use(_index(obj, "index"), block)
        elif kind == "message_start":
            message = obj.get("message")
            usage = message.get("usage") if type(message) is dict else None
            if type(usage) is dict:
                self._prompt(usage)
        elif kind == "message_delta":
            self._message_delta(obj)
        elif kind == "message_stop":
            if self.tally.done_at is None:
                self.tally.done_at = at
        elif kind == "error":
            self.tally.stream_error = _error(obj.get("error") or "error")

    def _block_delta(self, obj: dict, at: float) -> None:
        delta = obj.get("delta")
        if type(delta) is not dict:
            return
        delta_kind = delta.get("type")
        if delta_kind == "text_delta" and _text(delta.get("text")):
            self._output(ANSWER, at)
            if self.answer_text is not None:
                self.answer_text.append(delta["text"])
        elif delta_kind == "input_json_delta" and _text(delta.get("partial_json")):
            self._output(ANSWER, at)
            if self.tool_calls is not None:
                self.tool_calls.setdefault(_index(obj, "index"), [""]).append(
                    delta["partial_json"])
        elif delta_kind == "thinking_delta" and _text(delta.get("thinking")):
            self._output(THINKING, at)

    def _tool_use(self, index: int, block: dict) -> None:
        assert self.tool_calls is not None
        parts = self.tool_calls.setdefault(index, [""])
        parts[0] = parts[0] or block["name"]
        if _text(block.get("id")):
            self.tool_call_ids.setdefault(index, block["id"])

    def _prompt(self, usage: dict) -> None:
        """Anthropic's ``input_tokens`` leaves out the tokens read from or written to its
        prompt cache: the prompt is their sum."""
        parts = [_count(usage.get(name)) for name in
                 ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
        if parts[0] is None:
            return
        self.tally.prompt_tokens = sum(p or 0 for p in parts)
        if parts[1] is not None:
            self.tally.cached_tokens = parts[1]

    def _message_delta(self, obj: dict) -> None:
        delta = obj.get("delta")
        reason = delta.get("stop_reason") if type(delta) is dict else None
        if reason is not None:
            self.tally.finish_reason = "length" if reason == "max_tokens" else str(reason)[:64]
        usage = obj.get("usage")
        if type(usage) is dict:
            if _count(usage.get("input_tokens")) is not None:
                self._prompt(usage)
            tokens = _count(usage.get("output_tokens"))
            if tokens is not None:
                self.tally.completion_tokens = tokens


def _detail(usage: dict, name: str, key: str) -> object:
    details = usage.get(name)
    return details.get(key) if type(details) is dict else None


def _read_usage(tally: StreamTally, output: object, prompt: object, cached: object,
                reasoning: object) -> None:
    tokens = _count(output)
    if tokens is None:
        return
    tally.completion_tokens = tokens
    prompt_tokens = _count(prompt)
    if prompt_tokens is not None:
        tally.prompt_tokens = prompt_tokens
        cached_tokens = _count(cached)
        if cached_tokens is not None and cached_tokens <= prompt_tokens:
            tally.cached_tokens = cached_tokens
    reasoning_tokens = _count(reasoning)
    if reasoning_tokens is not None and reasoning_tokens <= tokens:
        tally.reasoning_tokens = reasoning_tokens


#: The parser of each streamed API, by its ``--api`` name.
STREAM_PARSERS: dict[str, type[StreamParser]] = {
    "chat": StreamParser,
    "completions": CompletionsParser,
    "responses": ResponsesParser,
    "messages": MessagesParser,
}


def parser_class(api: str) -> type[StreamParser]:
    """The stream parser of `api` (chat's for an API without a stream)."""
    return STREAM_PARSERS.get(api, StreamParser)


def read_embeddings(body: bytes, tally: StreamTally, at: float) -> tuple[str, str] | None:
    """An embeddings answer (its whole body, its last byte arrived at `at`) into `tally`: None
    when it carries at least one embedding, else ``(failure class, message)``. The server's
    ``usage.prompt_tokens`` is the input's length; an embedding generates no tokens, so
    ``completion_tokens`` is 0 wherever the usage was stated."""
    try:
        obj = _loads(body)
    except ValueError:
        text = body[:200].decode("utf-8", "replace")
        return "empty_reply", f"the answer is not JSON: {text}"
    if type(obj) is not dict:
        return "empty_reply", "the answer is not a JSON object with data[].embedding"
    if obj.get("error"):
        tally.stream_error = _error(obj["error"]).replace("in stream", "in the answer", 1)
        return "stream_error", tally.stream_error
    tally.done_at = at
    usage = obj.get("usage")
    prompt = None
    if type(usage) is dict:
        prompt = _count(usage.get("prompt_tokens"))
        if prompt is None:
            prompt = _count(usage.get("input_tokens"))
    if prompt is not None:
        tally.prompt_tokens = prompt
        tally.completion_tokens = 0
    data = obj.get("data")
    vectors = [item for item in data if type(item) is dict
               and (type(item.get("embedding")) in (list, str)) and item["embedding"]
               ] if type(data) is list else []
    if not vectors:
        return "empty_reply", "the answer has no data[].embedding"
    tally.finish_reason = "stop"
    return None
