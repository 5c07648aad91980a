"""The host-call server's job calls (benchmarks/network/host_call_server.py), served by a real
uvicorn on loopback in this process: each call and its refusals answered with the bytes the
DRF views answer; what only DRF answers handed to Django; a lease that finds nothing waits on
the event loop and is woken by a real assignment (PostgreSQL, Redis, eager Celery's pass), or
answers 204 when its wait ends; a caller that goes away while it waits leaves nothing behind.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from django.db import connection

from benchmarks.models import JobStatus
from benchmarks.network import hosts, wakeup
from benchmarks.network.heartbeat_batches import SteadyWriter, connect_as_django
from benchmarks.network.host_call_server import HostCallApp
from tests.benchmarks.network.test_job_calls_fast_path import FIGURES, view_post
from tests.conftest import free_port
from tests.helpers.network import make_catalog
from tests.helpers.processes import wait_for

# Some jobs queue while their hosts are suspended or gone.
pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("queue_without_hosts")]


@contextmanager
def serving() -> Iterator[httpx.Client]:
    """The host-call server under uvicorn on a loopback port, on a thread of this process (so
    the test's settings and eager Celery apply to it), and a client for it."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(
        HostCallApp(SteadyWriter(connect_as_django())), host="127.0.0.1", port=port,
        loop="asyncio", http="httptools", lifespan="on", log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 30, "uvicorn")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            yield client
    finally:
        server.should_exit = True  # its lifespan's shutdown closes the app's connections
        thread.join(timeout=30)


def post(client: httpx.Client, path: str, token: str | None, body: bytes,
         content_type: str = "application/json") -> httpx.Response:
    headers = {"Content-Type": content_type}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return client.post(path, content=body, headers=headers)


def same_answer(served: httpx.Response, view, case: str) -> None:
    assert served.status_code == view.status_code, (case, served.text, view.content)
    assert served.content == view.content, case
    for header in ("Content-Type", "WWW-Authenticate", "Allow", "X-Content-Type-Options",
                   "X-Frame-Options", "Referrer-Policy"):
        assert served.headers.get(header) == view.get(header), (case, header)


def _listening(host_id: int) -> bool:
    """This process's subscription is up and holds a waiting call of the host."""
    listener = wakeup._listener()
    return bool(listener and listener.connected.is_set() and host_id in listener._waiting)


class InBackground(threading.Thread):
    """One call to the server on a thread of its own: its answer, once it answers."""

    def __init__(self, client: httpx.Client, path: str, token: str, payload: dict):
        super().__init__(daemon=True)
        self.call = (client, path, token, json.dumps(payload).encode())
        self.answer: httpx.Response | None = None

    def run(self) -> None:
        self.answer = post(*self.call)

    def result(self) -> httpx.Response:
        self.join(timeout=60)
        assert self.answer is not None, "the waiting call never answered"
        return self.answer


def submitted(net, model: str = "tiny-q4") -> str:
    """A job submitted from a thread of its own, as a buyer's call to the web would be (eager
    Celery runs the pass in it, which announces the job after its commit)."""
    ids: list[str] = []

    def submit() -> None:
        try:
            ids.append(net.submit_id(model=model))
        finally:
            connection.close()

    thread = threading.Thread(target=submit)
    thread.start()
    thread.join(timeout=60)
    return ids[0]


