"""`tokvera scan --api`: the other APIs a scan speaks, each measured the way chat is (TTFT at
the first output, lengths in the server's tokens), against `tokvera target` serving each API's
wire format and raw loopback servers sending each API's error shapes:

* ``/v1/completions`` (OpenAI's legacy completions: ``choices[].text`` chunks, ``[DONE]``);
* the Responses API (``response.created``, ``response.output_text.delta``,
  ``response.completed`` with usage; ``response.failed`` and ``error`` events);
* Anthropic's Messages API (``message_start``, ``content_block_delta`` ``text_delta``,
  ``message_delta`` with ``usage.output_tokens``, ``message_stop``; ``event: error``), with
  ``x-api-key`` and ``anthropic-version``;
* embeddings (one JSON answer: latency and throughput, no TTFT).
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from scans.grader import ScanPlan, run_scan, run_scan_async
from scans.grader.demo_apis import end_events, read_request, start_events, token_events
from scans.grader.demo_server import TargetConfig, TargetServer, serving_target
from scans.grader.report import report_from_measurement
from scans.grader.sse import SSEDecoder
from scans.grader.stream import StreamTally
from scans.grader.stream_apis import parser_class
from tests.helpers.servers import (
    END_CHUNKS,
    SSE_HEAD,
    counting_server,
    http_chunk,
    json_response,
    raw_server,
    validate_report,
)
from tests.helpers.servers import read_request as read_http_request
from tokvera_site.cli import main

STREAMED = ("chat", "completions", "responses", "messages")
#: Within this of the target's own clock (the scan runs in the target's event loop).
TRUTH_MS = 3.0


def _scan_target(api: str, **config) -> tuple[ScanPlan, object, list, list]:
    """A two-level scan of `tokvera target` in the scanner's own event loop: (plan,
    measurement, the target's stream timings, the bodies it received)."""

    async def go():
        server = TargetServer(TargetConfig(ttft_ms=30, itl_ms=2, tokens=20, **config))
        _, port = await server.start("127.0.0.1", 0)
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="m", levels=(1, 2),
                        requests=4, max_tokens=128, timeout_s=10, use_nvidia_smi=False,
                        api=api, api_key="sk-test-key-0123456789")
        try:
            measurement = await run_scan_async(plan)
            return plan, measurement, list(server.stream_timings), list(server.received)
        finally:
            await server.close()

    return asyncio.run(go())


@pytest.mark.parametrize("api", STREAMED)
def test_a_scan_of_each_api_grades_with_the_targets_ttft_and_tokens(api):
    plan, measurement, truth, received = _scan_target(api)
    assert measurement.preflight.probe.failure is None
    records = measurement.levels[0].requests
    for record, served in zip(records, truth[-len(records) - 4:-4], strict=True):
        assert record.failure is None, record.error
        assert record.completion_tokens == 20 and record.output_chunks == 20
        assert record.prompt_tokens and record.prompt_tokens > 0
        assert len(record.gaps_ms()) == 19
        server_ttft = (served.first_output_at - served.received_at) * 1000
        assert abs(record.ttft_ms - server_ttft) <= TRUTH_MS
    report = report_from_measurement(plan, measurement)
    validate_report(report)
    assert report["plan"]["api"] == api
    assert report["score"]["grade"] in ("A", "B")
    assert report["levels"][0]["ttft_ms"]["p50"] >= 30
    # The prompt is the workload's: a nonce first, whatever the API's body calls it.
    body = received[-1]
    assert "[" in json.dumps(body) and "stream" in body and body["stream"] is True


def test_each_api_sends_its_own_body_and_path():
    bodies = {api: _scan_target(api)[3][-1] for api in ("completions", "responses", "messages")}
    assert isinstance(bodies["completions"]["prompt"], str)
    assert bodies["completions"]["stream_options"] == {"include_usage": True}
    assert bodies["responses"]["max_output_tokens"] == 128
    assert bodies["responses"]["input"][0]["role"] == "user"
    assert bodies["messages"]["max_tokens"] == 128
    assert bodies["messages"]["messages"][0]["role"] == "user"


@pytest.mark.parametrize("api", ("responses", "messages"))
def test_thinking_is_output_and_the_answer_follows_it(api):
    _, measurement, _, _ = _scan_target(api, reasoning_tokens=5)
    record = measurement.levels[0].requests[0]
    assert record.failure is None
    assert (record.thinking_chunks, record.answer_chunks) == (5, 20)
    assert record.time_to_first_answer_ms > record.ttft_ms


