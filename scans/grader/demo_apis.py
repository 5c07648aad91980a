"""The demo server's other APIs (``tokvera target``): each one's request read into what the
target generates, and its wire format written as the real service writes it, so a scan with
``--api`` meets the bytes a real server sends.

* ``POST /completions``: ``prompt`` in; SSE chunks with ``choices[0].text``, a
  ``finish_reason``, the usage chunk when ``stream_options.include_usage``, ``[DONE]``.
* ``POST /responses``: ``input`` (a string or messages) and ``max_output_tokens`` in; the
  events ``response.created``, ``response.output_text.delta`` (``response.reasoning_text.delta``
  while thinking), ``response.completed`` (``response.incomplete`` at the limit) with usage.
* ``POST /messages`` (Anthropic): ``max_tokens`` required, ``anthropic-version`` header
  required; ``message_start`` (input tokens), ``content_block_start``,
  ``content_block_delta`` (``thinking_delta`` then ``text_delta``), ``content_block_stop``,
  ``message_delta`` (stop reason, ``usage.output_tokens``), ``message_stop``.

* ``POST /embeddings``: ``input`` (a string or a list of them) in; one JSON answer, a
  ``data[]`` entry with an ``embedding`` per input and ``usage.prompt_tokens``, after the
  target's ``ttft_ms`` (the whole answer's latency: there is no stream).

Each event is ``(event name or None, data)``; the server writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .demo_model import render_chat, tokenize

__all__ = ["EMBEDDING_DIMENSIONS", "ApiRequest", "ApiRequestError", "embeddings_answer",
           "embeddings_inputs", "end_events", "error_body", "read_request", "start_events",
           "token_events"]

#: The length of the demo's embeddings.
EMBEDDING_DIMENSIONS = 64

Event = tuple[str | None, str]


class ApiRequestError(ValueError):
    """A request the API refuses: (status, the API's own error body)."""

    def __init__(self, api: str, message: str) -> None:
        super().__init__(message)
        self.body = error_body(api, message)


def error_body(api: str, message: str) -> bytes:
    if api == "messages":
        return json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                      "message": message}}).encode()
    return json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode()


@dataclass(frozen=True)
class ApiRequest:
    api: str
    model: str
    prompt_tokens: list[str]
    max_tokens: int | None
    stream: bool
    include_usage: bool
    #: vLLM's length parameters (the Messages API refuses them, as Anthropic's does).
    ignore_eos: bool = False
    min_tokens: int | None = None

    def wanted(self, natural: int) -> int:
        """How many tokens the reply runs to before max_tokens: `natural` unless
        ignore_eos (no natural end) or min_tokens says more."""
        wanted = 1_000_000 if self.ignore_eos and self.max_tokens else natural
        return max(wanted, self.min_tokens or 0)


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


#: The fields Anthropic's Messages API accepts (it refuses any other with 400).
MESSAGES_FIELDS = frozenset({"model", "messages", "max_tokens", "system", "stream", "metadata",
                             "stop_sequences", "temperature", "top_p", "top_k", "tools",
                             "tool_choice", "thinking", "service_tier"})


def read_request(api: str, req: dict, headers: dict[str, str], model_id: str) -> ApiRequest:
    """What `req` asks of `api`; ApiRequestError for what the API would refuse."""
    model = str(req.get("model") or model_id)
    stream = bool(req.get("stream"))
    ignore_eos, min_tokens = req.get("ignore_eos") is True, _limit(req.get("min_tokens"))
    if api == "completions":
        prompt = req.get("prompt")
        if not isinstance(prompt, str):
            raise ApiRequestError(api, "prompt must be a string")
        return ApiRequest(api, model, tokenize(prompt), _limit(req.get("max_tokens")), stream,
                          bool((req.get("stream_options") or {}).get("include_usage")),
                          ignore_eos, min_tokens)
    if api == "responses":
        given = req.get("input")
        text = given if isinstance(given, str) else render_chat(given)
        return ApiRequest(api, model, tokenize(text), _limit(req.get("max_output_tokens")),
                          stream, True, ignore_eos, min_tokens)
    extra = sorted(set(req) - MESSAGES_FIELDS)
    if extra:
        raise ApiRequestError(api, f"{extra[0]}: Extra inputs are not permitted")
    if "anthropic-version" not in headers:
        raise ApiRequestError(api, "anthropic-version: header is required")
    limit = _limit(req.get("max_tokens"))
    if limit is None:
        raise ApiRequestError(api, "max_tokens: Field required")
    messages = req.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiRequestError(api, "messages: Field required")
    system = req.get("system")
    if isinstance(system, str) and system:
        messages = [{"role": "system", "content": system}, *messages]
    return ApiRequest(api, model, tokenize(render_chat(messages)), limit, stream, True)


