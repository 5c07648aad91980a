"""The host-call server's heartbeats (benchmarks/network/host_call_server.py, under uvicorn):
every heartbeat answered as the Django view answers it, steady ones written together in one
UPDATE and each answered for its own host, a dropped database connection survived, an
unreachable database answered as the site's outage, its calls counted where the web's /metrics
shows them."""

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
from benchmarks.models import Host
from benchmarks.network import heartbeat_batches, hosts
from benchmarks.network.heartbeat_batches import SteadyWriter, connect_as_django
from benchmarks.network.host_call_server import HostCallApp
from tests.conftest import free_port, make_user
from tests.helpers.network import assert_heartbeats_answered_as_the_view, make_catalog
from tests.helpers.processes import accepts, gunicorn, running, wait_for
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


def _served(app: HostCallApp, calls: list[tuple[str, bytes]]) -> list[httpx.Response]:
    """Each (token, body) posted at once to the app in this process (httpx's ASGI transport)."""
    async def post_all():
        transport = httpx.ASGITransport(app=app, client=("192.0.2.10", 4000))
        async with httpx.AsyncClient(transport=transport, base_url="http://hb") as client:
            try:  # bounded: a regression fails here instead of hanging the suite
                return await asyncio.wait_for(asyncio.gather(*(
                    client.post("/v1/hosts/heartbeat", content=body,
                                headers={"Authorization": f"Bearer {token}", **JSON})
                    for token, body in calls)), 60)
            finally:
                await app.close()
    return asyncio.run(post_all())


class CountingCursor(psycopg.AsyncCursor):
    """Counts the writer's statements and the rows they wrote (psycopg's cursor, observed)."""

    statements = 0
    rows_written = 0

    async def execute(self, *args, **kwargs):
        CountingCursor.statements += 1
        done = await super().execute(*args, **kwargs)
        CountingCursor.rows_written += max(0, self.rowcount)
        return done


def _counting_writer(**options) -> SteadyWriter:
    CountingCursor.statements = CountingCursor.rows_written = 0
    connect = connect_as_django()

    async def counting_connection():
        opened = await connect()
        opened.cursor_factory = CountingCursor
        return opened

    return SteadyWriter(counting_connection, **options)


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
         gunicorn(env, port=web_port, timeout_s=30, log=tmp_path / "gunicorn.log"):
        wait_for(lambda: accepts(port), 60, "uvicorn")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as server:
            assert_heartbeats_answered_as_the_view(server, token, revoked)
            not_allowed = server.get("/v1/hosts/heartbeat")  # as Django's require_POST answers it
            assert not_allowed.status_code == 405 and not_allowed.headers["Allow"] == "POST"
            elsewhere = server.post("/v1/jobs", headers={"Authorization": f"Bearer {token}"})
            assert elsewhere.status_code == 404 and "host calls only" in elsewhere.json()["detail"]
            # Two Authorization headers are one, joined with a comma, as gunicorn reads them:
            # anything then a valid token is no valid token (neither the first nor the last wins).
            doubled = server.post("/v1/hosts/heartbeat", content=BEAT, headers=[
                ("Content-Type", "application/json"), ("Authorization", "Bearer tkh_" + "y" * 30),
                ("Authorization", f"Bearer {token}")])
            assert doubled.status_code == 401, doubled.text
            # A steady heartbeat through the server alone is recorded.
            Host.dangerously_unscoped.filter(pk=host.pk).update(
                last_heartbeat_at=timezone.now() - timedelta(seconds=10))
            steady = server.post(
                "/v1/hosts/heartbeat", headers={"Authorization": f"Bearer {token}", **JSON},
                content=b'{"models": ["tiny-q4"], "slots": 5, "hardware": {"ram_mb": 65536}}')
            assert steady.status_code == 200 and steady.json()["slots"] == 5
        with httpx.Client(base_url=f"http://127.0.0.1:{web_port}", timeout=30) as web:
            counted = {
                sample.labels["status"]: sample.value
                for family in text_string_to_metric_families(web.get("/metrics").text)
                if family.name == "tokvera_host_heartbeats" for sample in family.samples
                if sample.name.endswith("_total")
            }
    # Every call the server answered, by status (the view's calls ran in this process).
    assert counted == {"200": 2.0, "401": 4.0, "400": 4.0, "422": 1.0}, counted
    host.refresh_from_db()
    assert host.is_online() and host.slots == 5 and host.ram_mb == 65536
    assert host.gpu_model == "RTX 4090"  # from an earlier heartbeat, not sent this time


