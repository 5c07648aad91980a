"""A streaming OpenAI chat completion, both ends of it: the request body, and reading the SSE
answer into ``stream.StreamParser``.

One of each for the grader (``runner``) and the host agent (``benchmarks.agent``), so a network
job is asked and measured the way a scan's request is. Socket I/O stays with the callers (which
client, which deadline, what a failure is called); this module only turns network reads into
parsed chunks, stamped with the moment each read returned.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterable, Callable, Mapping, Sequence
from typing import Any

from .sse import SSEDecoder
from .stream import StreamParser

__all__ = ["chat_request_body", "encode_body", "read_sse", "user_message"]


def user_message(prompt: str) -> list[dict[str, str]]:
    """`prompt` as the whole conversation: one user message."""
    return [{"role": "user", "content": prompt}]


def chat_request_body(model: str, messages: Sequence[Mapping[str, Any]],
                      max_tokens: int) -> dict[str, Any]:
    """The body of ``POST {base}/chat/completions``: a stream that ends with its usage
    (``stream_options.include_usage``), `max_tokens` at most, the server's default sampling
    (no temperature is sent)."""
    return {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def encode_body(body: Mapping[str, Any]) -> bytes:
    """`body` as the grader sends it: compact JSON, ASCII only."""
    return json.dumps(body, separators=(",", ":")).encode()


async def read_sse(pieces: AsyncIterable[bytes], decoder: SSEDecoder, parser: StreamParser,
                   on_done: Callable[[], None] | None = None) -> None:
    """Feed every network read to `decoder` and the events it completes to `parser`, stamped
    with the moment the read returned.

    Stops early at an oversized event (``decoder.oversized``) or an error object in the stream
    (``parser.tally.stream_error``). At ``[DONE]``: stops too when `on_done` is None (the outcome
    is known; the end of the body is not awaited), else calls ``on_done()`` once and reads on.
    When the body ends, the decoder's last event is flushed into the parser. Errors of the
    transport (a body that broke off) propagate."""
    perf = time.perf_counter
    feed = decoder.feed
    parse = parser.feed
    tally = parser.tally
    waiting_for_done = True
    async for piece in pieces:
        t = perf()
        events = feed(piece)
        if decoder.oversized:
            return
        if events:
            parse(events, t)
            if tally.stream_error is not None:
                return
            if waiting_for_done and tally.done_at is not None:
                if on_done is None:
                    return
                waiting_for_done = False
                on_done()
    parse(decoder.flush(), perf())
