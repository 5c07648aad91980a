"""Abuse limits on POST /v1/jobs: a submission rate and a cap on unsettled jobs, per team, and
no job at all for a model that no online host serves.

A refused submission answers 429 (or 503) with Retry-After and a JSON error, creates no job, and
so can never count on the public /v1/slo (docs/routing.md, "Abuse limits")."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from benchmarks.models import Job
from benchmarks.network import jobs
from tests.helpers.network import T0


@pytest.fixture
def small_limits(settings):
    settings.NETWORK_SUBMIT_LIMIT = 1000
    settings.NETWORK_MAX_UNSETTLED_PER_TEAM = 5


def _slo_week(at) -> dict:
    with time_machine.travel(at, tick=False):
        body = Client().get("/v1/slo").json()
    return body["models"][0]["windows"]["7d"]


@pytest.mark.usefixtures("queue_without_hosts")
def test_a_buyer_over_the_unsettled_cap_gets_429s_and_cannot_sink_the_public_success_rate(
        net, small_limits):
    # No host serves the model: every accepted job fails `no_host` after the queue deadline.
    with time_machine.travel(T0, tick=False):
        answers = [net.submit() for _ in range(30)]

    accepted = [a for a in answers if a.status_code == 202]
    refused = [a for a in answers if a.status_code == 429]
    assert (len(accepted), len(refused)) == (5, 25)
    assert refused[0]["Retry-After"] == "10"
    assert refused[0].json()["code"] == "too_many_unsettled_jobs"
    assert refused[0].json()["limit"] == 5
    assert "5 unsettled jobs" in refused[0].json()["detail"]
    assert Job.dangerously_unscoped.count() == 5
    # Another team is not held back by this one's cap.
    with time_machine.travel(T0, tick=False):
        assert net.submit(net.other_buyer_token).status_code == 202

    after_deadline = T0 + timedelta(seconds=121)
    assert jobs.fail_past_queue_deadline(after_deadline) == 6
    week = _slo_week(after_deadline)
    # The 25 refused never existed; the 6 accepted that no host took are counted as such.
    assert (week["completed"], week["failed"], week["no_host"]) == (0, 0, 6)
    # Once its jobs have settled, the team may submit again.
    with time_machine.travel(after_deadline, tick=False):
        assert net.submit().status_code == 202


@pytest.mark.usefixtures("queue_without_hosts")
def test_a_buyer_over_the_submission_rate_gets_429_until_the_window_passes(net, settings):
    settings.NETWORK_SUBMIT_LIMIT = 3
    settings.NETWORK_SUBMIT_WINDOW_S = 60
    with time_machine.travel(T0, tick=False) as clock:
        assert [net.submit().status_code for _ in range(3)] == [202, 202, 202]
        over = net.submit()
        assert over.status_code == 429
        assert over.json()["code"] == "rate_limited"
        assert over.json()["detail"] == "Too many job submissions from this team: at most 3 per 60 s."
        assert 1 <= int(over["Retry-After"]) <= 60
        assert Job.dangerously_unscoped.count() == 3
        assert net.submit(net.other_buyer_token).status_code == 202  # its own budget
        clock.shift(timedelta(seconds=61))
        assert net.submit().status_code == 202


def test_malformed_submissions_count_against_the_rate_too(net, settings):
    settings.NETWORK_SUBMIT_LIMIT = 2
    with time_machine.travel(T0, tick=False):
        assert net.submit(max_tokens=0).status_code == 400
        assert net.submit(max_tokens=0).status_code == 400
        assert net.submit().status_code == 429
    assert Job.dangerously_unscoped.count() == 0


def test_a_job_for_a_model_no_online_host_serves_is_refused_and_never_counts(net):
    """Issue 19, finding 3: 100 accepted jobs that no host could take used to fail `no_host`
    and drive the model's public success rate to 0 %."""
    with time_machine.travel(T0, tick=False) as clock:
        _, token = net.host("h1")
        net.submit_id()
        net.run(token)  # one completed job: the model's success rate is 100 %
        clock.move_to(T0 + timedelta(minutes=5))  # h1's heartbeat is stale: no host is online
        answers = [net.submit() for _ in range(30)]

    assert {a.status_code for a in answers} == {503}
    body = answers[0].json()
    assert body["code"] == "no_host_online" and body["model"] == "tiny-q4"
    assert "No online host serves tiny-q4" in body["detail"]
    assert int(answers[0]["Retry-After"]) > 0
    assert Job.dangerously_unscoped.count() == 1  # none of the 30 was created
    week = _slo_week(T0 + timedelta(minutes=10))
    assert (week["completed"], week["failed"]) == (1, 0)


def test_a_model_some_online_host_serves_is_accepted_whoever_operates_the_host(net):
    net.host("h1", models=["tiny-q4"])
    assert net.submit().status_code == 202
    assert net.submit(net.other_buyer_token).status_code == 202
