"""Failed token authentications are limited per client address, and a host's own heartbeat
allowance is spent only by the holder of its token.

Before: a stranger who knew a host token's 12-character prefix kept that host offline (16
garbage tokens with the prefix made the real host's heartbeat 429), and failed
authentications were not limited at all (300 in 2.7 s, each a cache and a database round trip).
"""

from __future__ import annotations

import secrets
import uuid
from contextlib import contextmanager

import httpx
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from accounts import credentials, teams
from benchmarks.network import hosts
from common import auth_failures
from tests.conftest import bearer, free_port, make_user
from tests.helpers.network import make_catalog
from tests.helpers.processes import gunicorn
from tests.helpers.workers import worker_env

LIMIT = 5
BEAT = {"models": ["tiny-q4"], "slots": 1}


@pytest.fixture
def small_limit(settings):
    settings.AUTH_FAILURE_LIMIT = LIMIT
    settings.AUTH_FAILURE_WINDOW_S = 60
    # A key prefix of its own: counters from other tests (same addresses) do not apply.
    settings.CACHES = {"default": {**settings.CACHES["default"],
                                   "KEY_PREFIX": f"t-{uuid.uuid4().hex[:12]}"}}


def _garbage_like(token: str, n: int) -> str:
    """The `n`th token with the same public prefix and a different secret."""
    return (token[: credentials.PREFIX_CHARS]
            + f"{n:04d}".ljust(len(token) - credentials.PREFIX_CHARS, "x"))


@pytest.mark.django_db
def test_an_address_that_keeps_failing_team_token_checks_gets_429_and_others_do_not(
        world, small_limit):
    api = APIClient()
    stranger = {"REMOTE_ADDR": "203.0.113.7"}
    answers = [api.get("/api/v1/endpoints/", **bearer("tkv_" + "z" * 40), **stranger)
               for _ in range(LIMIT + 2)]

    assert [a.status_code for a in answers] == [401] * LIMIT + [429, 429]
    assert int(answers[-1]["Retry-After"]) > 0
    assert "failed authentications from this address" in answers[-1].json()["detail"]
    # Failures are refused, valid credentials never are: a good token from that address is
    # answered, and the next failure from it is still a 429.
    assert api.get("/api/v1/endpoints/", **bearer(world.read_only_token),
                   **stranger).status_code == 200
    assert api.get("/api/v1/endpoints/", **bearer("tkv_" + "z" * 40),
                   **stranger).status_code == 429
    # Every other address, and the token itself, are unaffected.
    assert api.get("/api/v1/endpoints/", **bearer(world.read_only_token),
                   REMOTE_ADDR="198.51.100.9").status_code == 200


@pytest.mark.django_db
def test_revoked_and_malformed_tokens_count_as_failures_too(world, small_limit):
    api = APIClient()
    token_row, revoked = teams.issue_token(world.team, "read-only")
    teams.revoke_token(token_row)
    calls = [bearer(revoked), {"HTTP_AUTHORIZATION": "Bearer tkv_short"}] * LIMIT
    codes = [api.get("/api/v1/me/", **call, REMOTE_ADDR="203.0.113.8").status_code
             for call in calls]
    assert codes[:LIMIT] == [401] * LIMIT and set(codes[LIMIT:]) == {429}


@pytest.mark.django_db
def test_garbage_with_a_hosts_prefix_cannot_spend_that_hosts_heartbeat_allowance(settings,
                                                                                  small_limit):
    settings.NETWORK_HEARTBEAT_LIMIT = 3
    settings.AUTH_FAILURE_LIMIT = 100  # the stranger is not blocked yet: only the keying counts
    make_catalog("tiny-q4")
    team = teams.create_team("ops", "Ops", owner=make_user("ops-owner"))
    _, token = hosts.create_host(team, "rig-1")
    api = APIClient()
    for n in range(16):
        flood = api.post("/v1/hosts/heartbeat", BEAT, format="json",
                         **bearer(_garbage_like(token, n)), REMOTE_ADDR="203.0.113.9")
        assert flood.status_code == 401
    for _ in range(3):  # the host's own allowance is whole
        assert api.post("/v1/hosts/heartbeat", BEAT, format="json",
                        **bearer(token)).status_code == 200
    over = api.post("/v1/hosts/heartbeat", BEAT, format="json", **bearer(token))
    assert over.status_code == 429 and over.json()["code"] == "rate_limited"


@pytest.mark.django_db
def test_host_calls_through_drf_count_failures_per_address(small_limit):
    api = APIClient()
    codes = [api.post("/v1/hosts/lease", format="json", **bearer("tkh_" + "q" * 40),
                      REMOTE_ADDR="203.0.113.10").status_code for _ in range(LIMIT + 1)]
    assert codes == [401] * LIMIT + [429]


def _loopback() -> str:
    return f"127.{secrets.randbelow(250) + 1}.{secrets.randbelow(250)}.{secrets.randbelow(250) + 2}"


@contextmanager
def _gunicorn(tmp_path):
    # A cache namespace of its own, and the production limit's shape at a small size.
    env = worker_env(DEBUG="0", ALLOWED_HOSTS="127.0.0.1", AUTH_FAILURE_LIMIT=str(LIMIT),
                     NETWORK_HEARTBEAT_LIMIT="20")
    with gunicorn(env, workers=2, threads=4, log=tmp_path / "gunicorn.log") as url:
        yield url


