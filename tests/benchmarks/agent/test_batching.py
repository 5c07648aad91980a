"""The host agent group-commits its completions: a real agent with several slots
against the real site, served by Django's threaded WSGI server on loopback behind a thin access
log of its own (each completion call the site answered: the jobs it carried and how many
completion calls were in flight as it came in), and a raw asyncio upstream that makes slots
finish together. A report made while no completion call is in flight goes at once, alone; the
reports of slots that finish while one is in flight share the next call, and the next jobs it
answers go to those slots."""

from __future__ import annotations

import asyncio
import io
import json
import re
import threading
import time
from collections.abc import Callable

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

from benchmarks.agent import Agent, AgentConfig
from benchmarks.models import Job, JobStatus
from tests.helpers.servers import (
    END_CHUNKS,
    content_event,
    done_event,
    finish_event,
    http_chunk,
    raw_server,
    read_request,
    usage_event,
)

pytestmark = pytest.mark.django_db(transaction=True)

TOKENS = 5
COMPLETION = re.compile(r"/v1/jobs/(?:(?P<id>[0-9a-f-]{36})/)?complete")
STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
               b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")


class Access:
    """The site's access path: a WSGI wrapper around the real site that keeps, for each
    completion call, its path, the job ids it carried and how many completion calls were in
    flight as it came in; `hold(call_number)`, when set, runs before the site sees the call."""

    def __init__(self, app: WSGIHandler) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.completions: list[tuple[str, list[str], int]] = []
        self.in_flight = 0
        self.hold: Callable[[int], None] | None = None
        self.url = ""

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        match = COMPLETION.fullmatch(path)
        if environ.get("REQUEST_METHOD") != "POST" or not match:
            return self.app(environ, start_response)
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(body)
        ids = [match["id"]] if match["id"] else [item["id"] for item in json.loads(body)["jobs"]]
        with self.lock:
            self.completions.append((path, ids, self.in_flight))
            self.in_flight += 1
            number = len(self.completions)
        try:
            if self.hold is not None:
                self.hold(number)
            # The answer is complete when the site returns it, before the server writes it.
            return self.app(environ, start_response)
        finally:
            with self.lock:
                self.in_flight -= 1


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - http.server's signature
        pass


@pytest.fixture
def site():
    access = Access(WSGIHandler())
    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler, allow_reuse_address=False)
    # server_close() then waits for the calls still being answered (the agent's last waiting
    # lease, up to its wait_s), so none touches the database after the test.
    server.daemon_threads = False
    server.set_app(access)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    access.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield access
    server.shutdown()
    server.server_close()
    thread.join(5)


class Upstream:
    """A chat upstream that streams TOKENS tokens (or `tokens(request)`) to each request once
    `gate(number, request)` lets it (number: the request's, from 1); it counts the streams sent
    and those the agent has read to the end and closed."""

    def __init__(self, gate, tokens: Callable[[dict], int] = lambda request: TOKENS) -> None:
        self.gate, self.tokens = gate, tokens
        self.changed = threading.Condition()
        self.arrived = self.sent = self.closed = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, request = await read_request(reader)
        with self.changed:
            self.arrived += 1
            number = self.arrived
            self.changed.notify_all()
        await self.gate(number, request)
        with self.changed:
            self.sent += 1
        body = b"".join(content_event(f" w{i}", role=i == 0) for i in range(TOKENS))
        body += finish_event() + usage_event(10, self.tokens(request)) + done_event()
        writer.write(STREAM_HEAD + http_chunk(body) + END_CHUNKS)
        await writer.drain()
        await reader.read()  # until the agent, done with the stream, closes the connection
        with self.changed:
            self.closed += 1
            self.changed.notify_all()

    def wait(self, predicate, what: str) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, timeout=20), f"the upstream never saw {what}"


def _agent(site: Access, token: str, port: int, slots: int, jobs: int) -> Agent:
    return Agent(AgentConfig(coordinator=site.url, token=token, upstream=f"http://127.0.0.1:{port}/v1",
                             models=("tiny-q4",), slots=slots, poll_s=0.05, heartbeat_s=0.5,
                             lease_wait_s=1.0, max_jobs=jobs), log=lambda line: None)


def _completed_with_figures(job_ids) -> list[Job]:
    jobs = [Job.dangerously_unscoped.get(pk=job_id) for job_id in job_ids]
    for job in jobs:
        assert job.status == JobStatus.COMPLETED, (job.status, job.failure_reason)
        assert job.completion_tokens == TOKENS and job.ttft_ms is not None
        assert job.elapsed_ms >= job.ttft_ms and job.result_json["content"]
    return jobs