def test_each_job_call_gets_the_views_answer_and_settles_the_job(net):
    _, token = net.host("h1", slots=3)
    first, second, third, fourth = (net.submit_id(content=f"question {n}") for n in range(4))
    with serving() as server:
        leased = post(server, "/v1/hosts/lease", token, b"{}")
        assert leased.status_code == 200 and leased.json()["id"] == first
        assert leased.json()["status"] == "leased"
        started = post(server, f"/v1/jobs/{first}/start", token, b"")
        same_answer(started, view_post(net, f"/v1/jobs/{first}/start", token, b""), "start")
        assert started.json()["status"] == "running"

        # A completion asking for the next job; the same report again through the view
        # answers what the first did, so the two must be the same bytes.
        body = json.dumps({**FIGURES, "lease_next": True}).encode()
        done = post(server, f"/v1/jobs/{first}/complete", token, body)
        assert done.json()["next"]["id"] == second and done.json()["next"]["status"] == "running"
        same_answer(done, view_post(net, f"/v1/jobs/{first}/complete", token, body), "complete")

        stranger = str(uuid.uuid4())
        many = json.dumps({"jobs": [{"id": second, **FIGURES}, {"id": stranger, **FIGURES}],
                           "lease_next": True}).encode()
        several = post(server, "/v1/jobs/complete", token, many)
        assert [item.get("status") or item["error"]["status"]
                for item in several.json()["jobs"]] == ["completed", 404]
        assert [job["id"] for job in several.json()["next"]] == [third]
        same_answer(several, view_post(net, "/v1/jobs/complete", token, many), "complete several")

        failed = post(server, f"/v1/jobs/{third}/fail", token, b'{"reason": "out of memory"}')
        assert failed.status_code == 200 and failed.json()["status"] == "failed"
        same_answer(failed, view_post(net, f"/v1/jobs/{third}/fail", token,
                                      b'{"reason": "again"}'), "a failure repeated")
        nothing = post(server, "/v1/hosts/lease", token, b'{"start": true}')
        assert nothing.status_code == 200 and nothing.json()["id"] == fourth
        empty = post(server, "/v1/hosts/lease", token, b"{}")
        assert empty.status_code == 204 and empty.content == b""
    assert [net.job(job_id).status for job_id in (first, second, third, fourth)] == [
        JobStatus.COMPLETED, JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.RUNNING]
    assert net.job(first).result_json == {"content": "ok ✓"}


def test_refused_and_malformed_calls_get_the_views_answers(net, settings):
    settings.AUTH_FAILURE_LIMIT = 1000  # this test fails many authentications on purpose
    _, token = net.host("h1", slots=2)
    _, other_token = net.host("h2", heartbeat=False)  # offline: the jobs go to h1
    gone, revoked = hosts.create_host(net.operator, "h3")
    hosts.revoke_token(gone)
    mine = net.submit_id()
    net.lease(token)
    good, complete = json.dumps(FIGURES).encode(), f"/v1/jobs/{mine}/complete"
    cases = [
        ("another host's job", other_token, complete, good, "application/json"),
        ("another host's start", other_token, f"/v1/jobs/{mine}/start", b"", "text/plain"),
        ("no credentials", None, complete, good, "application/json"),
        ("a malformed token", "tkh_short", complete, good, "application/json"),
        ("a team token", "tkv_" + "x" * 40, "/v1/hosts/lease", b"{}", "application/json"),
        ("a revoked token", revoked, complete, good, "application/json"),
        ("a figure missing", token, complete, b'{"ttft_ms": 1, "completion_tokens": 2}',
         "application/json"),
        ("not JSON", token, complete, b"{nope", "application/json"),
        ("a lease waiting as a string", token, "/v1/hosts/lease", b'{"wait_s": "2"}',
         "application/json"),
        ("a wait over the most", token, "/v1/hosts/lease", b'{"wait_s": 31}', "application/json"),
        ("several, none listed", token, "/v1/jobs/complete", b'{"jobs": []}', "application/json"),
        ("a blank reason", token, f"/v1/jobs/{mine}/fail", b'{"reason": "  "}', "application/json"),
        # Left to Django in this process, which answers as the site does (DRF's parsers, the
        # URL's converter, negotiation).
        ("form data", token, complete, b"ttft_ms=1", "application/x-www-form-urlencoded"),
        ("an upper-case id", token, complete.upper().replace("/V1/JOBS/", "/v1/jobs/"), good,
         "application/json"),
        ("a format in the query", token, complete + "?format=xml", good, "application/json"),
    ]
    with serving() as server:
        for name, who, path, body, content_type in cases:
            same_answer(post(server, path, who, body, content_type),
                        view_post(net, path, who, body, content_type), name)
        # A body without a declared length (chunked) goes to Django unread, which reads it
        # as none, as the site does behind gunicorn.
        chunked = server.post("/v1/hosts/lease", content=iter([b'{"wait_s": ', b'"2"}']),
                              headers={"Authorization": f"Bearer {token}",
                                       "Content-Type": "application/json"})
        same_answer(chunked, view_post(net, "/v1/hosts/lease", token, b""), "a chunked body")
        wrong_method = server.get("/v1/hosts/lease", headers={"Authorization": f"Bearer {token}"})
        assert wrong_method.status_code == 405  # DRF's, as the site answers it
        assert net.job(mine).status == JobStatus.LEASED  # nothing above settled it