def test_steady_heartbeats_arriving_together_are_written_in_one_statement_each_for_its_host(operators):
    many = [_steady_host(operators, f"rig-{i}", trust_level=("software", "edr", "none")[i % 3])
            for i in range(30)]
    suspended, suspended_token = _steady_host(operators, "rig-suspended", suspended=True)
    kept, kept_token = _steady_host(operators, "rig-kept", gpu_model="RTX 3090", vram_mb=24576)
    changed, changed_token = _steady_host(operators, "rig-changed")
    gone, gone_token = _steady_host(operators, "rig-gone")
    hosts.revoke_token(gone)
    app = HostCallApp(_counting_writer())
    sent_before = timezone.now()

    def beat(i: int) -> bytes:
        return (b'{"models": ["tiny-q4"], "slots": %d, "hardware": {"gpu_model": "GPU %d"}}'
                % (i % 4 + 1, i))

    calls = [
        *((token, beat(i)) for i, (_, token) in enumerate(many)),
        (suspended_token, BEAT),
        (kept_token, b'{"models": ["tiny-q4"], "hardware": {"cpu_model": "EPYC"}}'),
        (changed_token, b'{"models": ["tiny-q4", "small-q8"]}'),  # not steady: the full path
        (gone_token, BEAT),
        (many[0][1], beat(0)),  # the same host twice at once: both answered (one in the batch)
    ]
    # Sent newest host first: the database returns rows in its own order, never the calls'.
    answers = _served(app, calls[::-1])[::-1]
    assert [a.status_code for a in answers] == [200] * 33 + [401, 200]
    # The 32 steady calls were written by the batches, in a few statements (not one each).
    assert CountingCursor.rows_written == 32, CountingCursor.rows_written
    assert CountingCursor.statements <= 5, CountingCursor.statements
    for i, ((host, _), answer) in enumerate(zip(many, answers, strict=False)):
        host.refresh_from_db()
        assert host.last_heartbeat_at >= sent_before
        assert (host.slots, host.gpu_model) == (i % 4 + 1, f"GPU {i}")
        assert answer.json() == {"online": True, "heartbeat_interval_s": 15, "models": ["tiny-q4"],
                                 "slots": i % 4 + 1, "trust_level": host.trust_level,
                                 "suspended": False}
    assert {a.json()["trust_level"] for a in answers[:30]} == {"software", "edr", "none"}
    assert answers[30].json()["online"] is False and answers[30].json()["suspended"] is True
    kept.refresh_from_db()  # hardware it did not send is kept; what it sent is stored
    assert (kept.gpu_model, kept.vram_mb, kept.cpu_model) == ("RTX 3090", 24576, "EPYC")
    changed.refresh_from_db()
    assert changed.advertised == ["small-q8", "tiny-q4"] and answers[32].json()["models"] == [
        "small-q8", "tiny-q4"]
    gone.refresh_from_db()
    assert gone.last_heartbeat_at < sent_before  # a revoked token records nothing


def test_a_host_whose_row_is_locked_holds_up_no_other_hosts_heartbeat(operators):
    locked, locked_token = _steady_host(operators, "rig-locked")
    others = [_steady_host(operators, f"rig-{i}") for i in range(3)]
    app = HostCallApp(_counting_writer())
    admin_params = {k: v for k, v in connection.get_connection_params().items()
                    if k not in ("cursor_factory", "context")}

    async def while_one_row_is_locked():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hb", timeout=60) as client:
            def post(token):
                return asyncio.create_task(client.post("/v1/hosts/heartbeat", content=BEAT, headers={
                    "Authorization": f"Bearer {token}", **JSON}))
            # A fold (or an operator's change) holds the row, as ewma's FOR UPDATE does.
            async with await psycopg.AsyncConnection.connect(**admin_params) as fold:
                await fold.execute(f"SELECT id FROM {Host._meta.db_table} WHERE id = %s FOR UPDATE",  # noqa: S608
                                   [locked.pk])
                held = post(locked_token)
                free = [post(token) for _, token in others]
                done, _ = await asyncio.wait(free, timeout=30)
                answered_while_locked = [t.result().status_code for t in done]
                still_waiting = not held.done()
                await fold.commit()  # the fold ends
            held_answer = await held
            await app.close()
            return answered_while_locked, still_waiting, held_answer

    answered, held_waited, held = asyncio.run(while_one_row_is_locked())
    assert answered == [200, 200, 200]  # answered while the other row stayed locked
    assert held_waited  # the locked host's own call waited for its row, on the full path
    assert held.status_code == 200
    locked.refresh_from_db()
    assert timezone.now() - locked.last_heartbeat_at < timedelta(seconds=30)


