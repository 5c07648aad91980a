"""A stale public page is rebuilt by one request while every other request is served the
previous copy at once.

The rebuild is held up for real: the test locks the catalog table (the snapshot's first query)
in its own PostgreSQL transaction, so the one request that builds blocks inside the build, and
any other request that tried to build would block beside it. The other requests answer while
that lock is still held, so none of them waited for the build; PostgreSQL's own lock table shows
one waiter, so only one build ran.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta

import httpx
import psycopg
import pytest
import time_machine

from accounts import teams
from benchmarks.public import cache as public_cache
from tests.conftest import database_url, make_user
from tests.helpers.network import T0, make_catalog, make_host, make_job

pytestmark = pytest.mark.django_db(transaction=True)
OTHERS = 8
WAITING_ON_CATALOG = ("SELECT count(*) FROM pg_locks "
                      "WHERE NOT granted AND relation = 'benchmarks_catalogmodel'::regclass")


def _generated_at(html: str) -> str:
    return html.split('data-generated-at="', 1)[1].split('"', 1)[0]


@contextmanager
def _catalog_locked():
    """The catalog table locked against readers until the block ends; yields the connection."""
    with psycopg.connect(database_url()) as conn:
        conn.execute("LOCK TABLE benchmarks_catalogmodel IN ACCESS EXCLUSIVE MODE")
        try:
            yield conn
        finally:
            conn.rollback()


def _waiting_builders(conn) -> int:
    return conn.execute(WAITING_ON_CATALOG).fetchone()[0]


def test_while_one_request_rebuilds_a_stale_page_every_other_request_gets_the_previous_copy_at_once(
        live_server):
    operator = teams.create_team("lock-ops", "Lock Ops", owner=make_user("lock-ops"))
    buyer = teams.create_team("lock-buyer", "Lock Buyer", owner=make_user("lock-buyer"))
    make_catalog("alpha-q4", context_len=8192)
    make_job(buyer, "alpha-q4", latency_ms=400)
    make_host(operator, "first", "none", models=["alpha-q4"], ttft=100.0, tps=10.0)
    page = f"{live_server.url}/benchmarks"

    with time_machine.travel(T0, tick=False) as clock, httpx.Client(timeout=120) as client, \
            ThreadPoolExecutor(max_workers=OTHERS + 1) as pool:
        first = client.get(page)
        assert first.status_code == 200
        previous = _generated_at(first.text)
        clock.shift(timedelta(seconds=public_cache.PAGE_CACHE_S + 1))  # the copy is stale now

        with _catalog_locked() as lock:
            builder = pool.submit(client.get, page)
            deadline = time.monotonic() + 60
            while _waiting_builders(lock) == 0:  # the builder is inside the build, held up
                assert not builder.done(), builder.result().text[:500]
                assert time.monotonic() < deadline, "the rebuild never reached the catalog"
                time.sleep(0.05)
            others = [f.result(timeout=60)
                      for f in [pool.submit(client.get, page) for _ in range(OTHERS)]]
            still_building = not builder.done()
            builders_at_the_end = _waiting_builders(lock)
        rebuilt = builder.result(timeout=60)
        after = client.get(page)

    assert [r.status_code for r in others] == [200] * OTHERS
    assert {_generated_at(r.text) for r in others} == {previous}  # the previous copy
    assert still_building and builders_at_the_end == 1  # served while the one build was held up
    assert rebuilt.status_code == 200 and _generated_at(rebuilt.text) != previous
    assert _generated_at(after.text) == _generated_at(rebuilt.text)
