"""Job calls answered in front of Django (benchmarks/network/host_wsgi.py): for every request the
fast path serves (a malformed body, a bad token and a caller over a limit included), the same
bytes the DRF views answer; what only DRF can answer (its negotiation, other content types)
reaches the views untouched; the lease's rate limit is one allowance whichever path counts it;
a dropped database connection survived.

The fast path runs in this process (httpx's WSGI transport), in front of the same Django the
views' calls go to, so both see the same database, cache and settings.
"""

from __future__ import annotations

import itertools
import json
import re
import uuid

import httpx
import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from benchmarks.models import Host, JobStatus
from benchmarks.network import hosts
from benchmarks.network.host_wsgi import HostFastPath
from common import auth_failures
from tests.conftest import bearer, database_url
from tokvera_site.wsgi import django_application

pytestmark = [pytest.mark.django_db(transaction=True)]

FIGURES = {"ttft_ms": 120.5, "completion_tokens": 12, "elapsed_ms": 900, "result": {"content": "ok ✓"}}


class FastPath:
    """The fast path in front of Django, noting each request it handed to Django."""

    def __init__(self) -> None:
        self.handed_to_django: list[str] = []

        def django(environ, start_response):
            self.handed_to_django.append(environ["PATH_INFO"])
            return django_application(environ, start_response)

        self.client = httpx.Client(transport=httpx.WSGITransport(app=HostFastPath(django)),
                                   base_url="http://testserver")

    def post(self, path: str, token: str | None, body: bytes,
             content_type: str = "application/json", accept: str = "") -> httpx.Response:
        headers = {"Content-Type": content_type, **({"Accept": accept} if accept else {})}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return self.client.post(path, content=body, headers=headers)


def view_post(net, path: str, token: str | None, body: bytes, content_type: str = "application/json",
              accept: str = ""):
    return net.client.generic("POST", path, body, content_type, **(bearer(token) if token else {}),
                              **({"HTTP_ACCEPT": accept} if accept else {}))


@pytest.fixture
def fast() -> FastPath:
    return FastPath()


def _same_answer(fast_answer: httpx.Response, view_answer, case: str) -> None:
    assert fast_answer.status_code == view_answer.status_code, (case, fast_answer.text)
    assert fast_answer.content == view_answer.content, case
    for header in ("Content-Type", "WWW-Authenticate", "Retry-After", "Allow", "Vary",
                   "X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy"):
        assert fast_answer.headers.get(header) == view_answer.get(header), (case, header)


def test_served_calls_answer_the_views_bytes_and_settle_the_jobs(net, fast):
    _, token = net.host("h1", slots=3)
    first, second, third = (net.submit_id(content=f"question {n}") for n in range(3))

    fast_lease = fast.post("/v1/hosts/lease", token, b'{"start": true}')
    view_lease = view_post(net, "/v1/hosts/lease", token, b'{"start": true}')
    assert fast_lease.status_code == view_lease.status_code == 200
    leased, other = fast_lease.json(), view_lease.json()
    assert leased["id"] == first and other["id"] == second and leased["status"] == "running"
    assert leased["messages"] == [{"role": "user", "content": "question 0"}]
    assert leased.keys() == other.keys()
    # The same rendering of a time (DRF's: ISO 8601 in UTC with a Z).
    assert leased["lease_expires_at"].endswith("Z") and other["lease_expires_at"].endswith("Z")
    assert fast_lease.headers["X-Content-Type-Options"] == "nosniff"

    # A completion with lease_next, then the same report through the view: a repeated
    # completion answers what the first did, so the two answers must be the same bytes.
    body = json.dumps({**FIGURES, "lease_next": True}).encode()
    fast_done = fast.post(f"/v1/jobs/{first}/complete", token, body)
    assert fast_done.json()["next"]["id"] == third
    _same_answer(fast_done, view_post(net, f"/v1/jobs/{first}/complete", token, body), "complete")

    stranger = str(uuid.uuid4())
    many = json.dumps({"jobs": [{"id": second, **FIGURES}, {"id": third, **FIGURES},
                                {"id": stranger, **FIGURES}], "lease_next": True}).encode()
    fast_many = fast.post("/v1/jobs/complete", token, many)
    assert [item.get("status") or item["error"]["status"] for item in fast_many.json()["jobs"]] == [
        "completed", "completed", 404]
    _same_answer(fast_many, view_post(net, "/v1/jobs/complete", token, many), "complete several")

    assert fast.handed_to_django == []  # every one of these was the fast path's
    for job_id in (first, second, third):
        job = net.job(job_id)
        assert job.status == JobStatus.COMPLETED
        assert (job.ttft_ms, job.completion_tokens, job.elapsed_ms) == (120.5, 12, 900)
        assert job.result_json == {"content": "ok ✓"}


