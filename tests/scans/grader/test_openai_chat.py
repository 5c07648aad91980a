"""One chat-completions request body and one SSE reader (scans.grader.openai_chat), shared by
the scanner and the host agent: both send the same fields, and both read a stream into the
parser the same way. Real loopback servers only."""

from __future__ import annotations

import asyncio
import json

import httpx

from benchmarks import agent
from scans.grader.openai_chat import chat_request_body, encode_body, read_sse, user_message
from scans.grader.sse import SSEDecoder
from scans.grader.stream import StreamParser
from tests.helpers.servers import (
    END_CHUNKS,
    SSE_HEAD,
    content_event,
    done_event,
    good_stream,
    http_chunk,
    raw_server,
    read_request,
    scan,
)


def _recording_server(bodies: list[dict]):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head, body = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            if b"/chat/completions" in head.split(b"\r\n")[0]:
                bodies.append(body)
            writer.write(SSE_HEAD + http_chunk(good_stream(3)) + END_CHUNKS)
            await writer.drain()

    return handler


def test_the_scanner_and_the_host_agent_send_one_body_but_for_its_messages():
    scanned: list[dict] = []
    with raw_server(_recording_server(scanned)) as port:
        measurement = scan(port, requests=1)  # the preflight's probe, then one request
    served: list[dict] = []
    job = {"messages": [{"role": "system", "content": "be brief"},
                        {"role": "user", "content": "hello"}], "max_tokens": 16}

    async def serve_a_job() -> agent.Outcome:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await agent.run_upstream(client, f"http://127.0.0.1:{port}/v1",
                                            "test-model", job)

    with raw_server(_recording_server(served)) as port:
        outcome = asyncio.run(serve_a_job())
    assert measurement.all_requests[0].succeeded and outcome.ok
    assert len(scanned) == 2 and len(served) == 1
    expected = {"model": "test-model", "max_tokens": 16, "stream": True,
                "stream_options": {"include_usage": True}}
    for body in [*scanned, *served]:
        assert {k: v for k, v in body.items() if k != "messages"} == expected
    assert served[0]["messages"] == job["messages"]
    assert scanned[0]["messages"][0]["role"] == "user" and len(scanned[0]["messages"]) == 1


def test_the_body_is_built_once_and_the_scanner_sends_it_as_compact_ascii_json():
    body = chat_request_body("m", user_message("héllo"), 64)
    assert body == {"model": "m", "messages": [{"role": "user", "content": "héllo"}],
                    "max_tokens": 64, "stream": True, "stream_options": {"include_usage": True}}
    assert encode_body(body) == json.dumps(body, separators=(",", ":")).encode()
    assert b" " not in encode_body(body) and b"\\u00e9" in encode_body(body)


def _read(pieces: list[bytes], *, on_done=None, max_line: int = 1 << 20):
    """read_sse over `pieces`; (parser, decoder, how many pieces were read)."""
    read = []

    async def body():
        for piece in pieces:
            read.append(piece)
            yield piece

    parser, decoder = StreamParser(keep_text=True), SSEDecoder(max_line)
    asyncio.run(read_sse(body(), decoder, parser, on_done=on_done))
    return parser, decoder, len(read)


def test_without_on_done_reading_stops_at_done():
    pieces = [content_event("a", role=True), content_event("b") + done_event(), b"never read"]
    parser, _, read = _read(pieces)
    assert read == 2 and parser.answer_text == ["a", "b"]
    assert parser.tally.done_at is not None


def test_with_on_done_it_is_called_once_and_the_body_is_read_to_its_end_and_flushed():
    calls = []
    pieces = [content_event("a", role=True) + done_event(), done_event(), b"data: [DONE]"]
    parser, decoder, read = _read(pieces, on_done=lambda: calls.append(1))
    assert read == 3 and calls == [1]
    assert decoder.events_seen == 4  # the last one, without its blank line, was flushed


def test_reading_stops_at_an_error_object_and_at_an_oversized_event():
    error = b'data: {"error": {"message": "boom"}}\n\n'
    parser, _, read = _read([content_event("a", role=True), error, content_event("b")])
    assert read == 2 and parser.tally.stream_error and parser.answer_text == ["a"]
    parser, decoder, read = _read([content_event("a", role=True), b"data: " + b"x" * 300 + b"\n\n",
                                   content_event("b")], max_line=200)
    assert read == 2 and decoder.oversized and parser.answer_text == ["a"]
