"""The client address behind a reverse proxy, and failed-token limits that never refuse a
valid token.

Behind the documented proxy every connection comes from the proxy's address. With the failed-
authentication limit keyed by REMOTE_ADDR, 30 garbage tokens a minute from anyone turned away
every valid token of every client (CI pushes, scrapes, buyers, host leases). Now one setting,
TRUSTED_PROXY_COUNT, says how many proxies in front append to X-Forwarded-For; the client is
the address that many hops from its end, for the token limits, the host fast path, the
heartbeat server and the sign-in lockout alike. And a token that checks out is answered even
from an address over the limit: failures are counted and refused, valid credentials are not.

The site runs for real (gunicorn, uvicorn); the test plays the proxy by sending the header a
proxy that appends the connection's address would send. The addresses in it are strings in
a header only: every connection goes to loopback.
"""

from __future__ import annotations

import secrets
import sys
import uuid
from contextlib import contextmanager

import httpx
import pytest
from django.test import Client

from accounts import teams
from benchmarks.network import hosts
from tests.conftest import free_port, make_user
from tests.helpers.network import make_catalog
from tests.helpers.processes import accepts, gunicorn, running, wait_for
from tests.helpers.workers import worker_env

LIMIT = 5
# Counts are kept in fixed windows: a day-long one never rolls over while a test counts.
WINDOW_S = "86400"
BEAT = {"models": ["tiny-q4"], "slots": 1}
GARBAGE_TEAM = "Bearer tkv_" + "z" * 40
GARBAGE_HOST = "Bearer tkh_" + "q" * 40


def _address() -> str:
    """A documentation address of its own per test run (the counters live in the shared
    cache, where another run's failures in the same minute would count)."""
    return f"198.51.{secrets.randbelow(100) + 100}.{secrets.randbelow(250) + 1}"


def _via_proxy(client: str, forged: str | None = None) -> dict[str, str]:
    """The X-Forwarded-For a proxy that appends the connection's address sends on: the
    caller's own header (anything it likes) first, the address the proxy saw last."""
    return {"X-Forwarded-For": f"{forged}, {client}" if forged else client}


@contextmanager
def _gunicorn(tmp_path, **env: str):
    settings = worker_env(DEBUG="0", ALLOWED_HOSTS="127.0.0.1", AUTH_FAILURE_LIMIT=str(LIMIT),
                          AUTH_FAILURE_WINDOW_S=WINDOW_S,
                          TRUSTED_PROXY_COUNT="1", **env)
    with gunicorn(settings, workers=2, threads=4, log=tmp_path / "gunicorn.log") as url, \
            httpx.Client(base_url=url, timeout=30) as client:
        yield client


def _flood(site: httpx.Client, path: str, authorization: str, address: str,
           forged: str | None = None, **kwargs) -> list[int]:
    return [site.post(path, headers={"Authorization": authorization,
                                     **_via_proxy(address, forged)}, **kwargs).status_code
            if path.startswith("/v1/") else
            site.get(path, headers={"Authorization": authorization,
                                    **_via_proxy(address, forged)}).status_code
            for _ in range(LIMIT + 2)]


@pytest.mark.django_db(transaction=True)
def test_behind_the_proxy_one_clients_garbage_blocks_neither_another_client_nor_a_valid_token(
        world, tmp_path):
    flooder, other = _address(), _address()
    with _gunicorn(tmp_path) as site:
        codes = _flood(site, "/api/v1/endpoints/", GARBAGE_TEAM, flooder)
        # Another client behind the same proxy: its valid token, and even its own typo, are
        # its own business.
        others_valid = site.get("/api/v1/endpoints/", headers={
            "Authorization": f"Bearer {world.read_only_token}", **_via_proxy(other)})
        others_typo = site.get("/api/v1/endpoints/", headers={
            "Authorization": GARBAGE_TEAM, **_via_proxy(other)})
        # The flooding address itself: a token that checks out is answered all the same.
        flooders_valid = site.get("/api/v1/endpoints/", headers={
            "Authorization": f"Bearer {world.read_write_token}", **_via_proxy(flooder)})
        still_blocked = site.get("/api/v1/endpoints/", headers={
            "Authorization": GARBAGE_TEAM, **_via_proxy(flooder)})

    assert codes[:LIMIT] == [401] * LIMIT and set(codes[LIMIT:]) == {429}, codes
    assert others_valid.status_code == 200, others_valid.text
    assert others_typo.status_code == 401, others_typo.text
    assert flooders_valid.status_code == 200, flooders_valid.text
    assert still_blocked.status_code == 429
    assert int(still_blocked.headers["Retry-After"]) > 0
    assert "failed authentications from this address" in still_blocked.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_a_forged_forwarded_for_cannot_pick_another_clients_address(world, tmp_path):
    """Only the last hop is the proxy's: whatever the caller put in front of it is ignored."""
    attacker, victim = _address(), _address()
    with _gunicorn(tmp_path) as site:
        codes = _flood(site, "/api/v1/endpoints/", GARBAGE_TEAM, attacker, forged=victim)
        victims_typo = site.get("/api/v1/endpoints/", headers={
            "Authorization": GARBAGE_TEAM, **_via_proxy(victim)})
        attackers_next = site.get("/api/v1/endpoints/", headers={
            "Authorization": GARBAGE_TEAM, **_via_proxy(attacker, forged=_address())})

    assert codes[:LIMIT] == [401] * LIMIT and set(codes[LIMIT:]) == {429}, codes
    assert victims_typo.status_code == 401, victims_typo.text  # not blocked by the attacker
    assert attackers_next.status_code == 429  # a new forged address does not reset it