def _limit(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def start_events(request: ApiRequest, ident: str, prompt_tokens: int,
                 cached: int | None) -> list[Event]:
    """What comes before the first token."""
    if request.api == "responses":
        return [("response.created", _compact({
            "type": "response.created", "sequence_number": 0,
            "response": {"id": ident, "object": "response", "status": "in_progress",
                         "model": request.model, "output": []}}))]
    if request.api == "messages":
        usage = {"input_tokens": prompt_tokens - (cached or 0), "output_tokens": 1,
                 "cache_read_input_tokens": cached or 0}
        return [("message_start", _compact({
            "type": "message_start",
            "message": {"id": ident, "type": "message", "role": "assistant", "content": [],
                        "model": request.model, "stop_reason": None, "usage": usage}})),
                ("ping", '{"type":"ping"}')]
    return []


def token_events(request: ApiRequest, ident: str, index: int, word: str,
                 n_thinking: int) -> list[Event]:
    """The events of token `index`; the first `n_thinking` tokens are thinking."""
    thinking = index < n_thinking
    if request.api == "responses":
        kind = "response.reasoning_text.delta" if thinking else "response.output_text.delta"
        return [(kind, _compact({"type": kind, "item_id": f"msg_{ident}", "output_index": 0,
                                 "content_index": 0, "delta": word}))]
    if request.api == "messages":
        block = 0 if thinking else _text_block(n_thinking)
        events: list[Event] = []
        if index == n_thinking and n_thinking:  # the thinking block ends, the text begins
            events.append(("content_block_stop", '{"type":"content_block_stop","index":0}'))
        if index in (0, n_thinking):
            start = ({"type": "thinking", "thinking": ""} if thinking
                     else {"type": "text", "text": ""})
            events.append(("content_block_start", _compact(
                {"type": "content_block_start", "index": block, "content_block": start})))
        delta = ({"type": "thinking_delta", "thinking": word} if thinking
                 else {"type": "text_delta", "text": word})
        events.append(("content_block_delta", _compact(
            {"type": "content_block_delta", "index": block, "delta": delta})))
        return events
    return [(None, _compact({"id": ident, "object": "text_completion", "model": request.model,
                             "choices": [{"index": 0, "text": word, "finish_reason": None}]}))]


def _text_block(n_thinking: int) -> int:
    return 1 if n_thinking else 0


def end_events(request: ApiRequest, ident: str, finish: str, usage: dict) -> list[Event]:
    """What comes after the last token: the finish, the usage, the end. `finish` is "stop" or
    "length"; `usage` has ``prompt_tokens``, ``completion_tokens``, ``cached``,
    ``reasoning``."""
    prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
    cached, reasoning = usage["cached"], usage["reasoning"]
    if request.api == "responses":
        kind = "response.completed" if finish == "stop" else "response.incomplete"
        response = {"id": ident, "object": "response",
                    "status": "completed" if finish == "stop" else "incomplete",
                    "model": request.model,
                    "incomplete_details": (None if finish == "stop"
                                           else {"reason": "max_output_tokens"}),
                    "usage": {"input_tokens": prompt, "output_tokens": completion,
                              "total_tokens": prompt + completion,
                              "input_tokens_details": {"cached_tokens": cached or 0},
                              "output_tokens_details": {"reasoning_tokens": reasoning}}}
        return [(kind, _compact({"type": kind, "response": response}))]
    if request.api == "messages":
        reason = "end_turn" if finish == "stop" else "max_tokens"
        block = _text_block(reasoning) if completion > reasoning else 0
        stop = _compact({"type": "content_block_stop", "index": block})
        return [("content_block_stop", stop),
                ("message_delta", _compact({"type": "message_delta",
                                            "delta": {"stop_reason": reason,
                                                      "stop_sequence": None},
                                            "usage": {"output_tokens": completion}})),
                ("message_stop", '{"type":"message_stop"}')]
    events: list[Event] = [(None, _compact({
        "id": ident, "object": "text_completion", "model": request.model,
        "choices": [{"index": 0, "text": "", "finish_reason": finish}]}))]
    if request.include_usage:
        events.append((None, _compact({
            "id": ident, "object": "text_completion", "model": request.model, "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}})))
    events.append((None, "[DONE]"))
    return events


def embeddings_inputs(req: dict) -> list[str]:
    """The texts an embeddings request asks about; ApiRequestError when it names none."""
    given = req.get("input")
    inputs = [given] if isinstance(given, str) else given
    if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) for t in inputs):
        raise ApiRequestError("embeddings", "input must be a string or a list of strings")
    return inputs


def embeddings_answer(model: str, inputs: list[str], prompt_tokens: int) -> bytes:
    """OpenAI's embeddings answer: one vector per input (derived from its text, so the same
    text always gets the same vector) and the usage."""
    data = []
    for index, text in enumerate(inputs):
        seed = sum(text.encode()) or 1
        data.append({"object": "embedding", "index": index,
                     "embedding": [round(((seed * (i + 7)) % 1000) / 1000.0 - 0.5, 4)
                                   for i in range(EMBEDDING_DIMENSIONS)]})
    return _compact({"object": "list", "model": model, "data": data,
                     "usage": {"prompt_tokens": prompt_tokens,
                               "total_tokens": prompt_tokens}}).encode()