def test_past_its_bounds_a_call_is_answered_busy_and_a_stopped_writer_answers_every_waiting_call():
    async def a_database_that_never_answers():
        await asyncio.Event().wait()
        raise AssertionError("never")

    app = HostCallApp(SteadyWriter(a_database_that_never_answers, waiting_max=2))

    async def flood():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hb") as client:
            calls = []
            for i in range(4):  # one being written, two waiting, one past the bound
                calls.append(asyncio.create_task(client.post(
                    "/v1/hosts/heartbeat", content=BEAT,
                    headers={"Authorization": f"Bearer tkh_{'z' * 30}{i}", **JSON})))
                await asyncio.sleep(0.05)
            done, _ = await asyncio.wait(calls, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            first = [t.result() for t in done]
            await app.close()  # a shutdown: every waiting call is answered
            return first, await asyncio.wait_for(asyncio.gather(*calls), 30)

    first, answers = asyncio.run(flood())
    assert [a.json()["code"] for a in first] == ["busy"]
    assert first[0].status_code == 503 and first[0].headers["Retry-After"] == "5"
    assert [a.status_code for a in answers] == [503] * 4
    assert [a.headers["Retry-After"] for a in answers] == ["30", "30", "30", "5"]


def test_a_dropped_connection_is_opened_again_and_an_unreachable_database_is_the_outage(operators):
    host, token = _steady_host(operators, "rig-1")
    app = HostCallApp(_counting_writer())

    async def beat_drop_beat():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hb") as client:
            auth = {"Authorization": f"Bearer {token}", **JSON}
            first = await client.post("/v1/hosts/heartbeat", content=BEAT, headers=auth)
            pid = app.writer._connection.info.backend_pid
            with psycopg.connect(**{k: v for k, v in connection.get_connection_params().items()
                                    if k not in ("cursor_factory", "context")}, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])  # waits for it to end
                admin.execute(f"UPDATE {Host._meta.db_table} SET last_heartbeat_at = "  # noqa: S608
                              "now() - interval '10 seconds' WHERE id = %s", [host.pk])
            again = await client.post("/v1/hosts/heartbeat", content=BEAT, headers=auth)
            reopened = app.writer._connection.info.backend_pid != pid
            await app.close()
            return first, again, reopened

    first, again, reopened = asyncio.run(beat_drop_beat())
    assert first.status_code == 200 and again.status_code == 200, again.text
    assert reopened
    assert CountingCursor.rows_written == 2  # both by the batch: the second on a new connection
    host.refresh_from_db()
    assert timezone.now() - host.last_heartbeat_at < timedelta(seconds=5)

    closed_port = free_port()  # nothing listens there

    async def nowhere():
        return await psycopg.AsyncConnection.connect(host="127.0.0.1", port=closed_port,
                                                     connect_timeout=2)

    outage = _served(HostCallApp(SteadyWriter(nowhere)), [(token, BEAT)])[0]
    assert outage.status_code == 503 and outage.headers["Retry-After"] == "30"
    assert outage.json()["detail"] == "The site's database is unreachable; try again shortly."



def test_a_write_slower_than_its_bound_is_the_outage_and_is_not_run_again(operators, monkeypatch):
    _, token = _steady_host(operators, "rig-1")
    monkeypatch.setattr(heartbeat_batches, "WRITE_TIMEOUT_S", 1.0)
    connect = connect_as_django()
    opened = []

    async def counted():
        opened.append(await connect())
        return opened[-1]

    admin_params = {k: v for k, v in connection.get_connection_params().items()
                    if k not in ("cursor_factory", "context")}
    with psycopg.connect(**admin_params) as migration:  # e.g. a migration holding the table
        migration.execute(f"LOCK TABLE {Host._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        outage = _served(HostCallApp(SteadyWriter(counted)), [(token, BEAT)])[0]
        migration.rollback()
    assert outage.status_code == 503 and outage.headers["Retry-After"] == "30"
    assert len(opened) == 1  # dropped, not tried again on a database already this slow