def test_the_lease_limit_is_one_allowance_with_the_web_path(net, settings):
    settings.NETWORK_LEASE_LIMIT = 2
    _, token = net.host("h1")
    with serving() as server:
        assert post(server, "/v1/hosts/lease", token, b"{}").status_code == 204
        assert view_post(net, "/v1/hosts/lease", token, b"{}").status_code == 204
        over = post(server, "/v1/hosts/lease", token, b"{}")
        over_view = view_post(net, "/v1/hosts/lease", token, b"{}")
    assert over.status_code == over_view.status_code == 429
    assert over.json() == over_view.json() and over.headers["Retry-After"]


def test_a_waiting_lease_is_woken_by_the_assignment_of_its_job(net, monkeypatch):
    # No polling to fall back on: only the pass's announcement can end this wait early.
    monkeypatch.setattr(wakeup, "POLL_S", 120.0)
    host, token = net.host("idle")
    with serving() as server:
        waiting = InBackground(server, "/v1/hosts/lease", token, {"start": True, "wait_s": 30})
        waiting.start()
        wait_for(lambda: _listening(host.pk), 10, "the lease to wait")
        job_id = submitted(net)
        answer = waiting.result()
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] == job_id and answer.json()["status"] == "running"
    assert net.job(job_id).host == host


def test_a_completion_asking_for_the_next_job_waits_for_it_on_the_loop(net, monkeypatch):
    monkeypatch.setattr(wakeup, "POLL_S", 120.0)
    host, token = net.host("busy")
    first = net.submit_id()
    assert net.lease(token).json()["id"] == first
    with serving() as server:
        waiting = InBackground(server, f"/v1/jobs/{first}/complete", token,
                               {**FIGURES, "lease_next": True, "wait_s": 30})
        waiting.start()
        wait_for(lambda: _listening(host.pk), 10, "the completion to wait")
        assert net.job(first).status == JobStatus.COMPLETED  # recorded before the wait
        second = submitted(net)
        answer = waiting.result()
    assert answer.status_code == 200 and answer.json()["status"] == "completed"
    assert answer.json()["next"]["id"] == second and answer.json()["next"]["status"] == "running"
    assert net.job(first).next_job_id == uuid.UUID(second)  # a repeated report gets it again


def test_a_lease_with_nothing_assigned_answers_204_when_its_wait_ends(net):
    _, token = net.host("idle")
    with serving() as server:
        answer = post(server, "/v1/hosts/lease", token, b'{"wait_s": 0.5}')
    assert answer.status_code == 204 and answer.content == b""


def test_without_redis_a_waiting_lease_still_gets_its_job_by_polling(net, settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    _, token = net.host("idle")
    with serving() as server:
        waiting = InBackground(server, "/v1/hosts/lease", token, {"wait_s": 20})
        waiting.start()
        job_id = submitted(net)
        answer = waiting.result()
    assert answer.status_code == 200 and answer.json()["id"] == job_id


def test_a_caller_that_goes_away_while_waiting_leaves_its_place_and_takes_no_job(
        net, settings, monkeypatch):
    monkeypatch.setattr(wakeup, "POLL_S", 120.0)
    settings.NETWORK_WAITING_LEASES_PER_PROCESS = 1  # the gone call's place is the only one
    make_catalog("small-q8")
    gone_host, gone_token = net.host("gone", models=("small-q8",))
    other_host, other_token = net.host("other")
    with serving() as server:
        port = server.base_url.port
        body = b'{"start": true, "wait_s": 30}'
        with socket.create_connection(("127.0.0.1", port)) as caller:
            caller.sendall(b"POST /v1/hosts/lease HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Authorization: Bearer " + gone_token.encode() + b"\r\n"
                           b"Content-Type: application/json\r\n"
                           b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            wait_for(lambda: _listening(gone_host.pk), 10, "the lease to wait")
        wait_for(lambda: not _listening(gone_host.pk), 10, "the gone call to stop waiting")
        # Its place among the waiting calls is free: another host's lease waits in it.
        waiting = InBackground(server, "/v1/hosts/lease", other_token, {"wait_s": 30})
        waiting.start()
        wait_for(lambda: _listening(other_host.pk), 10, "the other lease to wait")
        gone_job = submitted(net, "small-q8")
        assert waiting.is_alive()  # a job for another host wakes nobody else
        other_job = submitted(net)
        assert waiting.result().json()["id"] == other_job
        # Nobody took the gone host's job: it is still there for its next lease.
        assert net.job(gone_job).delivered_at is None
        again = post(server, "/v1/hosts/lease", gone_token, b"{}")
    assert again.status_code == 200 and again.json()["id"] == gone_job