@pytest.mark.django_db(transaction=True)
def test_host_calls_from_a_blocked_address_with_a_valid_token_are_answered(tmp_path):
    """The host fast path (heartbeat, lease, complete) and the DRF host views: garbage from
    one client is refused once over the limit; a valid host token from that same client is
    served, and another client's garbage is still only a 401."""
    make_catalog("tiny-q4")
    team = teams.create_team(f"ops-{uuid.uuid4().hex[:6]}", "Ops", owner=make_user())
    _, token = hosts.create_host(team, "rig-1")
    flooder, other = _address(), _address()
    valid = {"Authorization": f"Bearer {token}", **_via_proxy(flooder)}
    with _gunicorn(tmp_path) as site:
        beats = _flood(site, "/v1/hosts/heartbeat", GARBAGE_HOST, flooder, json=BEAT)
        leases = [site.post("/v1/hosts/lease", json={}, headers={
            "Authorization": GARBAGE_HOST, **_via_proxy(flooder)}).status_code for _ in range(2)]
        beat = site.post("/v1/hosts/heartbeat", json=BEAT, headers=valid)
        lease = site.post("/v1/hosts/lease", json={}, headers=valid)
        # A query string: the fast path leaves it to the DRF view.
        drf_lease = site.post("/v1/hosts/lease?via=drf", json={}, headers=valid)
        complete = site.post(f"/v1/jobs/{uuid.uuid4()}/complete", headers=valid, json={
            "ttft_ms": 1, "completion_tokens": 1, "elapsed_ms": 2, "result": {"content": "ok"}})
        others = site.post("/v1/hosts/heartbeat", json=BEAT, headers={
            "Authorization": GARBAGE_HOST, **_via_proxy(other)})

    assert beats[:LIMIT] == [401] * LIMIT and set(beats[LIMIT:]) == {429}, beats
    assert leases == [429, 429]
    assert beat.status_code == 200, beat.text
    assert lease.status_code == 204, lease.text
    assert drf_lease.status_code == 204, drf_lease.text
    assert complete.status_code == 404, complete.text  # no such job: answered, not refused
    assert others.status_code == 401, others.text


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_server_reads_the_client_from_the_same_setting(tmp_path):
    make_catalog("tiny-q4")
    team = teams.create_team(f"ops-{uuid.uuid4().hex[:6]}", "Ops", owner=make_user())
    _, token = hosts.create_host(team, "rig-1")
    flooder, other = _address(), _address()
    port = free_port()
    env = worker_env(DEBUG="0", ALLOWED_HOSTS="127.0.0.1", AUTH_FAILURE_LIMIT=str(LIMIT),
                          AUTH_FAILURE_WINDOW_S=WINDOW_S,
                     TRUSTED_PROXY_COUNT="1")
    with running([sys.executable, "-m", "uvicorn", "tokvera_site.heartbeats_asgi:application",
                  "--port", str(port), "--no-proxy-headers"], env,
                 log=tmp_path / "uvicorn.log"):
        wait_for(lambda: accepts(port), 60, "uvicorn")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as server:
            codes = _flood(server, "/v1/hosts/heartbeat", GARBAGE_HOST, other, forged=flooder,
                           json=BEAT)
            forged_victim = server.post("/v1/hosts/heartbeat", json=BEAT, headers={
                "Authorization": GARBAGE_HOST, **_via_proxy(flooder)})
            valid = server.post("/v1/hosts/heartbeat", json=BEAT, headers={
                "Authorization": f"Bearer {token}", **_via_proxy(other)})

    assert codes[:LIMIT] == [401] * LIMIT and set(codes[LIMIT:]) == {429}, codes
    assert forged_victim.status_code == 401, forged_victim.text
    assert valid.status_code == 200, valid.text  # a first heartbeat: the full path


@pytest.mark.django_db
def test_sign_in_lockouts_count_the_forwarded_client(settings):
    """axes reads the client the same way: one client's failed sign-ins lock out that client
    (and the account), not every visitor behind the proxy."""
    settings.TRUSTED_PROXY_COUNT = 1
    settings.AXES_FAILURE_LIMIT = 3
    guesser, visitor = _address(), _address()
    make_user("victim-account")
    honest = make_user("honest-account", password="the right one, long enough")
    client = Client()
    for n in range(3):
        client.post("/login/", {"login": f"nobody-{n}", "password": "wrong"},
                    REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=f"{visitor}, {guesser}")
    locked = client.post("/login/", {"login": "victim-account", "password": "wrong"},
                         REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=guesser)
    signed_in = Client().post("/login/", {"login": honest.username,
                                          "password": "the right one, long enough"},
                              REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=visitor)

    assert locked.status_code == 429
    assert signed_in.status_code == 302, signed_in.content[:500]
