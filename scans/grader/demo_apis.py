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

Agent-shaped requests, as chat's are answered (demo_server): tools declared (the Responses
API's ``{"type": "function", "name", "parameters"}``, the Messages API's ``{"name",
"input_schema"}``) get one streamed tool call, a Responses ``text.format`` ``json_schema`` a
JSON value. A Responses tool call is ``response.output_item.added`` (a ``function_call``
item), ``response.function_call_arguments.delta`` per token, then ``.done`` and
``response.output_item.done``; a Messages one is a ``tool_use`` block, ``input_json_delta``
per token, stop reason ``tool_use``. A history resent with tool calls and results
(``function_call`` / ``function_call_output`` items; ``tool_use`` / ``tool_result`` blocks) is
read back into chat's messages (``chat_messages``), so the chat template renders, counts and
caches it as it does chat's.

Each event is ``(event name or None, data)``; the server writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .demo_model import render_chat, tokenize

__all__ = ["EMBEDDING_DIMENSIONS", "ApiRequest", "ApiRequestError", "ToolCall", "chat_messages",
           "chat_shape", "embeddings_answer", "embeddings_inputs", "end_events", "error_body",
           "read_request", "shaped_events", "start_events", "token_events"]

#: The length of the demo's embeddings.
EMBEDDING_DIMENSIONS = 64

Event = tuple[str | None, str]
#: A streamed tool call: (call id, name, arguments as streamed).
ToolCall = tuple[str, str, str]


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
        text = given if isinstance(given, str) else render_chat(chat_messages(api, given))
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
    chat = chat_messages(api, messages)
    if isinstance(system, str) and system:
        chat = [{"role": "system", "content": system}, *chat]
    return ApiRequest(api, model, tokenize(render_chat(chat)), limit, stream, True)


def _call(ident: object, name: object, arguments: str) -> dict:
    return {"id": ident, "type": "function",
            "function": {"name": str(name or ""), "arguments": arguments}}


def chat_messages(api: str, given: object) -> list[dict]:
    """A Responses ``input`` list or a Messages ``messages`` list as chat's messages: tool calls
    as an assistant's ``tool_calls``, tool results as ``tool`` messages."""
    out: list[dict] = []
    for item in given if isinstance(given, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if api == "responses" and kind == "function_call":
            call = _call(item.get("call_id"), item.get("name"), str(item.get("arguments") or ""))
            if out and out[-1].get("role") == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif api == "responses" and kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item.get("call_id"),
                        "content": str(item.get("output") or "")})
        elif api == "messages" and isinstance(item.get("content"), list):
            out.extend(_anthropic_to_chat(item))
        else:
            out.append(item)
    return out


def _anthropic_to_chat(message: dict) -> list[dict]:
    """One Anthropic message whose content is blocks: its text, its ``tool_use`` blocks as
    tool calls, its ``tool_result`` blocks as ``tool`` messages (before the user's text)."""
    text, calls, results = "", [], []
    for block in message["content"]:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            text += str(block.get("text") or "")
        elif block.get("type") == "tool_use":
            calls.append(_call(block.get("id"), block.get("name"), json.dumps(block.get("input"))))
        elif block.get("type") == "tool_result":
            results.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                            "content": str(block.get("content") or "")})
    role = str(message.get("role") or "user")
    if calls:
        return [{"role": role, "content": text or None, "tool_calls": calls}]
    return [*results, *([{"role": role, "content": text}] if text or not results else [])]


def chat_shape(api: str, req: dict) -> dict:
    """What a request of `api` declares, in chat's fields (``tools``, ``tool_choice``,
    ``response_format``), for the target's agent-shaped replies."""
    tools = req.get("tools")
    choice = req.get("tool_choice")
    shape: dict[str, Any] = {}
    if isinstance(tools, list) and tools:
        if api == "messages":
            shape["tools"] = [{"type": "function", "function": {
                "name": t.get("name"), "parameters": t.get("input_schema")}}
                for t in tools if isinstance(t, dict)]
            kind = choice.get("type") if isinstance(choice, dict) else None
            shape["tool_choice"] = ({"function": {"name": choice.get("name")}}
                                    if kind == "tool" and isinstance(choice, dict)
                                    else {"any": "required"}.get(str(kind), kind))
        else:
            shape["tools"] = [{"type": "function", "function": {
                "name": t.get("name"), "parameters": t.get("parameters")}}
                for t in tools if isinstance(t, dict)]
            shape["tool_choice"] = choice
    text = req.get("text")
    form = text.get("format") if isinstance(text, dict) else None
    if api == "responses" and isinstance(form, dict) and form.get("type") == "json_schema":
        shape["response_format"] = {"type": "json_schema", "json_schema": {
            "name": form.get("name"), "schema": form.get("schema")}}
    return shape


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


