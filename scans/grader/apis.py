"""The APIs a scan can speak (``--api``): each one's path, request body and headers. Their
streams are read by ``stream_apis`` (chat's by ``stream``).

Every body is built from the chat messages the workload makes (``load_bodies``), so the
prompt, its nonce, the shared prefix, a conversation's history and the reply's cap are the
same whatever the API; only their shape differs:

* **chat** ``POST /chat/completions``: ``messages``, ``max_tokens``, a stream ending with its
  usage (``stream_options.include_usage``).
* **completions** ``POST /completions``: the messages' text as ``prompt`` (the shared prefix
  first, then the nonce), ``max_tokens``, the same stream options. A conversation is one
  transcript (``transcript``): the system prompt, then ``User:`` and ``Assistant:`` turns,
  ending at ``Assistant:`` so the reply continues it, and each reply resent exactly where it
  was generated (a server that caches generated tokens finds it).
* **responses** ``POST /responses``: the messages as ``input`` items (the shared prefix in the
  first one, or a conversation's system item, where chat has it: ``instructions`` would be
  one more field for a server to place), ``max_output_tokens``, a stream. A reply is resent
  as ``{"role": "assistant", "content": ...}``, a tool call as a ``function_call`` item and
  its result as a ``function_call_output``. Tools are ``{"type": "function", "name",
  "parameters"}``; a schema is ``text.format`` ``{"type": "json_schema", ...}``.
* **messages** ``POST /messages`` (Anthropic): ``max_tokens`` (required there), the system
  messages' text as ``system`` (the shared prefix goes there: ``prompt_messages``) and the
  others as ``messages``, user and assistant alternating (tool results and the next user
  turn share one user message), a stream; the key goes in ``x-api-key`` with
  ``anthropic-version``, not in ``Authorization``. Tools are ``{"name", "description",
  "input_schema"}`` (``tool_choice`` ``auto`` or ``any``), a tool call is resent as a
  ``tool_use`` block and its result as a ``tool_result``; there is no ``response_format``
  (the plan refuses ``--json-schema``).

Tools, ``tool_choice`` and ``response_format`` come in chat's shape (``agent_load``), as does a
conversation's history; ``request_body`` and ``shape_fields`` turn them into each API's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .openai_chat import chat_request_body

__all__ = ["ANTHROPIC_VERSION", "APIS", "API_PATHS", "MAX_TOKENS_FIELDS", "STREAMED_APIS",
           "STRUCTURED_OUTPUT_APIS",
           "auth_headers", "probe_max_tokens", "prompt_messages", "request_body",
           "shape_fields", "transcript"]

#: The API names ``--api`` takes, chat first (the default).
APIS = ("chat", "completions", "responses", "messages", "embeddings")
#: Those answered with a stream (each read by its parser in ``stream_apis``).
STREAMED_APIS = ("chat", "completions", "responses", "messages")
API_PATHS = {"chat": "chat/completions", "completions": "completions",
             "responses": "responses", "messages": "messages", "embeddings": "embeddings"}
#: The ``anthropic-version`` header sent with the Messages API.
ANTHROPIC_VERSION = "2023-06-01"
#: Those that can ask for a reply to a JSON schema (chat's ``response_format``, the Responses
#: API's ``text.format``).
STRUCTURED_OUTPUT_APIS = ("chat", "responses")
#: The field that caps a reply's length, where it is not ``max_tokens``.
MAX_TOKENS_FIELDS = {"responses": "max_output_tokens"}
#: The smallest cap an API accepts, where it is above 1: OpenAI's Responses API refuses a
#: ``max_output_tokens`` below 16, so a sizing probe asks for that many there.
_SMALLEST_CAP = {"responses": 16}
#: A completions transcript's speakers.
USER_LABEL, ASSISTANT_LABEL = "User:", "Assistant:"


def probe_max_tokens(api: str) -> int:
    """The reply cap of a probe that only wants the prompt's count."""
    return _SMALLEST_CAP.get(api, 1)


def _text(content: object) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content
                       if isinstance(part, dict) and part.get("type") in ("text", "input_text"))
    return "" if content is None else str(content)


def prompt_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The messages' text, one after another (an API that takes a prompt, not messages)."""
    return "\n\n".join(_text(m.get("content")) for m in messages)


def transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """A conversation as one completions prompt: the system messages' text first, then each
    user turn after ``User:`` and each reply after ``Assistant:``, ending at ``Assistant:``.
    A reply follows its label with nothing between, as it was generated there."""
    parts: list[str] = []
    for message in messages:
        role, text = message.get("role"), _text(message.get("content"))
        if role == "assistant":
            parts[-1:] = [f"{parts[-1] if parts else ''}{text}"]
        elif role == "system":
            parts.append(text)
        else:
            parts.append(f"{USER_LABEL} {text}\n\n{ASSISTANT_LABEL}")
    return "\n\n".join(parts)


def prompt_messages(api: str, prefix: str, rest: str) -> list[dict[str, Any]]:
    """One request's messages: the shared `prefix` (or "") and the rest of the prompt, its
    nonce first. The prefix starts the user message, where every request repeats it before its
    nonce; with the Messages API it is the ``system`` prompt instead, where Anthropic's clients
    keep what every request shares."""
    if api == "messages" and prefix:
        return [{"role": "system", "content": prefix.rstrip("\n")},
                {"role": "user", "content": rest}]
    return [{"role": "user", "content": f"{prefix}{rest}"}]


