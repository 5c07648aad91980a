"""The one retry: a request sent on a reused keep-alive connection that the server had already
closed, failing before any response byte, is retried once on a fresh connection. Nothing else
is ever retried."""

from __future__ import annotations

import asyncio

from tests.helpers.servers import (
    END_CHUNKS,
    SSE_HEAD,
    good_stream,
    http_chunk,
    json_response,
    raw_server,
    read_request,
    reset_connection,
    scan,
)


def _one_response_then(after):
    """Each connection streams one response advertising keep-alive, then does `after`
    (/metrics and the preflight's /models get a 404 and a closed connection)."""

    async def handler(reader, writer):
        head, _ = await read_request(reader)
        if b"/metrics" in head.split(b"\r\n")[0] or b"/models" in head.split(b"\r\n")[0]:
            writer.write(json_response(404, {}))
            await writer.drain()
            return
        writer.write(SSE_HEAD + http_chunk(good_stream(3)) + END_CHUNKS)
        await writer.drain()
        await after(reader, writer)

    return handler


async def _close_when_the_next_request_arrives(reader, writer):
    # The next request reaches a connection the server is done with: it is closed without a
    # response byte, as a server that closes after each response does.
    await reader.read(1)
    writer.close()


async def _reset_when_the_next_request_arrives(reader, writer):
    await reader.read(1)
    reset_connection(writer)


async def _close_at_once(reader, writer):
    writer.close()  # llama-server style: close right after the response, keep-alive advertised


def test_a_request_on_a_connection_the_server_closed_is_retried_once_and_succeeds():
    with raw_server(_one_response_then(_close_when_the_next_request_arrives)) as port:
        m = scan(port, requests=4)
    records = m.levels[0].requests
    assert all(r.succeeded for r in records), [r.error for r in records]
    # The preflight's probe had the first (fresh) connection; every load request found it
    # closed by the server and was retried once.
    assert m.preflight.probe.succeeded and not m.preflight.probe.retried
    assert [r.retried for r in records] == [True, True, True, True]
    assert all(r.reused_connection is False for r in records)  # the retry used a fresh one


def test_a_reset_reused_connection_is_retried_too():
    with raw_server(_one_response_then(_reset_when_the_next_request_arrives)) as port:
        m = scan(port, requests=3)
    records = m.levels[0].requests
    assert all(r.succeeded for r in records), [r.error for r in records]
    assert [r.retried for r in records] == [True, True, True]  # the probe was first


def test_a_server_that_closes_after_each_response_loses_no_request():
    with raw_server(_one_response_then(_close_at_once)) as port:
        m = scan(port, levels=(1, 2), requests=5)
    for level in m.levels:
        assert level.failed_by_class == {}, level.failure_examples


def test_a_fresh_connection_closed_before_any_response_is_not_retried():
    async def handler(reader, writer):
        await read_request(reader)
        writer.close()

    with raw_server(handler) as port:
        m = scan(port, requests=2)
    # The probe met it first: not retried, and the scan stopped there (no answer at all).
    probe = m.preflight.probe
    assert probe.failure == "transport_error" and not probe.retried
    assert "without sending a response" in probe.error
    assert m.preflight.stopped and m.levels[0].requests == [probe]


def test_a_connection_closed_after_part_of_a_response_is_not_retried():
    async def handler(reader, writer):
        while True:
            await read_request(reader)
            writer.write(SSE_HEAD + http_chunk(good_stream(3)) + END_CHUNKS)
            await writer.drain()
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)
            writer.close()
            return

    with raw_server(handler) as port:
        m = scan(port, requests=2)
    failed = [r for r in m.levels[0].requests if not r.succeeded]
    assert failed, "a reused connection broke off after part of a response"
    assert all(r.failure == "transport_error" and not r.retried for r in failed)


def test_the_retry_also_works_through_a_plain_httpx_transport():
    import httpx

    from scans.grader import run_scan
    from tests.helpers.servers import plan_for

    with raw_server(_one_response_then(_close_when_the_next_request_arrives)) as port:
        m = run_scan(plan_for(port, requests=3), transport=httpx.AsyncHTTPTransport())
    records = m.levels[0].requests
    assert all(r.succeeded for r in records), [r.error for r in records]
    assert [r.retried for r in records] == [True, True, True]  # the probe was first