def test_refused_and_malformed_calls_get_the_views_answers(net, fast, settings):
    settings.AUTH_FAILURE_LIMIT = 1000  # this test fails many authentications on purpose
    _, token = net.host("h1", slots=2)
    _, other_token = net.host("h2", heartbeat=False)  # offline: both jobs go to h1
    gone, revoked = hosts.create_host(net.operator, "h3")
    hosts.revoke_token(gone)
    mine, failed = net.submit_id(), net.submit_id()
    net.lease(token)
    net.lease(token)
    assert net.fail(token, failed).status_code == 200
    good, complete = json.dumps(FIGURES).encode(), f"/v1/jobs/{mine}/complete"
    malformed = [(name, token, complete, body, "application/json") for name, body in [
        ("a figure missing", b'{"ttft_ms": 1, "completion_tokens": 2}'),
        ("a number as a string", b'{"ttft_ms": 1, "completion_tokens": "2", "elapsed_ms": 3}'),
        ("a negative figure", b'{"ttft_ms": -1, "completion_tokens": 2, "elapsed_ms": 3}'),
        ("a figure too large for a float",
         b'{"ttft_ms": 1, "completion_tokens": 2, "elapsed_ms": 1' + b"0" * 400 + b"}"),
        ("a wait over 30 s", b'{"ttft_ms": 1, "completion_tokens": 2, "elapsed_ms": 3, "wait_s": 31}'),
        ("not JSON", b"{nope"),
        ("a list", b"[]"),
        ("null", b"null"),
        ("no body", b""),
        # DRF reads a body as strict UTF-8: a byte-order mark or UTF-16 is no JSON to it.
        ("a byte-order mark", b"\xef\xbb\xbf" + good),
        ("UTF-16", json.dumps(FIGURES).encode("utf-16")),
    ]]
    answered_here = [  # by the fast path itself, as the views answer them
        ("another host's job", other_token, f"/v1/jobs/{mine}/complete", good, "application/json"),
        ("a failed job", token, f"/v1/jobs/{failed}/complete", good, "application/json"),
        ("a lease with no JSON", token, "/v1/hosts/lease", b"whatever", "text/plain"),
        ("a lease with no body", token, "/v1/hosts/lease", b"", "application/json"),
        *malformed,
        ("no credentials", None, complete, good, "application/json"),
        ("a team token", "tkv_" + "x" * 40, complete, good, "application/json"),
        ("a revoked token", revoked, complete, good, "application/json"),
        ("a revoked token, a malformed body", revoked, complete, b"[]", "application/json"),
        ("a lease waiting as a string", token, "/v1/hosts/lease", b'{"wait_s": "2"}',
         "application/json"),
        ("a lease not JSON", token, "/v1/hosts/lease", b"{nope", "application/json"),
        ("several, none listed", token, "/v1/jobs/complete", b'{"jobs": []}', "application/json"),
        ("several, a bad id", token, "/v1/jobs/complete",
         json.dumps({"jobs": [{"id": "job-1", **FIGURES}]}).encode(), "application/json"),
        ("several, a null and a list", token, "/v1/jobs/complete",
         json.dumps({"jobs": [None, [], {"id": mine, **FIGURES, "ttft_ms": "x"}],
                     "lease_next": "maybe"}).encode(), "application/json"),
        ("a failure without a reason", token, f"/v1/jobs/{mine}/fail", b"{}", "application/json"),
        ("a blank reason", token, f"/v1/jobs/{mine}/fail", b'{"reason": "  "}', "application/json"),
        ("a reason too long", token, f"/v1/jobs/{mine}/fail",
         json.dumps({"reason": "x" * 191}).encode(), "application/json"),
        ("a reason as an object", token, f"/v1/jobs/{mine}/fail", b'{"reason": {}}',
         "application/json"),
        ("a start of another host's job", other_token, f"/v1/jobs/{mine}/start", b"", "text/plain"),
        ("a start of a failed job", token, f"/v1/jobs/{failed}/start", b"", "text/plain"),
        ("a failure repeated", token, f"/v1/jobs/{failed}/fail", b'{"reason": "again"}',
         "application/json"),
    ]
    handed_to_django = [  # what DRF itself must answer: its parsers, its URLs, its negotiation
        ("form data", token, complete, b"ttft_ms=1", "application/x-www-form-urlencoded"),
        ("an upper-case id", token, complete.upper(), good, "application/json"),
        # DRF negotiates the answer's format: ?format= and Accept are its to read.
        ("a format in the query", token, complete + "?format=xml", good, "application/json"),
    ]
    for cases, handed in ((answered_here, False), (handed_to_django, True)):
        for name, who, path, body, content_type in cases:
            before = len(fast.handed_to_django)
            _same_answer(fast.post(path, who, body, content_type),
                         view_post(net, path, who, body, content_type), name)
            assert len(fast.handed_to_django) == before + handed, name
    assert net.job(mine).status == JobStatus.LEASED  # nothing above completed it
    # The last one completes the job: JSON, indented (then the view answers the repeat alike).
    for accept in ("application/xml", "text/html", "application/json; indent=4"):
        before = len(fast.handed_to_django)
        _same_answer(fast.post(complete, token, good, accept=accept),
                     view_post(net, complete, token, good, accept=accept), accept)
        assert len(fast.handed_to_django) == before + 1, accept


