"""Buyers: POST /v1/jobs and GET /v1/jobs/{id} (own team only)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts import teams
from benchmarks.models import Job, JobStatus
from tests.conftest import bearer, make_user
from tests.helpers.network import make_catalog


@pytest.mark.usefixtures("queue_without_hosts")
def test_submitting_a_job_answers_202_with_its_id_and_queues_it(net):
    response = net.submit(max_tokens=32, content="Say hi")
    assert response.status_code == 202
    body = response.json()
    job = Job.dangerously_unscoped.get(pk=body["id"])
    assert body["status"] == "queued" and body["model"] == "tiny-q4"
    assert job.team == net.buyer and job.status == JobStatus.QUEUED and job.host is None
    assert job.request_json == {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 32}
    assert body["result"] is None


def test_a_buyer_reads_its_own_job_and_the_result_once_completed(net):
    _, token = net.host("h1")
    job_id = net.submit_id()
    assert net.client.get(f"/v1/jobs/{job_id}", **bearer(net.buyer_token)).json()["result"] is None
    net.run(token, result={"content": "hi there"})
    body = net.client.get(f"/v1/jobs/{job_id}", **bearer(net.buyer_token)).json()
    assert body["status"] == "completed"
    assert body["result"] == {"content": "hi there"}
    assert body["completion_tokens"] == 10 and body["settled_at"] is not None
    assert "host" not in body  # which host served it is the operator's business


@pytest.mark.usefixtures("queue_without_hosts")
def test_another_team_gets_404_for_a_job_it_did_not_submit(net):
    job_id = net.submit_id()
    response = net.client.get(f"/v1/jobs/{job_id}", **bearer(net.other_buyer_token))
    assert response.status_code == 404
    assert "hello" not in response.content.decode()


def test_a_host_token_cannot_read_a_buyers_job(net):
    _, token = net.host("h1")
    job_id = net.submit_id()
    assert net.client.get(f"/v1/jobs/{job_id}", **bearer(token)).status_code == 401


@pytest.mark.usefixtures("queue_without_hosts")
def test_unknown_or_inactive_models_and_too_many_tokens_are_refused(net):
    make_catalog("retired-q4", active=False)
    make_catalog("short-q4", context_len=128)
    # Well formed, but naming what the catalog does not have (or cannot take): 422.
    assert net.submit(model="nope").status_code == 422
    assert net.submit(model="retired-q4").status_code == 422
    assert net.submit(model="short-q4", max_tokens=129).status_code == 422
    assert net.submit(model="short-q4", max_tokens=128).status_code == 202
    assert Job.dangerously_unscoped.count() == 1


def test_malformed_submissions_are_refused(net):
    for body in (
        {"model": "tiny-q4", "max_tokens": 8, "messages": []},
        {"model": "tiny-q4", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]},
        {"model": "tiny-q4", "max_tokens": "8", "messages": [{"role": "user", "content": "x"}]},
        {"model": "tiny-q4", "max_tokens": 8, "messages": [{"role": "robot", "content": "x"}]},
        {"model": "tiny-q4", "messages": [{"role": "user", "content": "x"}]},
    ):
        response = net.client.post("/v1/jobs", body, format="json", **bearer(net.buyer_token))
        assert response.status_code == 400, body
    assert Job.dangerously_unscoped.count() == 0


def test_a_read_only_token_cannot_submit(net):
    _, read_only = teams.issue_token(net.buyer, "read-only")
    assert net.submit(read_only).status_code == 403
    assert Job.dangerously_unscoped.count() == 0


@pytest.mark.usefixtures("queue_without_hosts")
def test_a_user_in_several_teams_says_which_team_submits(net):
    user = make_user("two-teams")
    teams.create_team("first", "First", owner=user)
    second = teams.create_team("second", "Second", owner=user)
    client = APIClient()
    client.force_login(user)
    body = {"model": "tiny-q4", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    assert client.post("/v1/jobs", body, format="json").status_code == 400
    response = client.post("/v1/jobs", {**body, "team": "second"}, format="json")
    assert response.status_code == 202
    assert Job.dangerously_unscoped.get(pk=response.json()["id"]).team == second
    assert client.post("/v1/jobs", {**body, "team": "buyer"}, format="json").status_code == 404


def test_a_token_cannot_submit_for_another_team(net):
    response = net.client.post(
        "/v1/jobs",
        {"team": "other-buyer", "model": "tiny-q4", "max_tokens": 8,
         "messages": [{"role": "user", "content": "x"}]},
        format="json", **bearer(net.buyer_token),
    )
    assert response.status_code == 404
    assert Job.dangerously_unscoped.count() == 0
