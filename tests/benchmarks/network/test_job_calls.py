"""POST /v1/hosts/lease and /v1/jobs/{id}/start, /complete, /fail: only the leasing host,
idempotent, and nothing recorded from bad figures."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine

from benchmarks.models import JobStatus
from benchmarks.network import hosts
from tests.conftest import bearer
from tests.helpers.network import T0


def test_lease_hands_out_the_assigned_job_with_its_request_then_204(net):
    _, token = net.host("h1")
    job_id = net.submit_id(max_tokens=16, content="Tell me a joke")
    leased = net.lease(token)
    assert leased.status_code == 200
    body = leased.json()
    assert body["id"] == job_id and body["model"] == "tiny-q4" and body["max_tokens"] == 16
    assert body["messages"] == [{"role": "user", "content": "Tell me a joke"}]
    assert body["attempt"] == 1
    assert net.lease(token).status_code == 204
    assert net.job(job_id).status == JobStatus.LEASED


def test_a_host_with_several_slots_gets_one_job_per_lease_call(net):
    _, token = net.host("h1", slots=3)
    ids = [net.submit_id() for _ in range(3)]
    got = [net.lease(token).json()["id"] for _ in range(3)]
    assert got == ids  # first in, first out
    assert net.lease(token).status_code == 204


def test_start_then_complete_settles_the_job(net):
    _, token = net.host("h1")
    job_id = net.submit_id()
    net.lease(token)
    started = net.start(token, job_id)
    assert started.status_code == 200 and started.json()["status"] == "running"
    done = net.complete(token, job_id, ttft_ms=120, completion_tokens=20, elapsed_ms=1000)
    assert done.status_code == 200 and done.json()["status"] == "completed"
    job = net.job(job_id)
    assert job.status == JobStatus.COMPLETED
    assert (job.ttft_ms, job.completion_tokens, job.elapsed_ms) == (120, 20, 1000)
    assert job.settled_at == job.completed_at is not None
    assert job.started_at is not None and job.lease_expires_at is None


def test_repeated_start_and_complete_return_the_same_answer_and_change_nothing(net):
    _, token = net.host("h1")
    job_id = net.submit_id()
    net.lease(token)
    first_start = net.start(token, job_id).json()
    assert net.start(token, job_id).json() == first_start
    first = net.complete(token, job_id, ttft_ms=100, completion_tokens=10, elapsed_ms=500)
    again = net.complete(token, job_id, ttft_ms=100, completion_tokens=10, elapsed_ms=500)
    different = net.complete(token, job_id, ttft_ms=5, completion_tokens=1, elapsed_ms=50)
    assert first.status_code == again.status_code == different.status_code == 200
    assert first.json() == again.json() == different.json()
    job = net.job(job_id)
    assert (job.ttft_ms, job.completion_tokens, job.elapsed_ms) == (100, 10, 500)


def test_fail_settles_the_job_as_failed_with_the_hosts_reason_and_is_idempotent(net):
    _, token = net.host("h1")
    job_id = net.submit_id()
    net.lease(token)
    first = net.fail(token, job_id, reason="cannot load Q4_K_M")
    assert first.status_code == 200 and first.json()["status"] == "failed"
    assert net.fail(token, job_id, reason="other words").json() == first.json()
    job = net.job(job_id)
    assert job.status == JobStatus.FAILED and job.failure_reason == "host: cannot load Q4_K_M"
    assert job.settled_at is not None and job.ttft_ms is None
    assert net.complete(token, job_id).status_code == 409


def test_a_host_calling_on_another_hosts_job_gets_404(net):
    _, mine = net.host("mine")
    _, other = net.host("other")
    job_id = net.submit_id()
    holder, outsider = (mine, other) if net.lease(mine).status_code == 200 else (other, mine)
    for call in (net.start, net.complete, net.fail):
        assert call(outsider, job_id).status_code == 404
    assert net.complete(outsider, "00000000-0000-0000-0000-000000000000").status_code == 404
    assert net.job(job_id).status == JobStatus.LEASED
    assert net.start(holder, job_id).status_code == 200


def test_a_revoked_token_gets_401_and_its_jobs_return_to_the_queue(net):
    host, token = net.host("h1")
    job_id = net.submit_id()
    net.lease(token)
    net.start(token, job_id)
    hosts.revoke_token(host, actor="test")
    assert net.complete(token, job_id).status_code == 401
    assert net.heartbeat(token, ["tiny-q4"]).status_code == 401
    job = net.job(job_id)
    assert job.status == JobStatus.QUEUED and job.host is None


def test_a_rotated_token_replaces_the_old_one(net):
    host, old = net.host("h1")
    new = hosts.rotate_token(host, actor="test")
    assert net.heartbeat(old, ["tiny-q4"]).status_code == 401
    assert net.heartbeat(new, ["tiny-q4"]).status_code == 200


@pytest.mark.parametrize(
    ("figures", "why"),
    [
        ({"ttft_ms": -1}, "negative ttft"),
        ({"elapsed_ms": -5}, "negative elapsed"),
        ({"completion_tokens": -3}, "negative tokens"),
        ({"ttft_ms": 600, "elapsed_ms": 500}, "ttft above elapsed"),
        ({"completion_tokens": 10_000}, "tokens far above max_tokens"),
        ({"elapsed_ms": 3_600_000}, "longer than the lease has existed"),
        ({"completion_tokens": 60, "elapsed_ms": 1, "ttft_ms": 1}, "impossible speed"),
        ({"completion_tokens": 10, "elapsed_ms": 5e-324, "ttft_ms": 0}, "a denormal elapsed time"),
        ({"ttft_ms": "100"}, "a string"),
        ({"completion_tokens": True}, "a boolean"),
        ({"completion_tokens": 2.5}, "fractional tokens"),
        ({"ttft_ms": None, "completion_tokens": 5}, "tokens without a first token"),
    ],
)
def test_negative_or_absurd_figures_get_400_and_nothing_is_recorded(net, figures, why):
    _, token = net.host("h1")
    job_id = net.submit_id(max_tokens=64)
    net.lease(token)
    net.start(token, job_id)
    response = net.complete(token, job_id, **figures)
    assert response.status_code == 400, why
    job = net.job(job_id)
    assert job.status == JobStatus.RUNNING and job.ttft_ms is None and job.settled_at is None


def test_a_few_tokens_over_max_tokens_are_accepted(net):
    _, token = net.host("h1")
    job_id = net.submit_id(max_tokens=64)
    net.lease(token)
    assert net.complete(token, job_id, completion_tokens=72).status_code == 200


def test_zero_tokens_or_zero_elapsed_complete_the_job(net):
    _, token = net.host("h1", slots=2)
    empty = net.submit_id()
    instant = net.submit_id()
    net.lease(token)
    net.lease(token)
    assert net.complete(token, empty, ttft_ms=None, completion_tokens=0, elapsed_ms=300).status_code == 200
    assert net.complete(token, instant, ttft_ms=0, completion_tokens=5, elapsed_ms=0).status_code == 200
    assert net.job(empty).status == net.job(instant).status == JobStatus.COMPLETED


def test_lease_calls_are_rate_limited_per_host(net, settings):
    settings.NETWORK_LEASE_LIMIT = 3
    _, greedy = net.host("greedy")
    _, calm = net.host("calm")
    codes = [net.lease(greedy).status_code for _ in range(5)]
    assert codes == [204, 204, 204, 429, 429]
    assert net.lease(calm).status_code == 204


def test_start_after_the_lease_expired_is_refused(net):
    with time_machine.travel(T0, tick=False) as clock:
        _, first = net.host("first")
        job_id = net.submit_id()
        net.lease(first)
        clock.move_to(T0 + timedelta(seconds=31))
        _, second = net.host("second")
        assert net.lease(second).json()["id"] == job_id  # a lease call expires the old lease
        assert net.start(first, job_id).status_code == 404


def test_host_urls_refuse_other_methods(net):
    _, token = net.host("h1")
    assert net.client.get("/v1/hosts/lease", **bearer(token)).status_code == 405


def test_a_lease_asking_to_start_hands_back_a_running_job_and_a_later_start_changes_nothing(net):
    _, token = net.host("h1")
    job_id = net.submit_id()
    leased = net.client.post("/v1/hosts/lease", {"start": True}, format="json", **bearer(token))
    assert leased.status_code == 200 and leased.json()["id"] == job_id
    job = net.job(job_id)
    assert job.status == JobStatus.RUNNING and job.started_at is not None
    assert net.start(token, job_id).json()["status"] == "running"  # an older agent's start
    assert net.job(job_id).started_at == job.started_at
    assert net.complete(token, job_id).json()["status"] == "completed"


def test_complete_with_lease_next_answers_the_next_job_already_running(
        net, django_capture_on_commit_callbacks):
    host, token = net.host("h1")
    first, second = net.submit_id(), net.submit_id()
    assert net.lease(token).json()["id"] == first
    net.start(token, first)
    body = {"ttft_ms": 100.0, "completion_tokens": 10, "elapsed_ms": 500.0, "lease_next": True}
    with django_capture_on_commit_callbacks(execute=True):
        done = net.client.post(f"/v1/jobs/{first}/complete", body, format="json", **bearer(token))
    assert done.status_code == 200
    assert done.json()["status"] == "completed"
    assert done.json()["next"]["id"] == second
    assert net.job(second).status == JobStatus.RUNNING and net.job(second).host == host
    with django_capture_on_commit_callbacks(execute=True):
        last = net.client.post(f"/v1/jobs/{second}/complete", body, format="json", **bearer(token))
    assert last.json()["next"] is None  # nothing waits: the host goes back to polling
    assert net.job(first).folded_at is not None and net.job(second).folded_at is not None
    host.refresh_from_db()
    assert host.ttft_ewma_ms == 100.0 and host.tps_ewma == 20.0


def test_a_repeated_completion_gets_the_same_next_job_and_starts_no_other(net):
    """The agent repeats a completion whose answer it lost (a dropped connection): the repeat
    answers the next job the first call started, which the host never saw, instead of
    starting a third one that would also be lost until its run clock ran out."""
    host, token = net.host("h1", slots=2)
    first = net.submit_id()
    assert net.lease(token).json()["id"] == first
    queued = [net.submit_id(), net.submit_id()]
    body = {"ttft_ms": 100.0, "completion_tokens": 10, "elapsed_ms": 500.0, "lease_next": True}
    answers = [net.client.post(f"/v1/jobs/{first}/complete", body, format="json", **bearer(token))
               for _ in range(2)]
    assert [a.json()["next"]["id"] for a in answers] == [queued[0], queued[0]]
    assert net.job(queued[1]).status != JobStatus.RUNNING  # not handed out behind the host's back
    # In a batch too: the repeated report answers its own next job, the new one takes the next.
    figures = {"ttft_ms": 100.0, "completion_tokens": 10, "elapsed_ms": 500.0}
    batch = net.client.post("/v1/jobs/complete", {"jobs": [
        {"id": first, **figures}, {"id": queued[0], **figures}], "lease_next": True},
        format="json", **bearer(token))
    # (queued[0] is completed in this call, so only the new report gets a next job)
    assert [j["id"] for j in batch.json()["next"]] == [queued[1]]


def test_a_complete_without_lease_next_answers_as_before(net):
    _, token = net.host("h1")
    job_id = net.submit_id()
    net.lease(token)
    assert "next" not in net.complete(token, job_id).json()


def test_a_host_completes_several_jobs_in_one_call_and_gets_as_many_next_ones(
        net, django_capture_on_commit_callbacks):
    """POST /v1/jobs/complete: a host with several slots reports them together; each report
    is recorded or refused on its own (another host's job is 404 in its place), and with
    lease_next one started job comes back per job completed."""
    _, token = net.host("h1", slots=3)
    mine = [net.submit_id(), net.submit_id()]
    assert [net.lease(token).json()["id"] for _ in mine] == mine
    _, other = net.host("h2")
    theirs = net.submit_id()
    assert net.lease(other).json()["id"] == theirs
    queued = [net.submit_id() for _ in range(3)]
    figures = {"ttft_ms": 50.0, "completion_tokens": 8, "elapsed_ms": 400.0}
    answer = net.client.post("/v1/jobs/complete", {"jobs": [
        {"id": mine[0], **figures, "result": {"content": "a"}},
        {"id": theirs, **figures},
        {"id": mine[1], **figures, "ttft_ms": -1.0},
    ], "lease_next": True}, format="json", **bearer(token))
    assert answer.status_code == 400  # the batch is checked as a whole first: nothing recorded
    assert net.job(mine[0]).status == JobStatus.LEASED
    with django_capture_on_commit_callbacks(execute=True):  # the fold, as a worker would run it
        answer = net.client.post("/v1/jobs/complete", {"jobs": [
            {"id": mine[0], **figures, "result": {"content": "a"}},
            {"id": theirs, **figures},
            {"id": mine[1], **figures},
        ], "lease_next": True}, format="json", **bearer(token))
    assert answer.status_code == 200, answer.content
    reports = answer.json()["jobs"]
    assert [r["id"] for r in reports] == [mine[0], theirs, mine[1]]
    assert reports[0]["status"] == reports[2]["status"] == "completed"
    assert reports[1]["error"]["status"] == 404
    assert net.job(theirs).status == JobStatus.LEASED  # still the other host's
    assert net.job(mine[0]).result_json == {"content": "a"}
    following = answer.json()["next"]
    assert [j["id"] for j in following] == queued[:2]  # two completed: two next, first in first out
    assert {j["status"] for j in following} == {"running"}
    job = net.job(mine[1])
    assert (job.ttft_ms, job.completion_tokens, job.folded_at is not None) == (50.0, 8, True)


def test_host_calls_answer_json_only_never_a_page(net):
    _, token = net.host("h1")
    asked_for_html = net.client.post("/v1/hosts/lease", format="json", HTTP_ACCEPT="text/html",
                                     **bearer(token))
    assert asked_for_html.status_code == 406  # was a 500: the browsable page took the host for a team
    assert asked_for_html["Content-Type"] == "application/json"


def test_a_host_token_acts_for_no_team(net, rf):
    from accounts.tenancy import Access
    from benchmarks.network.authentication import HostPrincipal

    host, _ = net.host("h1")
    request = rf.post("/v1/hosts/lease")
    request.user, request.auth = HostPrincipal(host), host  # as HostTokenAuthentication sets them
    access = Access.for_request(request)
    assert access.team_ids == [] and access.token is None
