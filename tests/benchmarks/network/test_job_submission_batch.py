"""Buyers: POST /v1/jobs/batch, several jobs in one call, all of them or none.

The same team choice and limits as POST /v1/jobs: each job counts one against the team's
submission rate (one budget for both calls), all of them against its cap on unsettled jobs,
and a model no online host serves refuses the whole batch."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts import teams
from benchmarks.models import Job, JobStatus
from tests.conftest import bearer, make_user
from tests.helpers.network import make_catalog


def _item(model="tiny-q4", max_tokens=64, content="hello") -> dict:
    return {"model": model, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": content}]}


def _batch(net, items, token=None, **body):
    return net.client.post("/v1/jobs/batch", {**body, "jobs": items}, format="json",
                           **bearer(token or net.buyer_token))


def test_a_batch_creates_queued_jobs_that_a_host_then_gets_in_the_order_given(net):
    _, token = net.host("h1", slots=5)
    response = _batch(net, [_item(content=f"job {n}", max_tokens=8 + n) for n in range(5)])

    assert response.status_code == 202, response.content
    answered = response.json()["jobs"]
    assert [job["max_tokens"] for job in answered] == [8, 9, 10, 11, 12]
    assert {job["status"] for job in answered} == {"queued"}
    assert {job["model"] for job in answered} == {"tiny-q4"}
    stored = {str(job.pk): job for job in Job.dangerously_unscoped.all()}
    assert set(stored) == {job["id"] for job in answered}
    assert {job.team_id for job in stored.values()} == {net.buyer.pk}
    assert stored[answered[3]["id"]].request_json == {
        "messages": [{"role": "user", "content": "job 3"}], "max_tokens": 11}
    # The batch's pass gave them to the host (5 free slots); it leases them first in, first out.
    leased = [net.lease(token).json() for _ in range(5)]
    assert [job["messages"][0]["content"] for job in leased] == [f"job {n}" for n in range(5)]
    assert [job["id"] for job in leased] == [job["id"] for job in answered]
    assert net.lease(token).status_code == 204


@pytest.mark.usefixtures("queue_without_hosts")
def test_an_invalid_item_refuses_the_whole_batch_with_its_errors_in_its_place(net):
    response = _batch(net, [_item(), _item(max_tokens=0), _item()])
    assert response.status_code == 400
    errors = response.json()["jobs"]
    assert list(errors) == ["1"] and list(errors["1"]) == ["max_tokens"]
    assert Job.dangerously_unscoped.count() == 0


@pytest.mark.usefixtures("queue_without_hosts")
def test_an_unknown_model_or_too_many_tokens_in_one_item_refuses_the_whole_batch(net):
    make_catalog("retired-q4", active=False)
    make_catalog("short-q4", context_len=128)
    response = _batch(net, [_item(), _item(model="nope"), _item(model="short-q4", max_tokens=129),
                            _item(model="retired-q4")])

    assert response.status_code == 422
    # Each refused item under its index, as the serializer's own item errors are.
    assert response.json() == {"jobs": {
        "1": {"model": ["unknown or inactive catalog id: nope"]},
        "2": {"model": ["max_tokens 129 exceeds the context length of short-q4 (128)"]},
        "3": {"model": ["unknown or inactive catalog id: retired-q4"]},
    }}
    assert Job.dangerously_unscoped.count() == 0
    assert _batch(net, [_item(), _item(model="short-q4", max_tokens=128)]).status_code == 202
    assert Job.dangerously_unscoped.count() == 2


@pytest.mark.usefixtures("queue_without_hosts")
def test_a_batch_that_would_pass_the_unsettled_cap_creates_nothing(net, settings):
    settings.NETWORK_MAX_UNSETTLED_PER_TEAM = 5
    assert _batch(net, [_item()] * 3).status_code == 202

    over = _batch(net, [_item()] * 3)
    assert over.status_code == 429
    body = over.json()
    assert body["code"] == "too_many_unsettled_jobs" and body["limit"] == 5
    assert "3 unsettled jobs" in body["detail"] and "3 more" in body["detail"]
    assert over["Retry-After"] == "10"
    assert Job.dangerously_unscoped.count() == 3
    assert _batch(net, [_item()] * 2).status_code == 202  # exactly up to the cap
    assert net.submit().status_code == 429  # the single call sees the same cap
    assert Job.dangerously_unscoped.filter(status=JobStatus.QUEUED).count() == 5


@pytest.mark.usefixtures("queue_without_hosts")
def test_the_submission_rate_counts_jobs_not_calls(net, settings):
    settings.NETWORK_SUBMIT_LIMIT = 3
    settings.NETWORK_SUBMIT_WINDOW_S = 60
    over = _batch(net, [_item()] * 4)
    assert over.status_code == 429
    assert over.json()["code"] == "rate_limited" and over.json()["limit"] == 3
    assert 1 <= int(over["Retry-After"]) <= 60
    assert Job.dangerously_unscoped.count() == 0
    assert _batch(net, [_item()] * 3, net.other_buyer_token).status_code == 202  # its own budget


@pytest.mark.usefixtures("queue_without_hosts")
def test_batches_and_single_submissions_share_one_budget(net, settings):
    settings.NETWORK_SUBMIT_LIMIT = 3
    assert _batch(net, [_item()] * 2).status_code == 202
    assert net.submit().status_code == 202
    assert net.submit().status_code == 429
    assert _batch(net, [_item()]).status_code == 429
    assert Job.dangerously_unscoped.count() == 3


@pytest.mark.usefixtures("queue_without_hosts")
def test_more_jobs_than_the_batch_maximum_are_refused(net, settings):
    settings.NETWORK_SUBMIT_LIMIT = 1000
    settings.NETWORK_MAX_UNSETTLED_PER_TEAM = 1000
    response = _batch(net, [_item()] * 101)
    assert response.status_code == 400
    assert "no more than 100" in str(response.json()["jobs"])
    assert _batch(net, []).status_code == 400
    assert Job.dangerously_unscoped.count() == 0
    assert _batch(net, [_item()] * 100).status_code == 202
    # A deployment may set it lower (or higher): the call follows the setting.
    settings.NETWORK_SUBMIT_BATCH_MAX = 2
    assert _batch(net, [_item()] * 3).status_code == 400
    assert _batch(net, [_item()] * 2).status_code == 202
    assert Job.dangerously_unscoped.count() == 102


def test_a_model_no_online_host_serves_refuses_the_whole_batch(net):
    make_catalog("big-q8")
    net.host("h1", models=["tiny-q4"])
    response = _batch(net, [_item(), _item(model="big-q8"), _item()])
    assert response.status_code == 503
    body = response.json()
    assert body["code"] == "no_host_online" and body["model"] == "big-q8"
    assert "No online host serves big-q8" in body["detail"]
    assert int(response["Retry-After"]) > 0
    assert Job.dangerously_unscoped.count() == 0


def test_a_read_only_token_cannot_submit_a_batch(net):
    net.host("h1")
    _, read_only = teams.issue_token(net.buyer, "read-only")
    assert _batch(net, [_item()], read_only).status_code == 403
    assert Job.dangerously_unscoped.count() == 0


def test_a_token_cannot_submit_a_batch_for_another_team(net):
    net.host("h1")
    assert _batch(net, [_item()], team="other-buyer").status_code == 404
    assert Job.dangerously_unscoped.count() == 0


@pytest.mark.usefixtures("queue_without_hosts")
def test_a_user_in_several_teams_says_which_team_submits_the_batch(net):
    user = make_user("two-teams")
    teams.create_team("first", "First", owner=user)
    second = teams.create_team("second", "Second", owner=user)
    client = APIClient()
    client.force_login(user)
    body = {"jobs": [_item(), _item()]}
    assert client.post("/v1/jobs/batch", body, format="json").status_code == 400
    response = client.post("/v1/jobs/batch", {**body, "team": "second"}, format="json")
    assert response.status_code == 202
    assert {job.team for job in Job.dangerously_unscoped.all()} == {second}
    assert client.post("/v1/jobs/batch", {**body, "team": "buyer"}, format="json").status_code == 404