@pytest.mark.django_db(transaction=True)
def test_under_gunicorn_a_prefix_flood_from_one_address_leaves_the_host_online(tmp_path):
    """The heartbeat's WSGI fast path, from two loopback addresses: the flooder is refused 429
    once over the limit; the real host, from another address, keeps heartbeating."""
    make_catalog("tiny-q4")
    team = teams.create_team(f"ops-{uuid.uuid4().hex[:6]}", "Ops", owner=make_user())
    host, token = hosts.create_host(team, "rig-1")
    # Addresses of their own per run (all of 127/8 is loopback): gunicorn's counters live in
    # the shared cache, where other tests' failures from 127.0.0.1 in the same minute count.
    flooder = httpx.Client(transport=httpx.HTTPTransport(local_address=_loopback()), timeout=30)
    honest = httpx.Client(transport=httpx.HTTPTransport(local_address=_loopback()), timeout=30)
    with _gunicorn(tmp_path) as site, flooder, honest:
        flood = [flooder.post(f"{site}/v1/hosts/heartbeat", json=BEAT,
                              headers={"Authorization": f"Bearer {_garbage_like(token, n)}"})
                 for n in range(LIMIT + 11)]
        beat = honest.post(f"{site}/v1/hosts/heartbeat", json=BEAT,
                           headers={"Authorization": f"Bearer {token}"})

    codes = [answer.status_code for answer in flood]
    assert codes[:LIMIT] == [401] * LIMIT and set(codes[LIMIT:]) == {429}
    assert flood[-1].json()["code"] == "auth_rate_limited"
    assert int(flood[-1].headers["Retry-After"]) > 0
    assert beat.status_code == 200, beat.text
    host.refresh_from_db()
    assert host.is_online()


def _past_the_ceiling(api: APIClient, path: str, garbage: str, address: str, post: bool) -> None:
    """Fail from `address` until it has failed the limit's ceiling times in this window."""
    call = api.post if post else api.get
    for _ in range(LIMIT * auth_failures.AUTH_FAILURE_CEILING_MULTIPLE):
        assert call(path, **bearer(garbage), REMOTE_ADDR=address).status_code in (401, 429)


@pytest.mark.django_db
def test_a_flood_past_the_ceiling_costs_no_database_work_and_a_token_in_use_is_still_served(
        world, small_limit):
    api = APIClient()
    flooder = "203.0.113.21"
    # An integration behind the same address had used its token within the window.
    assert api.get("/api/v1/me/", **bearer(world.read_only_token),
                   REMOTE_ADDR=flooder).status_code == 200
    _past_the_ceiling(api, "/api/v1/me/", "tkv_" + "f" * 40, flooder, post=False)

    for guess in ("tkv_" + "g" * 40, _garbage_like(world.read_only_token, 7)):
        with CaptureQueriesContext(connection) as queries:
            refused = api.get("/api/v1/me/", **bearer(guess), REMOTE_ADDR=flooder)
        assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
        assert [q["sql"] for q in queries.captured_queries] == []
    assert api.get("/api/v1/me/", **bearer(world.read_only_token),
                   REMOTE_ADDR=flooder).status_code == 200


@pytest.mark.django_db
def test_host_calls_past_the_ceiling_look_up_only_a_token_in_use(small_limit):
    make_catalog("tiny-q4")
    team = teams.create_team("ceiling-ops", "Ops", owner=make_user("ceiling-owner"))
    _, token = hosts.create_host(team, "rig-ceiling")
    api = APIClient()
    flooder = "203.0.113.22"
    assert api.post("/v1/hosts/lease", format="json", **bearer(token),
                    REMOTE_ADDR=flooder).status_code in (200, 204)
    _past_the_ceiling(api, "/v1/hosts/lease", "tkh_" + "f" * 40, flooder, post=True)

    for path in ("/v1/hosts/lease", "/v1/hosts/heartbeat"):
        with CaptureQueriesContext(connection) as queries:
            refused = api.post(path, BEAT, format="json", **bearer(_garbage_like(token, 3)),
                               REMOTE_ADDR=flooder)
        assert refused.status_code == 429, (path, refused.content)
        # No token lookup (the heartbeat's steady UPDATE, tried before any cache round trip
        # and matching no row for garbage, is the one statement a heartbeat always costs).
        lookups = [q["sql"] for q in queries.captured_queries
                   if q["sql"].startswith("SELECT") and "token_prefix" in q["sql"]]
        assert lookups == [], path
    assert api.post("/v1/hosts/lease", format="json", **bearer(token),
                    REMOTE_ADDR=flooder).status_code in (200, 204)
    assert api.post("/v1/hosts/heartbeat", BEAT, format="json", **bearer(token),
                    REMOTE_ADDR=flooder).status_code == 200


@pytest.mark.django_db
def test_below_the_ceiling_a_never_used_valid_token_from_a_blocked_address_is_served(
        world, small_limit):
    api = APIClient()
    address = "203.0.113.23"
    codes = [api.get("/api/v1/me/", **bearer("tkv_" + "n" * 40), REMOTE_ADDR=address).status_code
             for _ in range(LIMIT + 1)]
    assert codes[-1] == 429  # blocked, below its ceiling
    _, fresh = teams.issue_token(world.team, "read-only")
    assert api.get("/api/v1/me/", **bearer(fresh), REMOTE_ADDR=address).status_code == 200


@pytest.mark.django_db
def test_while_the_cache_is_down_tokens_are_still_checked_and_valid_ones_served(world, settings):
    # Failing open: nothing counted or marked, nothing refused for its address.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/1"}}
    api = APIClient()
    assert api.get("/api/v1/me/", **bearer(world.read_only_token),
                   REMOTE_ADDR="203.0.113.24").status_code == 200
    assert api.get("/api/v1/me/", **bearer("tkv_" + "d" * 40),
                   REMOTE_ADDR="203.0.113.24").status_code == 401
