"""The proof workers serve teams in turn: one team's backlog of pushed reports never delays
another team's verdict behind all of it (the queue "proofs" is shared by every team). A real
Celery worker on the proof queue (prefork, one process, as deployed), real PostgreSQL and Redis,
reports from a real scan of `tokvera target`."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from scans.models import Scan
from tests.conftest import bearer
from tests.helpers import workers
from tests.helpers.factories import make_endpoint, measured_report
from tests.helpers.processes import wait_for
from tests.helpers.workers import stop
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

BACKLOG = 6


def _push(api, endpoint, token: str, body: bytes):
    answer = api.post(reverse("api-endpoint-reports", kwargs={"public_id": endpoint.public_id}),
                      data=body, content_type="application/json", **bearer(token))
    assert answer.status_code == 202, answer.json()
    return Scan.dangerously_unscoped.get(public_id=answer.json()["id"])


def test_a_teams_one_push_is_proven_before_another_teams_backlog_drains(world, api):
    app.control.purge()
    report = measured_report()
    body = json.dumps(report).encode()
    busy = make_endpoint(world.team, mode="pushed", base_url=report["target"]["base_url"])
    quiet = make_endpoint(world.other_team, mode="pushed", base_url=report["target"]["base_url"])
    # Team X's backlog is queued first, then team Y's one report (trailing spaces: new uploads).
    backlog = [_push(api, busy, world.read_write_token, body + b" " * i) for i in range(BACKLOG)]
    single = _push(api, quiet, world.other_team_token, body)

    worker = workers.start("-Q", "proofs", "--pool", "prefork", "--concurrency", "1",
                          "-n", "proofs-fair@%h")
    try:
        ids = [scan.pk for scan in [*backlog, single]]
        wait_for(lambda: not Scan.dangerously_unscoped.filter(
            pk__in=ids, status__in=["queued", "running"]).exists(), 180, "every verdict", every=0.5)
    finally:
        stop(worker)
        app.control.purge()

    proven = list(Scan.dangerously_unscoped.filter(pk__in=ids).order_by("started_at"))
    assert {scan.status for scan in proven} == {"succeeded"}
    order = [scan.pk for scan in proven]
    # The worker took one of X's (the oldest), then Y's: Y's verdict came before the rest of X's.
    assert order.index(single.pk) <= 1, order
    single.refresh_from_db()
    assert single.finished_at < max(scan.finished_at for scan in proven if scan.pk != single.pk)
    assert [scan.pk for scan in proven if scan.pk != single.pk] == [scan.pk for scan in backlog]