def test_a_stop_at_the_limit_reads_as_length_in_every_api():
    for api in ("completions", "responses", "messages"):
        async def go(api=api):
            server = TargetServer(TargetConfig(ttft_ms=1, itl_ms=0, tokens=20))
            _, port = await server.start("127.0.0.1", 0)
            plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="m", levels=(1,),
                            requests=1, max_tokens=5, timeout_s=10, use_nvidia_smi=False,
                            api=api)
            try:
                return await run_scan_async(plan)
            finally:
                await server.close()

        record = asyncio.run(go()).levels[0].requests[0]
        assert record.failure is None and record.finish_reason == "length", api
        assert record.completion_tokens == 5


@pytest.mark.parametrize(("api", "enforced", "tokens"), [
    ("completions", True, 40), ("responses", True, 40), ("messages", False, 20)])
def test_output_tokens_are_enforced_where_the_api_accepts_ignore_eos(api, enforced, tokens):
    """The target's replies end by themselves after 20 tokens; --output-tokens 40 asks for
    40. Its Messages API refuses ignore_eos and min_tokens, as Anthropic's does: the report
    says the length was not enforced and the load sends max_tokens alone."""
    from scans.grader.workload import Workload

    async def go():
        server = TargetServer(TargetConfig(ttft_ms=1, itl_ms=0, tokens=20))
        _, port = await server.start("127.0.0.1", 0)
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="m", levels=(1,),
                        requests=2, max_tokens=40, timeout_s=10, use_nvidia_smi=False,
                        api=api, workload=Workload(output_tokens=40))
        try:
            return plan, await run_scan_async(plan)
        finally:
            await server.close()

    plan, measurement = asyncio.run(go())
    assert measurement.workload["output_length"]["enforced"] is enforced
    assert all(r.failure is None and r.completion_tokens == tokens
               for r in measurement.levels[0].requests)
    validate_report(report_from_measurement(plan, measurement))


# -- headers and the preflight -------------------------------------------------------------------

def _messages_stream(words: int = 3) -> bytes:
    events = [b'event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
              b'"type":"message","role":"assistant","content":[],"usage":{"input_tokens":9,'
              b'"output_tokens":1}}}\n\n',
              b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
              b'"content_block":{"type":"text","text":""}}\n\n']
    events += [b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
               b'"delta":{"type":"text_delta","text":" w%d"}}\n\n' % i for i in range(words)]
    events += [b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
               b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
               b'"end_turn"},"usage":{"output_tokens":%d}}\n\n' % words,
               b'event: message_stop\ndata: {"type":"message_stop"}\n\n']
    return b"".join(events)


def _only(path: bytes, body: bytes, seen: list[bytes]):
    """A server that answers POST `path` with the SSE `body` and 404 to anything else
    (/models included), keeping every request's head in `seen`."""

    async def handler(reader, writer):
        while True:
            try:
                head, _ = await read_http_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            seen.append(head)
            if head.split(b" ")[1] != path:
                writer.write(json_response(404, {"type": "error", "error": {
                    "type": "not_found_error", "message": "Not found"}}))
            else:
                writer.write(SSE_HEAD + http_chunk(body) + END_CHUNKS)
            await writer.drain()

    return handler


def test_a_server_that_only_speaks_messages_passes_the_preflight_with_the_key_in_x_api_key():
    seen: list[bytes] = []
    with raw_server(_only(b"/v1/messages", _messages_stream(), seen)) as port:
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="claude-x", levels=(1,),
                        requests=2, max_tokens=16, timeout_s=10, use_nvidia_smi=False,
                        api="messages", api_key="sk-ant-secret-0123456789")
        measurement = run_scan(plan)
    preflight = measurement.preflight
    assert not preflight.stopped and preflight.probe.failure is None
    assert preflight.models.answered is False  # its 404 is recorded, never fatal
    assert all(r.failure is None and r.completion_tokens == 3 and r.prompt_tokens == 9
               for r in measurement.levels[0].requests)
    posts = [h.lower() for h in seen if h.startswith(b"POST")]
    assert posts and all(b"x-api-key: sk-ant-secret-0123456789" in h for h in posts)
    assert all(b"anthropic-version: 2023-06-01" in h and b"authorization" not in h
               for h in posts)
    report = report_from_measurement(plan, measurement)
    assert "sk-ant-secret" not in json.dumps(report)