_ANY_JSON = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=4),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
# Any value for each field a report may have (never `wait_s`: a completion may wait up to 30 s).
_REPORT = st.fixed_dictionaries({}, optional={
    "ttft_ms": _ANY_JSON, "completion_tokens": _ANY_JSON, "elapsed_ms": _ANY_JSON,
    "result": _ANY_JSON, "lease_next": _ANY_JSON, "extra": _ANY_JSON})


_EXAMPLES = itertools.count()  # host names of their own for each example
_TIME = re.compile(r'"\d{4}-\d\d-\d\dT[\d:.]+Z"')


def _twin_jobs(net, n: int) -> tuple[tuple[str, str], tuple[str, str]]:
    """Two hosts, each with one job assigned: ((token, job id), (token, job id))."""
    first, second = net.host(f"a{n}"), net.host(f"b{n}")
    ids = [net.submit_id(), net.submit_id()]
    by_host = {net.job(job_id).host_id: job_id for job_id in ids}
    Host.dangerously_unscoped.filter(pk__in=[first[0].pk, second[0].pk]).update(suspended=True)
    return (first[1], by_host[first[0].pk]), (second[1], by_host[second[0].pk])


@hypothesis_settings(max_examples=100, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(report=st.one_of(_REPORT, st.builds(lambda r: FIGURES | r, _REPORT)), several=st.booleans(),
       job=st.sampled_from(["its own", "unknown", "garbage"]))
def test_any_report_gets_the_views_answer(net, fast, settings, report, several, job):
    """Whatever a completion says, the fast path answers it (or hands it on) as the views do:
    the same report for twin jobs, one through each path (their ids and times aside)."""
    settings.NETWORK_SUBMIT_LIMIT = settings.NETWORK_MAX_UNSETTLED_PER_TEAM = 10**6
    (fast_token, fast_job), (view_token, view_job) = _twin_jobs(net, next(_EXAMPLES))
    answers, unknown = [], str(uuid.uuid4())
    for client, token, job_id in ((fast, fast_token, fast_job), (None, view_token, view_job)):
        job_id = {"its own": job_id, "unknown": unknown, "garbage": "job-1"}[job]
        if several:
            path, payload = "/v1/jobs/complete", {"jobs": [{"id": job_id, **report}],
                                                  "lease_next": report.get("lease_next", False)}
        else:
            path, payload = f"/v1/jobs/{job_id}/complete", report
        body = json.dumps(payload).encode()
        answer = client.post(path, token, body) if client else view_post(net, path, token, body)
        text = answer.content.decode().replace(fast_job, view_job)
        answers.append((answer.status_code, _TIME.sub('"<time>"', text)))
    assert answers[0] == answers[1], body
    assert net.job(fast_job).status == net.job(view_job).status


def test_a_lease_limit_is_one_allowance_whichever_path_counts_the_call(net, fast, settings):
    settings.NETWORK_LEASE_LIMIT = 3
    _, token = net.host("h1")
    assert fast.post("/v1/hosts/lease", token, b"{}").status_code == 204
    assert view_post(net, "/v1/hosts/lease", token, b"{}").status_code == 204
    assert fast.post("/v1/hosts/lease", token, b"{}").status_code == 204
    over_fast = fast.post("/v1/hosts/lease", token, b"{}")
    over_view = view_post(net, "/v1/hosts/lease", token, b"{}")
    assert over_fast.status_code == over_view.status_code == 429
    assert over_fast.json()["code"] == "rate_limited" and over_fast.headers["Retry-After"]


def test_an_address_over_its_failure_limit_is_refused_its_failures_but_never_its_valid_token(
        net, fast, settings):
    settings.AUTH_FAILURE_LIMIT = 2
    _, token = net.host("h1")
    job_id = net.submit_id()
    garbage = "tkh_" + "g" * 40
    for _ in range(2):
        assert fast.post("/v1/hosts/lease", garbage, b"{}").status_code == 401
    for path in ("/v1/hosts/lease", f"/v1/jobs/{job_id}/complete"):
        refused = fast.post(path, garbage, json.dumps(FIGURES).encode())
        _same_answer(refused, view_post(net, path, garbage, json.dumps(FIGURES).encode()), path)
        assert refused.status_code == 429 and refused.headers["Retry-After"]
    # The host's own token from that address: leased and completed as from any other.
    leased = fast.post("/v1/hosts/lease", token, b'{"start": true}')
    assert leased.status_code == 200 and leased.json()["id"] == job_id, leased.text
    done = fast.post(f"/v1/jobs/{job_id}/complete", token, json.dumps(FIGURES).encode())
    assert done.status_code == 200, done.text
    assert net.job(job_id).status == JobStatus.COMPLETED


def test_a_completion_after_the_database_dropped_the_connection_is_still_recorded(net, fast):
    _, token = net.host("h1")
    job_id = net.submit_id()
    assert fast.post("/v1/hosts/lease", token, b'{"start": true}').status_code == 200
    connection.ensure_connection()
    with psycopg.connect(database_url(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid])
    done = fast.post(f"/v1/jobs/{job_id}/complete", token, json.dumps(FIGURES).encode())
    assert done.status_code == 200, done.text
    assert net.job(job_id).status == JobStatus.COMPLETED
    assert fast.handed_to_django == []


def test_past_its_ceiling_an_address_is_refused_in_front_of_django_with_the_views_bytes(
        net, fast, settings):
    settings.AUTH_FAILURE_LIMIT = 2
    _, token = net.host("h1")
    job_id = net.submit_id()
    garbage = "tkh_" + "c" * 40
    for _ in range(2 * auth_failures.AUTH_FAILURE_CEILING_MULTIPLE):
        assert fast.post("/v1/hosts/lease", garbage, b"{}").status_code in (401, 429)
    fast.handed_to_django.clear()
    for path in ("/v1/hosts/lease", f"/v1/jobs/{job_id}/complete"):
        with CaptureQueriesContext(connection) as queries:
            refused = fast.post(path, garbage, json.dumps(FIGURES).encode())
        assert refused.status_code == 429 and queries.captured_queries == []
        _same_answer(refused, view_post(net, path, garbage, json.dumps(FIGURES).encode()), path)
    assert fast.handed_to_django == []
