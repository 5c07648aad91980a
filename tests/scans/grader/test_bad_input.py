"""Bad input the scanner must survive, each against a real loopback server.

None may crash the scan or leave a level unreported: every test also checks that each level is
reported and that the report built from the measurement validates against its schema.
"""

from __future__ import annotations

import asyncio
import json
import random
import tracemalloc

from scans.grader.report import report_from_measurement
from tests.helpers.servers import (
    END_CHUNKS,
    SSE_HEAD,
    content_event,
    done_event,
    finish_event,
    good_stream,
    http_chunk,
    json_response,
    paced_stream_server,
    plan_for,
    raw_server,
    read_request,
    reset_connection,
    scan,
    stream_server,
    usage_event,
    validate_report,
)


def _reported(measurement, port, **plan_kwargs):
    """Every level reported, and the report valid."""
    plan = plan_for(port, **plan_kwargs)
    assert [lv.concurrency for lv in measurement.levels] == list(plan.levels)
    report = report_from_measurement(plan, measurement)
    validate_report(report)
    return report


def test_sse_split_at_arbitrary_byte_boundaries_is_read_whole():
    body = good_stream(6)
    rng = random.Random(7)

    async def handler(reader, writer):
        while True:
            await read_request(reader)
            writer.write(SSE_HEAD)
            i = 0
            while i < len(body):  # tiny HTTP chunks, each flushed on its own
                step = rng.randint(1, 9)
                writer.write(http_chunk(body[i:i + step]))
                await writer.drain()
                if rng.random() < 0.3:
                    await asyncio.sleep(0.001)
                i += step
            writer.write(END_CHUNKS)
            await writer.drain()

    with raw_server(handler) as port:
        m = scan(port, requests=2)
    _reported(m, port, requests=2)
    records = m.levels[0].requests
    assert all(r.succeeded for r in records)
    assert [len(r.output_times) for r in records] == [6, 6]
    assert [r.completion_tokens for r in records] == [6, 6]


def test_crlf_line_endings_are_read():
    body = (b"".join(content_event(f" w{i}", sep=b"\r\n") for i in range(4))
            + finish_event(sep=b"\r\n") + usage_event(3, 4, sep=b"\r\n") + done_event(b"\r\n"))
    with raw_server(stream_server(lambda n: body)) as port:
        m = scan(port, requests=2)
    _reported(m, port, requests=2)
    assert all(r.succeeded and len(r.output_times) == 4 for r in m.levels[0].requests)


def test_data_field_without_a_space_is_read():
    body = (b"".join(content_event(f" w{i}", prefix=b"data:") for i in range(3))
            + b"data:[DONE]\n\n")
    with raw_server(stream_server(lambda n: body)) as port:
        m = scan(port, requests=2)
    _reported(m, port, requests=2)
    assert all(r.succeeded and len(r.output_times) == 3 for r in m.levels[0].requests)


def test_comment_and_keep_alive_lines_are_skipped():
    body = (b": keep-alive\n\n" + content_event(" a") + b":\n\nevent: message\nid: 7\n"
            + content_event(" b") + b"retry: 1000\n\n: ping\n\n" + finish_event()
            + done_event())
    with raw_server(stream_server(lambda n: body)) as port:
        m = scan(port, requests=2)
    _reported(m, port, requests=2)
    assert all(r.succeeded and len(r.output_times) == 2 for r in m.levels[0].requests)


def test_a_role_only_first_chunk_is_not_content():
    role_only = (b'data: {"choices":[{"index":0,"delta":{"role":"assistant"},'
                 b'"finish_reason":null}]}\n\n')
    empty = (b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
             b'"finish_reason":null}]}\n\n')
    body = role_only + empty + content_event(" hi") + finish_event() + done_event()
    with raw_server(stream_server(lambda n: body)) as port:
        m = scan(port, requests=2)
    _reported(m, port, requests=2)
    assert all(r.succeeded and len(r.output_times) == 1 for r in m.levels[0].requests)


def test_ttft_is_not_stopped_by_a_role_only_chunk():
    # The role arrives at once, the content 300 ms later: TTFT must reach the content.
    async def handler(reader, writer):
        while True:
            await read_request(reader)
            writer.write(SSE_HEAD + http_chunk(
                b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
                b'"finish_reason":null}]}\n\n'))
            await writer.drain()
            await asyncio.sleep(0.3)
            writer.write(http_chunk(content_event(" late") + finish_event() + done_event())
                         + END_CHUNKS)
            await writer.drain()

    with raw_server(handler) as port:
        m = scan(port, requests=1)
    record = m.levels[0].requests[0]
    assert record.succeeded
    assert record.headers_at < record.first_output_at
    assert record.ttft_ms >= 300 * 0.99  # a lower bound set by the server's own sleep