def test_the_target_refuses_messages_without_anthropic_version():
    async def go():
        server = TargetServer(TargetConfig(ttft_ms=1, itl_ms=0, tokens=3))
        _, port = await server.start("127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}'
            writer.write(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n"
                         b"connection: close\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            answer = await reader.read()
            writer.close()
            return answer
        finally:
            await server.close()

    answer = asyncio.run(go())
    assert answer.startswith(b"HTTP/1.1 400")
    assert b'"type": "error"' in answer and b"anthropic-version" in answer


# -- error shapes --------------------------------------------------------------------------------

ERROR_STREAMS = {
    "messages": (b'event: message_start\ndata: {"type":"message_start","message":{"usage":'
                 b'{"input_tokens":5,"output_tokens":1}}}\n\n'
                 b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
                 b'"message":"Overloaded"}}\n\n', "Overloaded"),
    "responses": (b'event: response.created\ndata: {"type":"response.created","response":{}}\n\n'
                  b'event: response.failed\ndata: {"type":"response.failed","response":{'
                  b'"status":"failed","error":{"code":"server_error","message":'
                  b'"The model crashed"}}}\n\n', "The model crashed"),
    "completions": (b'data: {"error":{"message":"engine died","type":"server_error"}}\n\n',
                    "engine died"),
}


def _sse_answer(body: bytes):
    async def handler(reader, writer):
        while True:
            try:
                await read_http_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(SSE_HEAD + http_chunk(body) + END_CHUNKS)
            await writer.drain()

    return handler


@pytest.mark.parametrize("api", sorted(ERROR_STREAMS))
def test_an_error_in_each_apis_stream_is_a_stream_error(api):
    body, words = ERROR_STREAMS[api]
    with raw_server(_sse_answer(body)) as port:
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="m", levels=(1,),
                        requests=2, max_tokens=16, timeout_s=10, use_nvidia_smi=False, api=api)
        measurement = run_scan(plan)
    for record in [measurement.preflight.probe, *measurement.levels[0].requests]:
        assert record.failure == "stream_error" and words in record.error


def test_the_responses_apis_error_event_is_a_stream_error():
    body = (b'event: error\ndata: {"type":"error","code":"rate_limit_exceeded",'
            b'"message":"Slow down","param":null}\n\n')
    with raw_server(_sse_answer(body)) as port:
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="m", levels=(1,),
                        requests=1, max_tokens=16, timeout_s=10, use_nvidia_smi=False,
                        api="responses")
        record = run_scan(plan).levels[0].requests[0]
    assert record.failure == "stream_error" and "Slow down" in record.error


def test_a_messages_stream_that_ends_before_message_stop_is_incomplete():
    cut = _messages_stream().split(b"event: message_delta")[0]
    with raw_server(_sse_answer(cut)) as port:
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="m", levels=(1,),
                        requests=1, max_tokens=16, timeout_s=10, use_nvidia_smi=False,
                        api="messages")
        record = run_scan(plan).levels[0].requests[0]
    assert record.failure == "incomplete_stream" and "message_stop" in record.error


# -- split bytes ---------------------------------------------------------------------------------

def _wire(api: str, thinking: int = 2, tokens: int = 6) -> bytes:
    """The bytes `tokvera target` writes for one stream of `api` (events as it names them)."""
    body = {"completions": {"prompt": "hello there", "stream": True,
                            "stream_options": {"include_usage": True}},
            "responses": {"input": "hello there", "stream": True},
            "messages": {"max_tokens": 64, "stream": True,
                         "messages": [{"role": "user", "content": "hello there"}]}}[api]
    request = read_request(api, body, {"anthropic-version": "x"}, "m")
    n_thinking = 0 if api == "completions" else thinking
    events = start_events(request, "id1", 3, None)
    for i in range(tokens):
        events += token_events(request, "id1", i, f" w{i}", n_thinking)
    events += end_events(request, "id1", "stop", {"prompt_tokens": 3, "completion_tokens":
                                                  tokens, "cached": None,
                                                  "reasoning": n_thinking})
    return b"".join((b"event: %s\n" % name.encode() if name else b"")
                    + b"data: " + data.encode() + b"\r\n\r\n" for name, data in events)


def _tally(api: str, pieces: list[bytes]) -> StreamTally:
    decoder = SSEDecoder()
    parser = parser_class(api)()
    for at, piece in enumerate(pieces):
        parser.feed(decoder.feed(piece), float(at))
    parser.feed(decoder.flush(), float(len(pieces)))
    return parser.tally


