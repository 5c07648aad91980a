"""The APIs a scan can speak (``--api``): each one's path, request body and headers. Their
streams are read by ``stream_apis`` (chat's by ``stream``).

Every body is built from the chat messages the workload makes (``load_bodies``), so the
prompt, its nonce and the reply's cap are the same whatever the API:

* **chat** ``POST /chat/completions``: ``messages``, ``max_tokens``, a stream ending with its
  usage (``stream_options.include_usage``).
* **completions** ``POST /completions``: the messages' text as ``prompt``, ``max_tokens``, the
  same stream options.
* **responses** ``POST /responses``: the messages as ``input``, ``max_output_tokens``, a stream.
* **messages** ``POST /messages`` (Anthropic): ``max_tokens`` (required there), the system
  messages' text as ``system`` and the others as ``messages``, a stream; the key goes in
  ``x-api-key`` with ``anthropic-version``, not in ``Authorization``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .openai_chat import chat_request_body

__all__ = ["ANTHROPIC_VERSION", "APIS", "API_PATHS", "STREAMED_APIS", "auth_headers",
           "request_body"]

#: The API names ``--api`` takes, chat first (the default).
APIS = ("chat", "completions", "responses", "messages", "embeddings")
#: Those answered with a stream (each read by its parser in ``stream_apis``).
STREAMED_APIS = ("chat", "completions", "responses", "messages")
API_PATHS = {"chat": "chat/completions", "completions": "completions",
             "responses": "responses", "messages": "messages", "embeddings": "embeddings"}
#: The ``anthropic-version`` header sent with the Messages API.
ANTHROPIC_VERSION = "2023-06-01"


def _text(content: object) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content
                       if isinstance(part, dict) and part.get("type") == "text")
    return "" if content is None else str(content)


def prompt_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The messages' text, one after another (an API that takes a prompt, not messages)."""
    return "\n\n".join(_text(m.get("content")) for m in messages)


def request_body(api: str, model: str, messages: Sequence[Mapping[str, Any]],
                 max_tokens: int) -> dict[str, Any]:
    """The body of one request of `api` asking for at most `max_tokens` tokens."""
    if api == "completions":
        return {"model": model, "prompt": prompt_text(messages), "max_tokens": max_tokens,
                "stream": True, "stream_options": {"include_usage": True}}
    if api == "responses":
        return {"model": model, "input": list(messages), "max_output_tokens": max_tokens,
                "stream": True}
    if api == "embeddings":
        return {"model": model, "input": prompt_text(messages)}
    if api == "messages":
        system = [m for m in messages if m.get("role") == "system"]
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True,
                                "messages": [m for m in messages if m.get("role") != "system"]}
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
