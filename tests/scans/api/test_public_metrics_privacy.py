"""The site's public /metrics never carries a team's data.

The production shape: gunicorn with gthread workers and PROMETHEUS_MULTIPROC_DIR set, so
/metrics aggregates every process's files. Two teams scrape their own gauges through
/api/v1/metrics; the anonymous /metrics must then hold neither team's slug, endpoint names nor
ids, while each team still gets its own gauges.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from accounts import teams
from tests.conftest import make_user
from tests.helpers.factories import make_endpoint
from tests.helpers.processes import gunicorn
from tests.helpers.workers import worker_env
from tests.scans.conftest import GRADE_A, scan_at

pytestmark = [pytest.mark.django_db(transaction=True)]


@contextmanager
def _gunicorn(tmp_path, **env: str):
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    settings = worker_env(DEBUG="0", ALLOWED_HOSTS="127.0.0.1",
                          PROMETHEUS_MULTIPROC_DIR=str(multiproc), **env)
    with gunicorn(settings, workers=2, threads=4, log=tmp_path / "gunicorn.log") as url, \
            httpx.Client(base_url=url, timeout=30) as client:
        yield client


def _team_with_endpoint(slug: str, endpoint_name: str):
    team = teams.create_team(slug, slug.title(), owner=make_user(f"{slug}-owner"))
    endpoint = make_endpoint(team, name=endpoint_name)
    scan_at(endpoint, timezone.now() - timedelta(minutes=5), GRADE_A)
    return team, endpoint, teams.issue_token(team, "read-only")[1]


def test_anonymous_metrics_hold_no_team_data_after_both_teams_scrape(tmp_path):
    teams_and_endpoints = [_team_with_endpoint("tenant-alpha", "alpha secret box"),
                           _team_with_endpoint("tenant-bravo", "bravo secret box")]
    with _gunicorn(tmp_path) as web:
        for _team, endpoint, token in teams_and_endpoints:
            # Several scrapes, so that both gunicorn workers are likely to serve one.
            for _ in range(6):
                own = web.get("/api/v1/metrics", headers={"Authorization": f"Bearer {token}"})
                assert own.status_code == 200
                assert str(endpoint.public_id) in own.text  # the team still gets its gauges
        public = web.get("/metrics")

    assert public.status_code == 200
    assert "django_http_requests" in public.text  # the process metrics are there
    for team, endpoint, _ in teams_and_endpoints:
        for secret in (team.slug, endpoint.name, str(endpoint.public_id)):
            assert secret not in public.text, f"{secret!r} is on the public /metrics"
    assert "tokvera_endpoint_" not in public.text


def test_a_metrics_token_keeps_the_process_metrics_from_strangers(tmp_path):
    with _gunicorn(tmp_path, SITE_METRICS_TOKEN="scrape-secret-1234") as web:
        anonymous = web.get("/metrics")
        wrong = web.get("/metrics", headers={"Authorization": "Bearer scrape-secret-12345"})
        right = web.get("/metrics", headers={"Authorization": "Bearer scrape-secret-1234"})

    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
    assert right.status_code == 200 and "django_http_requests" in right.text