@pytest.mark.parametrize("api", ("completions", "responses", "messages"))
def test_each_parser_reads_the_same_stream_however_its_bytes_are_split(api):
    wire = _wire(api)
    whole = _tally(api, [wire])
    thinking = 0 if api == "completions" else 2
    assert (whole.thinking_chunks, whole.answer_chunks) == (thinking, 6 - thinking)
    assert whole.completion_tokens == 6 and whole.complete and whole.stream_error is None
    rng = random.Random(7)
    for cut in [*range(1, len(wire)), *(rng.randrange(1, len(wire)) for _ in range(50))]:
        halves = _tally(api, [wire[:cut], wire[cut:]])
        assert (halves.output_chunks, halves.completion_tokens, halves.finish_reason) == (
            whole.output_chunks, whole.completion_tokens, whole.finish_reason)
    bytewise = _tally(api, [wire[i:i + 1] for i in range(len(wire))])
    assert bytewise.output_chunks == 6 and bytewise.complete


# -- combinations refused ------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [
    ("--api", "completions", "--tools", "builtin"),
    ("--api", "completions", "--json-schema", "builtin"),
    ("--api", "embeddings", "--turns", "2"),
    ("--api", "embeddings", "--slo", "ttft_p95_ms=500"),
    ("--api", "embeddings", "--stop-on-saturation"),
    ("--api", "embeddings", "--output-tokens", "64", "--max-tokens", "64"),
])
def test_a_combination_that_makes_no_sense_is_refused_before_any_request(flags, tmp_path,
                                                                         capsys):
    count: list[int] = []
    with raw_server(counting_server(count)) as port:
        status = main(["scan", f"http://127.0.0.1:{port}/v1", "--model", "m",
                       "--out", str(tmp_path / "out"), *flags])
    assert status == 2 and count == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"with --api {flags[1]}" in err[0]


# -- embeddings ----------------------------------------------------------------------------------

def test_an_embeddings_scan_reports_latency_and_throughput_and_no_ttft():
    plan, measurement, _, received = _scan_target("embeddings")
    assert received[-1]["input"].startswith("[") and "max_tokens" not in received[-1]
    for record in measurement.all_requests:
        assert record.failure is None, record.error
        assert record.ttft_ms is None and record.output_chunks == 0
        assert record.prompt_tokens and record.prompt_tokens > 0
    report = report_from_measurement(plan, measurement)
    validate_report(report)
    assert report["plan"]["api"] == "embeddings"
    for level in report["levels"]:
        figures = level["embeddings"]
        assert figures["latency_ms"]["n"] == 4 and figures["latency_ms"]["p50"] >= 30
        assert figures["inputs_per_s"] > 0 and figures["tokens_per_s"] > 0
        assert level["ttft_ms"] is None and level["chunk_gap_ms"] is None
    checks = {c["id"]: c for c in report["checks"]}
    for check in ("ttft_p95_at_concurrency_1", "inter_chunk_p95_at_concurrency_1",
                  "ttft_p99_load_ratio", "generation_rate_load_ratio"):
        assert checks[check]["value"] is None
        assert checks[check]["status"] == "insufficient_evidence"
        assert "no stream" in checks[check]["reason"]
    assert checks["usage_reported_share"]["value"] == 1
    assert report["score"]["grade"] in ("A", "B")


def test_the_cli_prints_an_embeddings_scans_throughput(tmp_path, capsys):
    with serving_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=4)) as (_, host, port):
        status = main(["scan", f"http://{host}:{port}/v1", "--model", "tokvera-target",
                       "--api", "embeddings", "--concurrency", "1,2", "--requests", "4",
                       "--out", str(tmp_path / "out")])
    out = capsys.readouterr()
    assert status == 0
    text = out.out + out.err
    assert "embeddings at 2: p50" in text and "inputs/s" in text and "tokens/s" in text
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    validate_report(report)


EMBEDDING_FAILURES = [
    (b'{"error":{"message":"input too long","type":"invalid_request_error"}}', "stream_error",
     "input too long"),
    (b"<html>oops</html>", "empty_reply", "not JSON"),
    (b'{"object":"list","data":[],"usage":{"prompt_tokens":3,"total_tokens":3}}',
     "empty_reply", "no data[].embedding"),
]


@pytest.mark.parametrize(("body", "failure", "words"), EMBEDDING_FAILURES)
def test_an_embeddings_answer_without_embeddings_is_a_failure(body, failure, words):
    async def handler(reader, writer):
        while True:
            try:
                await read_http_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    with raw_server(handler) as port:
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="m", levels=(1,),
                        requests=1, max_tokens=16, timeout_s=10, use_nvidia_smi=False,
                        api="embeddings")
        record = run_scan(plan).levels[0].requests[0]
    assert record.failure == failure and words in record.error