def shaped_events(request: ApiRequest, ident: str, index: int, delta_json: str) -> list[Event]:
    """The events of an agent-shaped reply's token `index`, given as chat's delta (JSON, as
    demo_server makes them): a tool call's start or arguments, or a piece of JSON text."""
    delta = json.loads(delta_json)
    calls = delta.get("tool_calls")
    if not calls:
        return token_events(request, ident, index, str(delta.get("content") or ""), 0)
    call = calls[0]
    function = call.get("function") or {}
    arguments = str(function.get("arguments") or "")
    if request.api == "responses":
        if function.get("name"):
            item = {"type": "function_call", "id": f"fc_{ident}", "call_id": call.get("id"),
                    "name": function["name"], "arguments": "", "status": "in_progress"}
            return [("response.output_item.added", _compact(
                {"type": "response.output_item.added", "output_index": 0, "item": item}))]
        kind = "response.function_call_arguments.delta"
        return [(kind, _compact({"type": kind, "item_id": f"fc_{ident}", "output_index": 0,
                                 "delta": arguments}))]
    if function.get("name"):
        block = {"type": "tool_use", "id": f"toolu_{call.get('id')}", "name": function["name"],
                 "input": {}}
        return [("content_block_start", _compact(
            {"type": "content_block_start", "index": 0, "content_block": block}))]
    return [("content_block_delta", _compact(
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": arguments}}))]


def _text_block(n_thinking: int) -> int:
    return 1 if n_thinking else 0


def end_events(request: ApiRequest, ident: str, finish: str, usage: dict,
               call: ToolCall | None = None) -> list[Event]:
    """What comes after the last token: the finish, the usage, the end. `finish` is "stop",
    "length" or "tool_calls" (`call` the tool call streamed); `usage` has ``prompt_tokens``,
    ``completion_tokens``, ``cached``, ``reasoning``."""
    prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
    cached, reasoning = usage["cached"], usage["reasoning"]
    if request.api == "responses":
        done = finish != "length"
        kind = "response.completed" if done else "response.incomplete"
        events: list[Event] = []
        output: list[dict] = []
        if call is not None:
            item = {"type": "function_call", "id": f"fc_{ident}", "call_id": call[0],
                    "name": call[1], "arguments": call[2],
                    "status": "completed" if done else "incomplete"}
            events += [("response.function_call_arguments.done", _compact({
                "type": "response.function_call_arguments.done", "item_id": f"fc_{ident}",
                "output_index": 0, "arguments": call[2]})),
                       ("response.output_item.done", _compact({
                           "type": "response.output_item.done", "output_index": 0,
                           "item": item}))]
            output.append(item)
        response = {"id": ident, "object": "response",
                    "status": "completed" if done else "incomplete",
                    "model": request.model, "output": output,
                    "incomplete_details": (None if done
                                           else {"reason": "max_output_tokens"}),
                    "usage": {"input_tokens": prompt, "output_tokens": completion,
                              "total_tokens": prompt + completion,
                              "input_tokens_details": {"cached_tokens": cached or 0},
                              "output_tokens_details": {"reasoning_tokens": reasoning}}}
        return [*events, (kind, _compact({"type": kind, "response": response}))]
    if request.api == "messages":
        reason = {"stop": "end_turn", "tool_calls": "tool_use"}.get(finish, "max_tokens")
        block = _text_block(reasoning) if completion > reasoning else 0
        stop = _compact({"type": "content_block_stop", "index": block})
        return [("content_block_stop", stop),
                ("message_delta", _compact({"type": "message_delta",
                                            "delta": {"stop_reason": reason,
                                                      "stop_sequence": None},
                                            "usage": {"output_tokens": completion}})),
                ("message_stop", '{"type":"message_stop"}')]
    events = [(None, _compact({
        "id": ident, "object": "text_completion", "model": request.model,
        "choices": [{"index": 0, "text": "", "finish_reason": finish}]}))]
    if request.include_usage:
        events.append((None, _compact({
            "id": ident, "object": "text_completion", "model": request.model, "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": cached or 0}}})))
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