def test_slots_finishing_together_share_completion_calls_and_get_their_next_jobs(net, site):
    """Eight jobs on four slots, in two rounds of four that finish together: the reports made
    while a round's first call is in flight wait for it and then go in one batch call, and the
    next jobs these calls answer (the second round) go one to each slot that reported."""
    host, token = net.host("quad", slots=4)
    job_ids = [net.submit_id(content=f"job {i}") for i in range(8)]  # four assigned, four queued
    waiting: list[asyncio.Future] = []

    async def four_at_once(number: int, request: dict) -> None:
        gate = asyncio.get_running_loop().create_future()
        waiting.append(gate)
        if len(waiting) == 4:  # only four slots running at once open it
            for each in waiting:
                each.set_result(None)
            waiting.clear()
        await gate

    upstream = Upstream(four_at_once)

    def while_the_others_finish(number: int) -> None:
        # A call made while streams are still being read is held until the agent has read
        # them all: their slots then finish while this call is in flight.
        upstream.wait(lambda: upstream.closed == upstream.sent, "every stream read")
        time.sleep(0.3)  # the agent gets from the closed stream to its report

    site.hold = while_the_others_finish
    with raw_server(upstream.handle) as port:
        agent = _agent(site, token, port, slots=4, jobs=8)
        assert asyncio.run(asyncio.wait_for(agent.run(), 60)) == 0

    _completed_with_figures(job_ids)
    reported = [job_id for _, ids, _ in site.completions for job_id in ids]
    assert sorted(reported) == sorted(job_ids)  # each job reported once
    # Per round, the first call and at most one more with every report made while it was held.
    assert len(site.completions) <= 4 < len(job_ids)
    assert all((path == "/v1/jobs/complete") == (len(ids) > 1) for path, ids, _ in site.completions)
    assert all(in_flight == 0 for _, _, in_flight in site.completions)  # one call at a time
    assert upstream.arrived == 8  # the second round ran four at once: a next job for each slot


def test_a_lone_report_goes_at_once_and_one_made_meanwhile_follows_its_answer(net, site):
    """Two slots: the first job finishes while the second still runs and is reported at once,
    by itself; the second finishes while that call is in flight and is sent, alone, as soon as
    it is answered, not alongside it."""
    host, token = net.host("duo", slots=2)
    job_ids = [net.submit_id(content=f"job {i}") for i in range(2)]
    second_may_stream = threading.Event()

    async def first_at_once(number: int, request: dict) -> None:
        if number > 1:
            await asyncio.to_thread(second_may_stream.wait, 20)

    upstream = Upstream(first_at_once)
    seen_at_first_call: dict = {}

    def finish_the_second_meanwhile(number: int) -> None:
        if number != 1:
            return
        upstream.wait(lambda: upstream.arrived == 2, "the second job's request")
        seen_at_first_call.update(sent=upstream.sent, closed=upstream.closed)
        second_may_stream.set()
        upstream.wait(lambda: upstream.closed == 2, "the second stream read")
        time.sleep(0.3)  # the agent gets from the closed stream to its report

    site.hold = finish_the_second_meanwhile
    with raw_server(upstream.handle) as port:
        agent = _agent(site, token, port, slots=2, jobs=2)
        assert asyncio.run(asyncio.wait_for(agent.run(), 60)) == 0

    _completed_with_figures(job_ids)
    # The first report did not wait for company: the second job had not streamed yet.
    assert seen_at_first_call == {"sent": 1, "closed": 1}
    (first_path, first_ids, first_busy), (second_path, second_ids, second_busy) = site.completions
    assert first_path == f"/v1/jobs/{first_ids[0]}/complete" and first_busy == 0
    assert second_path == f"/v1/jobs/{second_ids[0]}/complete"
    assert second_busy == 0  # sent after the first call was answered, not beside it
    assert sorted(first_ids + second_ids) == sorted(job_ids)


def test_a_report_the_batch_answer_refuses_fails_that_job_alone(net, site):
    """A report the coordinator refuses inside a batch answer (figures far above max_tokens:
    its item answers 400) is handled as a refused single call is: the job is reported failed,
    saying why, and the report beside it in the same call completes."""
    host, token = net.host("trio", slots=3)
    first = net.submit_id(content="first")
    beside = net.submit_id(content="beside")
    absurd = net.submit_id(content="absurd", max_tokens=4)
    the_rest_may_stream = threading.Event()

    async def first_alone(number: int, request: dict) -> None:
        if request["messages"][0]["content"] != "first":
            await asyncio.to_thread(the_rest_may_stream.wait, 20)

    upstream = Upstream(first_alone, tokens=lambda request: 500 if request["max_tokens"] == 4
                        else TOKENS)

    def the_rest_finish_meanwhile(number: int) -> None:
        if number != 1:
            return
        upstream.wait(lambda: upstream.arrived == 3, "every job's request")
        the_rest_may_stream.set()
        upstream.wait(lambda: upstream.closed == 3, "every stream read")
        time.sleep(0.3)  # the agent gets from the closed streams to its reports

    site.hold = the_rest_finish_meanwhile
    with raw_server(upstream.handle) as port:
        agent = _agent(site, token, port, slots=3, jobs=3)
        assert asyncio.run(asyncio.wait_for(agent.run(), 60)) == 0

    assert [(path, sorted(ids)) for path, ids, _ in site.completions] == [
        (f"/v1/jobs/{first}/complete", [first]), ("/v1/jobs/complete", sorted([beside, absurd]))]
    _completed_with_figures([first, beside])
    refused = Job.dangerously_unscoped.get(pk=absurd)
    assert refused.status == JobStatus.FAILED
    assert refused.failure_reason == ("host: figures refused: completion_tokens 500 is far above "
                                      "max_tokens 4")