def _responses_items(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat message as Responses ``input`` items: text parts are ``input_text`` (a reply's
    ``output_text``); an assistant's tool calls are ``function_call`` items after its text, a
    tool message a ``function_call_output``."""
    if message.get("role") == "tool":
        return [{"type": "function_call_output", "call_id": message.get("tool_call_id"),
                 "output": _text(message.get("content"))}]
    item = {k: v for k, v in message.items() if k != "tool_calls"}
    content = item.get("content")
    if isinstance(content, list):
        kind = "output_text" if item.get("role") == "assistant" else "input_text"
        item["content"] = [{**part, "type": kind} if isinstance(part, dict)
                           and part.get("type") == "text" else part for part in content]
    calls = [{"type": "function_call", "call_id": call["id"],
              "name": call["function"]["name"], "arguments": call["function"]["arguments"]}
             for call in message.get("tool_calls") or ()]
    return ([item] if content or not calls else []) + calls


def _tool_input(arguments: str) -> dict:
    """A tool call's arguments as the Messages API's ``input`` object ({} for arguments that
    are not one: the call is resent, its flaw was already judged)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _anthropic_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The non-system chat messages as Anthropic's: an assistant's tool calls as ``tool_use``
    blocks after its text, tool messages as ``tool_result`` blocks of a user message, an empty
    reply left out, and consecutive user messages joined into one, so user and assistant
    alternate."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            continue
        if (role == "assistant" and not message.get("tool_calls")
                and not _text(message.get("content"))):
            continue  # Anthropic refuses an empty assistant turn: the user turns around it join
        if role == "tool":
            blocks: list[dict[str, Any]] = [{"type": "tool_result",
                                             "tool_use_id": message.get("tool_call_id"),
                                             "content": _text(message.get("content"))}]
            role = "user"
        elif role == "assistant" and message.get("tool_calls"):
            text = _text(message.get("content"))
            blocks = [{"type": "text", "text": text}] if text else []
            blocks += [{"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                        "input": _tool_input(call["function"]["arguments"])}
                       for call in message["tool_calls"]]
        else:
            if out and out[-1]["role"] == role == "user":
                content = message.get("content")
                blocks = (content if isinstance(content, list)
                          else [{"type": "text", "text": _text(content)}])
            else:
                out.append(dict(message))
                continue
        if out and out[-1]["role"] == role:
            previous = out[-1]["content"]
            if not isinstance(previous, list):
                previous = [{"type": "text", "text": _text(previous)}]
            out[-1] = {"role": role, "content": [*previous, *blocks]}
        else:
            out.append({"role": role, "content": blocks})
    return out


def shape_fields(api: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Chat's ``tools``, ``tool_choice`` and ``response_format`` (``agent_load``) as `api`
    declares them; any other field as it is."""
    if api not in ("responses", "messages"):
        return dict(fields)
    out = {k: v for k, v in fields.items()
           if k not in ("tools", "tool_choice", "response_format")}
    functions = [t["function"] for t in fields.get("tools") or ()]
    choice = fields.get("tool_choice")
    if api == "responses":
        if functions:
            out["tools"] = [{"type": "function", "name": f["name"],
                             **{k: f[k] for k in ("description", "parameters") if k in f}}
                            for f in functions]
        if choice is not None:
            out["tool_choice"] = choice
        response_format = fields.get("response_format")
        if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
            out["text"] = {"format": {"type": "json_schema",
                                      **response_format.get("json_schema", {})}}
        return out
    if functions:
        out["tools"] = [{"name": f["name"], "description": f.get("description", ""),
                         "input_schema": f.get("parameters", {"type": "object"})}
                        for f in functions]
    if choice is not None:
        out["tool_choice"] = {"type": "any" if choice == "required" else str(choice)}
    return out


def request_body(api: str, model: str, messages: Sequence[Mapping[str, Any]],
                 max_tokens: int, *, conversation: bool = False) -> dict[str, Any]:
    """The body of one request of `api` asking for at most `max_tokens` tokens;
    `conversation`: `messages` are a conversation's turn (completions sends a transcript)."""
    if api == "completions":
        prompt = transcript(messages) if conversation else prompt_text(messages)
        return {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                "stream": True, "stream_options": {"include_usage": True}}
    if api == "responses":
        return {"model": model, "input": [i for m in messages for i in _responses_items(m)],
                "max_output_tokens": max_tokens, "stream": True}
    if api == "embeddings":
        return {"model": model, "input": prompt_text(messages)}
    if api == "messages":
        system = [m for m in messages if m.get("role") == "system"]
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True,
                                "messages": _anthropic_messages(messages)}
        if system:
            body["system"] = prompt_text(system)
        return body
    return chat_request_body(model, messages, max_tokens)


def auth_headers(api: str, api_key: str | None) -> dict[str, str]:
    """The headers that carry the key (and the API's version, where it needs one)."""
    if api == "messages":
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers
    return {"authorization": f"Bearer {api_key}"} if api_key else {}
