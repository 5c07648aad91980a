"""Measuring one job: a streaming chat completion against the host's own upstream server, read by
the grader's stream parser (scans/grader/stream.py), so a job's figures mean what a scan's do."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from scans.grader.openai_chat import chat_request_body, read_sse
from scans.grader.sse import SSEDecoder
from scans.grader.stream import StreamParser, classify_end


@dataclass(frozen=True)
class Outcome:
    """What one upstream run measured. `reason` is set when the job must be reported failed.

    `ttft_ms` is the time to the first output token of any kind (thinking included), the same
    time the grader grades; `first_answer_ms` the time to the first answer token. Both from
    the moment the request body was written."""

    ttft_ms: float | None
    completion_tokens: int
    elapsed_ms: float
    content: str
    finish_reason: str | None
    usage_reported: bool
    reason: str | None = None
    first_answer_ms: float | None = None
    thinking_chunks: int = 0
    reasoning_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


async def run_upstream(client: httpx.AsyncClient, upstream: str, model: str, job: dict,
                       timeout_s: float = 300.0) -> Outcome:
    """Stream one chat completion and measure it with the grader's stream parser
    (``scans.grader.stream``), so a job's figures mean what a scan's do. The body is the
    grader's (``scans.grader.openai_chat.chat_request_body``) with the job's messages and
    max_tokens. Never raises for upstream trouble."""
    body = chat_request_body(model, job["messages"], job["max_tokens"])
    url = upstream.rstrip("/") + "/chat/completions"
    parser = StreamParser(keep_text=True)
    started = time.perf_counter()
    written: list[float] = []

    async def trace(name: str, info: dict) -> None:
        if name == "http11.send_request_body.complete":
            written.append(time.perf_counter())

    try:
        async with asyncio.timeout(timeout_s):
            reason = await _read_upstream(client, url, body, parser, trace)
    except TimeoutError:
        reason = f"upstream did not finish within {timeout_s:.0f} s"
    except httpx.HTTPError as exc:
        reason = f"upstream error: {type(exc).__name__}: {exc}"
    return _outcome(parser, started, written[0] if written else started, reason)


async def _read_upstream(client: httpx.AsyncClient, url: str, body: dict,
                         parser: StreamParser, trace: Callable) -> str | None:
    """Read the stream into `parser` (``scans.grader.openai_chat.read_sse``, as the grader
    does); the failure reason, or None for a reply."""
    async with client.stream("POST", url, json=body, extensions={"trace": trace}) as response:
        if response.status_code != 200:
            await response.aread()
            return f"upstream answered HTTP {response.status_code}"
        sse = "event-stream" in response.headers.get("content-type", "")
        decoder = SSEDecoder()
        # Up to [DONE] or an error in the stream: the outcome is then known, and the end of
        # the body is not awaited.
        await read_sse(response.aiter_raw(), decoder, parser)
        if decoder.oversized:
            return f"upstream sent an SSE event over {decoder.max_line} bytes"
    failure = classify_end(parser.tally, events_seen=decoder.events_seen, sse=sse)
    return None if failure is None else f"{failure[0]}: {failure[1]}"


def _outcome(parser: StreamParser, started: float, written: float,
             reason: str | None) -> Outcome:
    tally = parser.tally

    def since_written_ms(moment: float | None) -> float | None:
        return None if moment is None else max(0.0, (moment - written) * 1000)

    return Outcome(
        ttft_ms=since_written_ms(tally.first_output_at),
        completion_tokens=tally.output_units,
        elapsed_ms=(time.perf_counter() - started) * 1000,
        content="".join(parser.answer_text or ()),
        finish_reason=tally.finish_reason,
        usage_reported=tally.reported_usage,
        reason=None if reason is None else reason[:180],
        first_answer_ms=since_written_ms(tally.first_answer_at),
        thinking_chunks=tally.thinking_chunks,
        reasoning_tokens=tally.reasoning_tokens,
    )