def test_a_usage_chunk_with_empty_choices_is_read_as_usage():
    body = content_event(" a") + content_event(" b") + finish_event() + usage_event(11, 2) \
        + done_event()
    with raw_server(stream_server(lambda n: body)) as port:
        m = scan(port, requests=2)
    report = _reported(m, port, requests=2)
    assert [(r.prompt_tokens, r.completion_tokens) for r in m.levels[0].requests] == [(11, 2)] * 2
    usage = next(c for c in report["checks"] if c["id"] == "usage_reported_share")
    assert usage["value"] == 1.0


def test_chunks_with_several_tokens_count_once_as_chunks_and_fully_as_tokens():
    events = [content_event(" one two three") for _ in range(4)] + [
        finish_event(), usage_event(5, 12), done_event()]
    with raw_server(paced_stream_server(events)) as port:
        m = scan(port, levels=(1, 2), requests=2)
    report = _reported(m, port, levels=(1, 2), requests=2)
    record = m.levels[0].requests[0]
    assert len(record.output_times) == 4 and record.completion_tokens == 12
    assert report["levels"][0]["generation_rate"]["basis"] == "tokens"
    assert record.rate("tokens") > record.rate("chunks")


def test_non_json_data_lines_are_skipped_and_counted():
    body = (content_event(" a") + b"data: this is not json\n\n" + b"data: {broken\n\n"
            + content_event(" b") + finish_event() + done_event())
    with raw_server(stream_server(lambda n: body)) as port:
        m = scan(port, requests=2)
    _reported(m, port, requests=2)
    for record in m.levels[0].requests:
        assert record.succeeded and len(record.output_times) == 2
        assert record.ignored_lines == 2


def test_headers_then_a_stall_times_out_and_the_scan_goes_on():
    counter = {"n": 0}

    async def handler(reader, writer):
        while True:
            head, _ = await read_request(reader)
            counter["n"] += head.startswith(b"POST ")  # chat requests only; 1 is the probe
            if counter["n"] == 2 and head.startswith(b"POST "):
                writer.write(SSE_HEAD)
                await writer.drain()
                await asyncio.sleep(3600)  # stalls forever
            writer.write(SSE_HEAD + http_chunk(good_stream(3)) + END_CHUNKS)
            await writer.drain()

    with raw_server(handler) as port:
        m = scan(port, levels=(1, 2), requests=3, timeout_s=0.5)
    report = _reported(m, port, levels=(1, 2), requests=3, timeout_s=0.5)
    assert m.levels[0].failed_by_class == {"timeout": 1}
    assert len(m.levels[0].succeeded) == 2
    assert len(m.levels[1].succeeded) == 3
    assert report["levels"][0]["failed"] == {"timeout": 1}


def test_a_mid_stream_connection_reset_is_an_incomplete_stream():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(SSE_HEAD + http_chunk(content_event(" a") + content_event(" b")))
        await writer.drain()
        await asyncio.sleep(0.05)
        reset_connection(writer)

    with raw_server(handler) as port:
        m = scan(port, levels=(1, 2), requests=2)
    _reported(m, port, levels=(1, 2), requests=2)
    for level in m.levels:
        assert level.failed_by_class == {"incomplete_stream": 2}
        assert all(len(r.output_times) == 2 for r in level.requests)


def test_429_and_500_storms_at_higher_levels_are_counted_per_class():
    state = {"in_flight": 0, "n": 0}

    async def handler(reader, writer):
        while True:
            await read_request(reader)
            state["n"] += 1
            if state["in_flight"] >= 1:  # only one stream at a time; the rest are refused
                if state["n"] % 2:
                    writer.write(json_response(429, {"error": {"message": "rate limited"}}))
                else:
                    writer.write(json_response(500, {"error": {"message": "overloaded"}}))
                await writer.drain()
                continue
            state["in_flight"] += 1
            try:
                writer.write(SSE_HEAD + http_chunk(content_event(" a")))
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.write(http_chunk(content_event(" b") + finish_event() + done_event())
                             + END_CHUNKS)
                await writer.drain()
            finally:
                state["in_flight"] -= 1

    with raw_server(handler) as port:
        m = scan(port, levels=(1, 8), requests=8)
    report = _reported(m, port, levels=(1, 8), requests=8)
    assert m.levels[0].failed_by_class == {}
    storm = m.levels[1].failed_by_class
    assert set(storm) == {"http_status_429", "http_status_500"}
    assert "rate limited" in m.levels[1].failure_examples["http_status_429"]
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["error_rate_at_peak"]["value"] == sum(storm.values()) / 8
    assert checks["error_rate_at_peak"]["status"] == "fail"


