"""A channel's "Send test" cannot tie up the site: each team and each account may send a few a
minute (then 429 with Retry-After and a clear message, on the page and on the API), a worker
sends them (under gunicorn, /healthz answers while tests stall on a receiver that never
answers), and a test message is tried once: neither the beat's retry pass nor a real worker
sends it again. With the task queue unreachable a test answers 503 with Retry-After and keeps
nothing.

Receivers are real loopback servers; one accepts every connection and never answers."""

from __future__ import annotations

import asyncio
import re
import threading
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import time_machine
from django.test import Client
from django.urls import reverse

from accounts import teams
from accounts.models import Membership, Role
from scans.models import AlertEvent, Delivery, DeliveryStatus, NotificationChannel
from scans.notify.channels import delivery, service
from tests.conftest import bearer, clear_cache, make_user
from tests.helpers import workers
from tests.helpers.factories import make_channel
from tests.helpers.processes import gunicorn, wait_for
from tests.helpers.servers import SilentReceiver, json_response, raw_server, read_request
from tests.helpers.workers import stop, worker_env
from tokvera_site.celery import app
from tokvera_site.devservices import EmbeddedRedis

T0 = datetime(2026, 12, 1, 12, 0, 5, tzinfo=UTC)  # early in a rate-limit window


class Failing:
    """A receiver that answers every request 503 (an answer an alert would be retried on)."""

    def __init__(self):
        self.requests = 0

    async def handler(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        self.requests += 1
        writer.write(json_response(503, {"error": "busy"}))
        await writer.drain()


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _test_url(channel: NotificationChannel) -> str:
    return reverse("channel-test", args=[channel.public_id])


def _api_test_url(channel: NotificationChannel) -> str:
    return reverse("api-channel-test", kwargs={"public_id": channel.public_id})


def _email(team) -> NotificationChannel:
    return NotificationChannel.dangerously_unscoped.get(team=team, name=service.EMAIL_CHANNEL_NAME)


@pytest.mark.django_db
def test_a_team_past_its_test_limit_is_refused_with_429_on_the_page_and_the_api(world, api, eager_tasks):
    clear_cache()  # the counters are keyed by team and account ids, which a new database reuses
    channel = _email(world.team)
    admin = _client(world.admin)
    with time_machine.travel(T0, tick=False):
        sent = [admin.post(_test_url(channel)) for _ in range(delivery.TESTS_PER_WINDOW)]
        page = admin.post(_test_url(channel))
        by_api = api.post(_api_test_url(channel), **bearer(world.read_write_token))
        elsewhere = _client(world.outsider).post(_test_url(_email(world.other_team)))

    assert [answer.status_code for answer in sent] == [302] * delivery.TESTS_PER_WINDOW
    assert page.status_code == 429 and int(page["Retry-After"]) >= 1
    assert "Too many test messages from this team" in page.content.decode()
    assert by_api.status_code == 429 and int(by_api["Retry-After"]) >= 1
    assert "Too many test messages from this team" in by_api.json()["detail"]
    assert elsewhere.status_code == 302  # another team has its own count
    tests = Delivery.dangerously_unscoped.filter(channel=channel)
    assert tests.count() == delivery.TESTS_PER_WINDOW  # nothing kept of the refused ones


@pytest.mark.django_db
def test_an_account_in_many_teams_is_refused_past_its_own_limit(eager_tasks):
    clear_cache()
    person = make_user()
    made = []
    for i in range(3):
        owner = make_user()
        made.append(teams.create_team(f"team-{i}-{owner.pk}", f"Team {i}", owner=owner))
        Membership.dangerously_unscoped.create(team=made[-1], user=person, role=Role.ADMIN)
    client = _client(person)
    answers = []
    with time_machine.travel(T0, tick=False):
        for team in made:  # fewer than each team's limit, more than the account's in all
            answers += [client.post(_test_url(_email(team))) for _ in range(delivery.TESTS_PER_WINDOW - 1)]
    codes = [answer.status_code for answer in answers]
    assert codes.count(302) == delivery.ACCOUNT_TESTS_PER_WINDOW
    refused = answers[codes.index(429)]
    assert "Too many test messages from your account" in refused.content.decode()
    assert int(refused["Retry-After"]) >= 1


@pytest.mark.django_db
def test_a_failed_test_message_is_never_tried_again(world, settings, eager_tasks):
    clear_cache()
    settings.OUTBOUND_ALLOW = ["loopback"]
    receiver = Failing()
    with raw_server(receiver.handler) as port:
        channel = make_channel(world.team, "webhook", name="hook", url=f"http://127.0.0.1:{port}/hook")
        with time_machine.travel(T0, tick=False):
            page = _client(world.admin).post(_test_url(channel), follow=True).content.decode()
        assert "The test message to hook failed: the receiver answered HTTP 503." in page
        (row,) = Delivery.dangerously_unscoped.filter(channel=channel)
        assert (row.status, row.attempts, row.next_attempt_at) == (DeliveryStatus.FAILED, 1, None)

        # The beat's retry pass, run long after every retry an alert would get: nothing is sent.
        for hours in (1, 5, 24):
            with time_machine.travel(T0 + timedelta(hours=hours), tick=False):
                delivery.deliver_due_notifications()
    assert receiver.requests == 1
    row.refresh_from_db()
    assert (row.status, row.attempts) == (DeliveryStatus.FAILED, 1)


@pytest.mark.django_db
def test_a_test_message_whose_worker_died_mid_send_fails_instead_of_being_sent_again(
    world, settings, eager_tasks
):
    settings.OUTBOUND_ALLOW = ["loopback"]
    receiver = Failing()
    with raw_server(receiver.handler) as port:
        channel = make_channel(world.team, "webhook", name="hook", url=f"http://127.0.0.1:{port}/hook")
        with time_machine.travel(T0, tick=False):
            row = delivery.send_test(channel, queue=False)
            # What a worker killed while sending leaves: its claim taken, no outcome written.
            Delivery.dangerously_unscoped.filter(pk=row.pk).update(
                attempts=1, next_attempt_at=T0 + timedelta(seconds=delivery.CLAIM_S))
        with time_machine.travel(T0 + timedelta(seconds=delivery.CLAIM_S + 60), tick=False):
            assert delivery.deliver_due_notifications() == 1
            assert delivery.deliver_due_notifications() == 0
    assert receiver.requests == 0
    row.refresh_from_db()
    assert row.status == DeliveryStatus.FAILED and row.last_error == delivery.TEST_INTERRUPTED


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_healthz_answers_while_test_messages_stall_on_a_receiver_that_never_answers(world):
    clear_cache()
    app.control.purge()
    receiver = SilentReceiver()
    in_flight = 4  # twice the site's threads
    worker = workers.start("-Q", "celery", "-n", "channel-tests@%h")
    try:
        with raw_server(receiver.handler) as port, gunicorn(
            worker_env(DEBUG="0", ALLOWED_HOSTS="127.0.0.1"), threads=2, timeout_s=120
        ) as site:
            channel = make_channel(world.team, "webhook", name="hook", url=f"http://127.0.0.1:{port}/hook")
            url = f"{site}{_api_test_url(channel)}"
            answers: list[int] = []

            def send_test() -> None:
                with httpx.Client(timeout=120) as client:
                    answers.append(client.post(url, **_headers(world.read_write_token)).status_code)

            senders = [threading.Thread(target=send_test) for _ in range(in_flight)]
            for sender in senders:
                sender.start()
            wait_for(lambda: receiver.accepted >= 1, 60, "a test message stalling on the receiver")
            with httpx.Client(base_url=site, timeout=120) as client:
                health = client.get("/healthz")
            gave_up_before_healthz = receiver.closed
            for sender in senders:
                sender.join()
            assert (health.status_code, health.json()["status"]) == (200, "ok")
            assert gave_up_before_healthz == 0  # answered while every test was still stalled
            assert answers == [202] * in_flight
            rows = Delivery.dangerously_unscoped.filter(channel=channel)
            wait_for(lambda: not rows.filter(status=DeliveryStatus.PENDING).exists(), 120,
                     "the worker to settle the tests")
        # Tried once each by the real worker, and failed in words that tell no port state.
        assert set(rows.values_list("status", "attempts", "last_error")) == {
            (DeliveryStatus.FAILED, 1, "not reachable from this site")}
        assert receiver.accepted == in_flight
    finally:
        stop(worker)


def _headers(token: str) -> dict:
    return {"headers": {"Authorization": bearer(token)["HTTP_AUTHORIZATION"]}}


def _csrf(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)[1]


@pytest.mark.django_db(transaction=True)
def test_with_the_task_queue_unreachable_a_test_answers_503_and_keeps_nothing(world):
    clear_cache()
    channel = _email(world.team)
    signed_in = _client(world.admin)  # a session in the database, which the site reads
    with EmbeddedRedis() as broker:
        env = worker_env(DEBUG="0", ALLOWED_HOSTS="127.0.0.1", CELERY_BROKER_URL=broker.url(0))
        with gunicorn(env, threads=2, timeout_s=120) as site:
            browser = httpx.Client(base_url=site, timeout=60,
                                   cookies={"sessionid": signed_in.cookies["sessionid"].value})
            channels = browser.get(reverse("team-channels", args=[world.team.slug]))
            assert channels.status_code == 200
            broker.stop()
            by_api = httpx.post(f"{site}{_api_test_url(channel)}", timeout=60,
                                **_headers(world.read_write_token))
            by_page = browser.post(_test_url(channel), data={"csrfmiddlewaretoken": _csrf(channels.text)})
    assert by_api.status_code == 503 and int(by_api.headers["Retry-After"]) > 0
    assert "task queue is unreachable" in by_api.json()["detail"]
    assert by_page.status_code == 503 and int(by_page.headers["Retry-After"]) > 0
    assert "task queue is unreachable" in by_page.text
    assert not Delivery.dangerously_unscoped.filter(channel=channel).exists()
    assert not AlertEvent.dangerously_unscoped.filter(team=world.team, kind="test").exists()
