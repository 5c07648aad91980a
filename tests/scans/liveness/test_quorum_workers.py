"""The quorum of locations, with real workers: three Celery workers, each serving one location's
queue (scans.site, scans.eu, scans.far), probe loopback targets that sit behind a firewall of
their own. The far worker's probes leave from 127.0.0.2, the eu worker's from 127.0.0.3
(SCAN_SOURCE_ADDRESS), and the firewall closes a blocked source's connections unanswered. The
test plays the beat's probe pass (dispatch_due) round by round; every location probes every
endpoint it was given and says so in its own ProbeResult rows.

What a team sees: an endpoint unreachable from one of its two locations, or from one of its
three, is "degraded: unreachable from far", told once, and never down; once a second of three
locations confirms it, it is down, told once, its cause naming both; when every location
answers again it is up, told "down_recovered", with a graded scan brought forward. An endpoint
probed from one location keeps the single location's word: two failed probes, down."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from contextlib import ExitStack
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone

from scans.liveness.dispatch import dispatch_due
from scans.models import AlertEvent, Endpoint, LivenessState, ProbeHour, ProbeResult
from tests.helpers import workers
from tests.helpers.processes import wait_for
from tests.helpers.servers import (
    END_CHUNKS,
    SSE_HEAD,
    http_chunk,
    json_response,
    raw_server,
    read_request,
)
from tests.helpers.workers import stop, worker_env
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

LOCATIONS = ("site", "eu", "far")
QUEUES = tuple(f"scans.{name}" for name in LOCATIONS)
# Where each location's probes leave from (only loopback addresses, ever); "" the system's
# choice, 127.0.0.1 towards a 127.0.0.1 target.
SOURCE = {"site": "", "eu": "127.0.0.3", "far": "127.0.0.2"}
FAR, EU, SITE = "127.0.0.2", "127.0.0.3", "127.0.0.1"

MODELS = {"object": "list", "data": [{"id": "m", "object": "model"}]}
CHAT = (b'data: {"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n' * 2
        + b"data: [DONE]\n\n")


def _purge() -> None:
    with app.connection_for_write() as conn:  # queues the test settings' workers do not read
        for queue in QUEUES:
            conn.default_channel.queue_purge(queue)


@pytest.fixture(autouse=True)
def _three_locations(settings):
    settings.SCAN_LOCATIONS = list(LOCATIONS)
    settings.SCAN_DEFAULT_LOCATION = "site"
    app.control.purge()
    _purge()
    yield
    app.control.purge()
    _purge()


class Firewalled:
    """An OpenAI-compatible target behind a firewall: a connection from a blocked source
    address is closed at once, unanswered; others get /v1/models and a short SSE answer, with
    keep-alive. `seen` counts connections by source address."""

    def __init__(self) -> None:
        self.blocked: frozenset[str] = frozenset()
        self.seen: Counter[str] = Counter()

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")[0]
        self.seen[peer] += 1
        if peer in self.blocked:
            return  # raw_server closes it: no answer at all
        while True:
            try:
                head, _ = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            method, path = head.split(b"\r\n", 1)[0].split(b" ")[:2]
            if method == b"GET" and path == b"/v1/models":
                writer.write(json_response(200, MODELS, b"OK"))
            elif method == b"POST" and path == b"/v1/chat/completions":
                writer.write(SSE_HEAD + http_chunk(CHAT) + END_CHUNKS)
            else:
                writer.write(json_response(404, {"error": {"message": "not found"}}, b"Not Found"))
            await writer.drain()


def _succeeded(log) -> int:
    return len(re.findall(r"run_probes\[[^\]]+\] succeeded in ", log.read_text()))


def _kinds(endpoint: Endpoint) -> list[str]:
    return list(AlertEvent.objects.for_team(endpoint.team_id).filter(endpoint=endpoint)
                .order_by("created_at", "id").values_list("kind", flat=True))


def _standing(endpoint: Endpoint) -> dict[str, bool]:
    return dict(LivenessState.objects.for_team(endpoint.team_id).filter(endpoint=endpoint)
                .values_list("location", "down"))


class Rounds:
    """The beat's probe pass, played one round at a time, each waited for in every worker."""

    def __init__(self, endpoints: list[Endpoint], logs: dict) -> None:
        self.endpoints = endpoints
        self.logs = logs
        self.played = 0

    def play(self) -> dict[tuple[str, str], ProbeResult]:
        """Make every endpoint due, send its probes, wait until each location's worker has
        probed and recorded them; this round's one result per (endpoint, location)."""
        self.played += 1
        started = timezone.now()
        Endpoint.dangerously_unscoped.filter(pk__in=[e.pk for e in self.endpoints]).update(
            next_probe_at=None)
        expected = {(e.name, location) for e in self.endpoints for location in e.locations}
        assert dispatch_due() == len(expected)
        # One task per location and round (a batch holds all of a location's endpoints); the
        # log line comes after the task returned, so after its results and their verdicts.
        wait_for(lambda: all(_succeeded(log) == self.played for log in self.logs.values()), 60,
                 f"round {self.played}'s probes from every location")
        rows = list(ProbeResult.dangerously_unscoped.filter(
            endpoint__in=self.endpoints, at__gte=started).select_related("endpoint"))
        found = {(r.endpoint.name, r.location): r for r in rows}
        assert len(rows) == len(found), "one result per endpoint and location in a round"
        assert set(found) == expected
        return found


