"""The heartbeat server (benchmarks/heartbeat_server.py, under uvicorn): every heartbeat answered
as the Django view answers it, steady ones written together in one UPDATE and each answered
for its own host, a dropped database connection survived, an unreachable database answered as
the site's outage, its calls counted where the web's /metrics shows them."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

import httpx
import psycopg
import pytest
from django.db import connection
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from accounts import teams
from benchmarks import hosts
from benchmarks.heartbeat_server import HeartbeatApp, SteadyWriter, connect_as_django
from benchmarks.models import Host
from tests.conftest import free_port, make_user
from tests.helpers.network import assert_heartbeats_answered_as_the_view, make_catalog
from tests.helpers.processes import accepts, running, wait_for
from tests.helpers.workers import worker_env

pytestmark = [pytest.mark.django_db(transaction=True)]
BEAT = b'{"models": ["tiny-q4"], "slots": 1}'
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def operators():
    make_catalog("tiny-q4")
    make_catalog("small-q8")
    return teams.create_team("ops", "Ops", owner=make_user("ops-owner"))


def _steady_host(team, name: str, **facts) -> tuple[Host, str]:
    """A host that heartbeated 10 s ago advertising tiny-q4: its next heartbeat is steady."""
    host, token = hosts.create_host(team, name, "software")
    Host.dangerously_unscoped.filter(pk=host.pk).update(
        advertised=["tiny-q4"], last_heartbeat_at=timezone.now() - timedelta(seconds=10), **facts)
    return host, token


def _served(app: HeartbeatApp, calls: list[tuple[str, bytes]]) -> list[httpx.Response]:
    """Each (token, body) posted at once to the app in this process (httpx's ASGI transport)."""
    async def post_all():
        transport = httpx.ASGITransport(app=app, client=("192.0.2.10", 4000))
        async with httpx.AsyncClient(transport=transport, base_url="http://hb") as client:
            try:
                return await asyncio.gather(*(
                    client.post("/v1/hosts/heartbeat", content=body,
                                headers={"Authorization": f"Bearer {token}", **JSON})
                    for token, body in calls))
            finally:
                await app.close()
    return asyncio.run(post_all())


class CountingCursor(psycopg.AsyncCursor):
    statements = 0

    async def execute(self, *args, **kwargs):
        CountingCursor.statements += 1
        return await super().execute(*args, **kwargs)


def test_uvicorn_answers_every_heartbeat_case_as_the_view_and_web_metrics_count_them(operators, tmp_path):
    host, token = _steady_host(operators, "rig-1")
    gone, revoked = hosts.create_host(operators, "rig-2")
    hosts.revoke_token(gone)
    port, web_port = free_port(), free_port()
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    env = worker_env(DEBUG="0", ALLOWED_HOSTS="127.0.0.1", PROMETHEUS_MULTIPROC_DIR=str(multiproc))
    with running([sys.executable, "-m", "uvicorn", "tokvera_site.heartbeats_asgi:application",
                  "--port", str(port), "--loop", "uvloop", "--http", "httptools"], env,
                 log=tmp_path / "uvicorn.log"), \
         running([sys.executable, "-m", "gunicorn", "tokvera_site.wsgi", "--bind",
                  f"127.0.0.1:{web_port}", "--workers", "1"], env, log=tmp_path / "gunicorn.log"):
        wait_for(lambda: accepts(port) and accepts(web_port), 60, "uvicorn and gunicorn")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as server:
            assert_heartbeats_answered_as_the_view(server, token, revoked)
            assert server.get("/v1/hosts/heartbeat").status_code == 405
            elsewhere = server.post("/v1/hosts/lease", headers={"Authorization": f"Bearer {token}"})
            assert elsewhere.status_code == 404 and "heartbeats only" in elsewhere.json()["detail"]
        with httpx.Client(base_url=f"http://127.0.0.1:{web_port}", timeout=30) as web:
            counted = {
                sample.labels["status"]: sample.value
                for family in text_string_to_metric_families(web.get("/metrics").text)
                if family.name == "tokvera_host_heartbeats" for sample in family.samples
                if sample.name.endswith("_total")
            }
    # Every call the server answered, by status (the view's calls ran in this process).
    assert counted == {"200": 1.0, "401": 3.0, "400": 5.0}, counted
    host.refresh_from_db()
    assert host.is_online() and host.slots == 2 and host.gpu_model == "RTX 4090"


def test_steady_heartbeats_arriving_together_are_written_in_one_statement_each_for_its_host(operators):
    many = [_steady_host(operators, f"rig-{i}") for i in range(30)]
    suspended, suspended_token = _steady_host(operators, "rig-suspended", suspended=True)
    kept, kept_token = _steady_host(operators, "rig-kept", gpu_model="RTX 3090", vram_mb=24576)
    changed, changed_token = _steady_host(operators, "rig-changed")
    gone, gone_token = _steady_host(operators, "rig-gone")
    hosts.revoke_token(gone)
    CountingCursor.statements = 0
    params = connect_as_django()

    async def counting_connection():
        connection_ = await params()
        connection_.cursor_factory = CountingCursor
        return connection_

    app = HeartbeatApp(SteadyWriter(counting_connection))
    sent_before = timezone.now()
    beat = b'{"models": ["tiny-q4"], "slots": 3, "hardware": {"gpu_model": "RTX 4090"}}'
    answers = _served(app, [
        *((token, beat) for _, token in many),
        (suspended_token, BEAT),
        (kept_token, b'{"models": ["tiny-q4"], "hardware": {"cpu_model": "EPYC"}}'),
        (changed_token, b'{"models": ["tiny-q4", "small-q8"]}'),  # not steady: the full path
        (gone_token, BEAT),
        (many[0][1], beat),  # the same host twice at once: both answered (one in the batch)
    ])
    assert [a.status_code for a in answers] == [200] * 33 + [401, 200]
    # 35 calls; the steady ones went to the database together (a few statements, not 33).
    assert CountingCursor.statements <= 5, CountingCursor.statements
    for (host, _), answer in zip(many, answers, strict=False):
        host.refresh_from_db()
        assert host.last_heartbeat_at >= sent_before and host.slots == 3
        assert host.gpu_model == "RTX 4090"
        assert answer.json() == {"online": True, "heartbeat_interval_s": 15, "models": ["tiny-q4"],
                                 "slots": 3, "trust_level": "software", "suspended": False}
    assert answers[30].json()["online"] is False and answers[30].json()["suspended"] is True
    kept.refresh_from_db()  # hardware it did not send is kept; what it sent is stored
    assert (kept.gpu_model, kept.vram_mb, kept.cpu_model) == ("RTX 3090", 24576, "EPYC")
    changed.refresh_from_db()
    assert changed.advertised == ["small-q8", "tiny-q4"] and answers[32].json()["models"] == [
        "small-q8", "tiny-q4"]
    gone.refresh_from_db()
    assert gone.last_heartbeat_at < sent_before  # a revoked token records nothing


def test_a_dropped_connection_is_opened_again_and_an_unreachable_database_is_the_outage(operators):
    host, token = _steady_host(operators, "rig-1")
    app = HeartbeatApp(SteadyWriter(connect_as_django()))

    async def beat_drop_beat():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hb") as client:
            auth = {"Authorization": f"Bearer {token}", **JSON}
            first = await client.post("/v1/hosts/heartbeat", content=BEAT, headers=auth)
            pid = app.writer._connection.info.backend_pid
            with psycopg.connect(**{k: v for k, v in connection.get_connection_params().items()
                                    if k not in ("cursor_factory", "context")}, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
                admin.execute(f"UPDATE {Host._meta.db_table} SET last_heartbeat_at = "  # noqa: S608
                              "now() - interval '10 seconds' WHERE id = %s", [host.pk])
            again = await client.post("/v1/hosts/heartbeat", content=BEAT, headers=auth)
            await app.close()
            return first, again

    first, again = asyncio.run(beat_drop_beat())
    assert first.status_code == 200 and again.status_code == 200, again.text
    host.refresh_from_db()
    assert timezone.now() - host.last_heartbeat_at < timedelta(seconds=5)

    closed_port = free_port()  # nothing listens there

    async def nowhere():
        return await psycopg.AsyncConnection.connect(host="127.0.0.1", port=closed_port,
                                                     connect_timeout=2)

    outage = _served(HeartbeatApp(SteadyWriter(nowhere)), [(token, BEAT)])[0]
    assert outage.status_code == 503 and outage.headers["Retry-After"] == "30"
    assert outage.json()["detail"] == "The site's database is unreachable; try again shortly."