def test_a_200_with_a_json_error_body_is_not_sse():
    async def handler(reader, writer):
        while True:
            await read_request(reader)
            writer.write(json_response(200, {"error": {"message": "model is loading"}},
                                       reason=b"OK"))
            await writer.drain()

    with raw_server(handler) as port:
        m = scan(port, requests=2)
    report = _reported(m, port, requests=2)
    assert m.levels[0].failed_by_class == {"not_sse": 2}
    assert "model is loading" in m.levels[0].failure_examples["not_sse"]
    assert report["score"]["caps_applied"][0]["id"] == "no_successful_request"


def test_an_error_object_inside_the_stream_is_a_stream_error():
    body = content_event(" a") + b'data: {"error":{"message":"CUDA out of memory"}}\n\n'
    with raw_server(stream_server(lambda n: body)) as port:
        m = scan(port, requests=2)
    _reported(m, port, requests=2)
    assert m.levels[0].failed_by_class == {"stream_error": 2}
    assert "CUDA out of memory" in m.levels[0].failure_examples["stream_error"]


def test_a_10_mb_chunk_keeps_memory_bounded():
    huge = (b'data: {"choices":[{"index":0,"delta":{"content":"'
            + b"x" * (10 * 1024 * 1024) + b'"},"finish_reason":null}]}\n\n')
    head_and_chunk = SSE_HEAD + b"%x\r\n" % len(huge)
    tail = b"\r\n" + http_chunk(content_event(" after") + finish_event() + done_event()) \
        + END_CHUNKS

    async def handler(reader, writer):
        while True:
            head, _ = await read_request(reader)
            if b"/metrics" in head.split(b"\r\n")[0]:
                writer.write(json_response(404, {}))
                continue
            writer.write(head_and_chunk)
            view = memoryview(huge)
            for i in range(0, len(huge), 65536):  # written in slices: no copy of the whole
                writer.write(view[i:i + 65536])
                await writer.drain()
            writer.write(tail)
            await writer.drain()

    with raw_server(handler) as port:
        tracemalloc.start()
        try:
            m = scan(port, levels=(1, 2), requests=2)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    _reported(m, port, levels=(1, 2), requests=2)
    assert peak < 8 * 1024 * 1024, peak  # far below the 10 MB event: never buffered whole
    for level in m.levels:
        assert level.failed_by_class == {"stream_error": 2}
        assert "not buffered" in level.failure_examples["stream_error"]


def test_a_stream_that_ends_without_done_or_finish_reason_is_incomplete():
    body = content_event(" a") + content_event(" b")
    with raw_server(stream_server(lambda n: body)) as port:
        m = scan(port, requests=2)
    _reported(m, port, requests=2)
    assert m.levels[0].failed_by_class == {"incomplete_stream": 2}


def test_a_clean_stream_without_content_is_an_empty_reply():
    body = finish_event() + done_event()
    with raw_server(stream_server(lambda n: body)) as port:
        m = scan(port, requests=2)
    _reported(m, port, requests=2)
    assert m.levels[0].failed_by_class == {"empty_reply": 2}


def test_a_finish_reason_followed_by_the_end_of_the_body_succeeds_without_done():
    body = content_event(" a") + content_event(" b", finish="stop")
    with raw_server(stream_server(lambda n: body)) as port:
        m = scan(port, requests=2)
    assert all(r.succeeded for r in m.levels[0].requests)


def test_redirects_are_not_followed():
    async def handler(reader, writer):
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:9/\r\n"
                         b"content-length: 0\r\n\r\n")
            await writer.drain()

    with raw_server(handler) as port:
        m = scan(port, requests=2)
    _reported(m, port, requests=2)
    assert m.levels[0].failed_by_class == {"http_status_307": 2}


def test_the_request_is_what_issue_3_specifies():
    seen = []

    async def handler(reader, writer):
        while True:
            head, body = await read_request(reader)
            seen.append((head.split(b"\r\n")[0], body))
            writer.write(SSE_HEAD + http_chunk(good_stream(2)) + END_CHUNKS)
            await writer.drain()

    with raw_server(handler) as port:
        scan(port, requests=3)
    chat = [body for line, body in seen if line.startswith(b"POST /v1/chat/completions ")]
    assert len(chat) == 1 + 3  # the preflight's probe, then the level
    assert all(b["stream"] is True and b["stream_options"] == {"include_usage": True}
               for b in chat)
    prompts = [json.dumps(b["messages"]) for b in chat]
    assert len(set(prompts)) == 4  # built-in load prompts differ per request