def test_majority_of_locations_decides_down_a_minority_degraded(world, tmp_path):
    env = worker_env(SCAN_LOCATIONS=",".join(LOCATIONS), DEBUG="0", ALLOWED_HOSTS="127.0.0.1")
    target, lone_target = Firewalled(), Firewalled()
    target.blocked = frozenset({FAR})  # the far location cannot reach it
    with ExitStack() as stack:
        port, lone_port = (stack.enter_context(raw_server(t)) for t in (target, lone_target))
        later = timezone.now() + timedelta(hours=1)

        def create(name: str, port: int, locations: list[str]) -> Endpoint:
            return Endpoint.objects.for_team(world.team.pk).create(
                team=world.team, name=name, base_url=f"http://127.0.0.1:{port}/v1", model="m",
                locations=locations, confirm_after=2, probe_interval_s=30, next_scan_at=later)

        pair = create("two places", port, ["site", "far"])
        trio = create("three places", port, ["site", "eu", "far"])
        lone = create("one place", lone_port, ["site"])

        logs = {name: tmp_path / f"{name}.log" for name in LOCATIONS}
        for n, name in enumerate(LOCATIONS, start=1):
            located = {**env, "SCAN_SOURCE_ADDRESS": SOURCE[name]}
            stack.callback(stop, workers.start("-Q", f"scans.{name}", "-n", f"{name}@box-{n}",
                                              env=located, log=logs[name]))
        for name, log in logs.items():
            wait_for(lambda log=log: " ready." in log.read_text(), 120, f"the {name} worker")
        rounds = Rounds([pair, trio, lone], logs)

        # Far is blocked: its probes fail, everyone else's answer.
        for _ in range(2):
            results = rounds.play()
            assert {key for key, r in results.items() if not r.ok} == {
                ("two places", "far"), ("three places", "far")}
            assert all(r.cause == "" for r in results.values() if r.ok)
            for key in [("two places", "far"), ("three places", "far")]:
                assert results[key].counted and results[key].cause  # a sentence on the far side
        # Each worker probed from its own source address; the firewall saw every one of them.
        assert {FAR, EU, SITE} <= set(target.seen)
        for endpoint in (pair, trio):
            endpoint.refresh_from_db()
            assert _standing(endpoint) == {location: location == "far"
                                           for location in endpoint.locations}
            # A minority confirms it down: degraded, never down.
            assert endpoint.liveness == "degraded", endpoint.liveness_cause
            assert endpoint.liveness_cause.startswith("unreachable from far: ")
            assert _kinds(endpoint) == ["unreachable_from"]
        lone.refresh_from_db()
        assert (lone.liveness, lone.liveness_cause, _kinds(lone)) == ("up", "", [])

        # Eu is blocked as well: two of three confirm the trio down; the pair (site and far)
        # stays degraded. The lone endpoint's one location, site, is blocked by its own target.
        target.blocked = frozenset({FAR, EU})
        lone_target.blocked = frozenset({SITE})
        for _ in range(2):
            results = rounds.play()
            assert {key for key, r in results.items() if not r.ok} == {
                ("two places", "far"), ("three places", "far"), ("three places", "eu"),
                ("one place", "site")}
        trio.refresh_from_db()
        assert _standing(trio) == {"site": False, "eu": True, "far": True}
        assert trio.liveness == "down", trio.liveness_cause
        assert "from eu and far" in trio.liveness_cause
        assert _kinds(trio) == ["unreachable_from", "down"]
        pair.refresh_from_db()
        assert pair.liveness == "degraded" and pair.liveness_cause.startswith("unreachable from far: ")
        assert _kinds(pair) == ["unreachable_from"]
        lone.refresh_from_db()
        assert _standing(lone) == {"site": True}
        assert lone.liveness == "down" and lone.liveness_cause
        assert "from " not in lone.liveness_cause  # one location: no "from site"
        assert _kinds(lone) == ["down"]

        # Every location answers again: up, once two good probes in a row say so everywhere.
        target.blocked = lone_target.blocked = frozenset()
        for _ in range(2):
            results = rounds.play()
            assert all(r.ok for r in results.values())
        now = timezone.now()
        for endpoint in (pair, trio, lone):
            endpoint.refresh_from_db()
            standing = _standing(endpoint)
            assert not any(standing.values()), (endpoint.name, standing)
            # Every location confirms it up, so the endpoint is up, whichever location's
            # batch was recorded last and however close together they came.
            assert (endpoint.liveness, endpoint.liveness_cause) == ("up", ""), (
                endpoint.name, standing, _kinds(endpoint))
        assert _kinds(pair) == ["unreachable_from", "unreachable_from_recovered"]
        assert _kinds(lone) == ["down", "down_recovered"]
        # The trio's two locations come back in either order (down → degraded → up), or
        # together (down → up): one "down_recovered" either way, then at most the last one back.
        kinds = _kinds(trio)
        assert kinds[:3] == ["unreachable_from", "down", "down_recovered"]
        assert kinds[3:] in ([], ["unreachable_from_recovered"])
        # Answering again after down: a graded scan soon after; the pair was never down.
        assert trio.next_scan_at <= now and lone.next_scan_at <= now
        assert pair.next_scan_at == later

        # Every probe stored per location, and its hour counted.
        for endpoint, failed in [(pair, {"site": 0, "far": 4}),
                                 (trio, {"site": 0, "eu": 2, "far": 4}), (lone, {"site": 2})]:
            rows = ProbeResult.objects.for_team(world.team.pk).filter(endpoint=endpoint)
            assert Counter(rows.values_list("location", flat=True)) == {
                location: 6 for location in endpoint.locations}
            assert {loc: rows.filter(location=loc, ok=False).count()
                    for loc in endpoint.locations} == failed
            hours = ProbeHour.objects.for_team(world.team.pk).filter(endpoint=endpoint)
            assert {loc: hours.filter(location=loc).aggregate(p=Sum("probes"), f=Sum("failed"))
                    for loc in endpoint.locations} == {
                loc: {"p": 6, "f": failed[loc]} for loc in endpoint.locations}
        for name, log in logs.items():
            assert "raised unexpected" not in log.read_text(), name
