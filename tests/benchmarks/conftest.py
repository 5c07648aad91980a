"""Factories and a small client for the network's tests.

Celery runs eagerly here (the fold task executes inside the completing request's on_commit),
and every test sees an empty cache of its own (rate-limit windows, the catalog id cache).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from rest_framework.test import APIClient

from accounts import teams
from benchmarks import hosts
from benchmarks.models import CatalogModel, Host, Job
from tests.conftest import bearer, make_user
from tokvera_site.celery import app

# A fixed, tz-aware start for time-machine; tests move forward from here.
T0 = datetime(2030, 1, 7, 12, 0, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _fresh_cache(settings):
    # A key prefix of its own per test: an empty cache without flushing a shared Redis database.
    settings.CACHES = {
        "default": {**settings.CACHES["default"], "KEY_PREFIX": f"t-{uuid.uuid4().hex[:12]}"}
    }


@pytest.fixture(autouse=True)
def _eager_celery():
    before = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = before


@pytest.fixture
def queue_without_hosts(settings):
    """Jobs are accepted while no online host serves their model (NETWORK_REQUIRE_ONLINE_HOST
    off, as on a network whose hosts start on demand): for tests about the queue itself."""
    settings.NETWORK_REQUIRE_ONLINE_HOST = False


def make_catalog(model_id: str = "tiny-q4", context_len: int = 4096, active: bool = True) -> CatalogModel:
    return CatalogModel.objects.create(id=model_id, display_name=model_id.title(), quant="Q4_K_M",
                                       context_len=context_len, active=active)


@dataclass
class Net:
    """A team that operates hosts, two buyer teams, and HTTP helpers for both sides."""

    operator: object
    buyer: object
    buyer_token: str
    other_buyer: object
    other_buyer_token: str
    client: APIClient = field(default_factory=APIClient)
    tokens: dict = field(default_factory=dict)  # host name -> token (shown once, kept here)

    def host(self, name: str, models=("tiny-q4",), slots: int = 1, trust: str = "software",
             heartbeat: bool = True, **facts) -> tuple[Host, str]:
        """A host with a token; by default it has heartbeated (so it is online)."""
        host, token = hosts.create_host(self.operator, name, trust)
        if facts:
            Host.dangerously_unscoped.filter(pk=host.pk).update(**facts)
        if heartbeat:
            response = self.heartbeat(token, list(models), slots=slots)
            assert response.status_code == 200, response.content
        host.refresh_from_db()
        self.tokens[name] = token
        return host, token

    # host side
    def heartbeat(self, token, models, slots=1, hardware=None, **extra):
        body = {"models": models, "slots": slots, **({"hardware": hardware} if hardware else {})}
        return self.client.post("/v1/hosts/heartbeat", body, format="json", **bearer(token), **extra)

    def lease(self, token):
        return self.client.post("/v1/hosts/lease", format="json", **bearer(token))

    def start(self, token, job_id):
        return self.client.post(f"/v1/jobs/{job_id}/start", format="json", **bearer(token))

    def complete(self, token, job_id, ttft_ms=100.0, completion_tokens=10, elapsed_ms=500.0,
                 result=None):
        body = {"ttft_ms": ttft_ms, "completion_tokens": completion_tokens,
                "elapsed_ms": elapsed_ms, "result": result or {"content": "ok"}}
        return self.client.post(f"/v1/jobs/{job_id}/complete", body, format="json", **bearer(token))

    def fail(self, token, job_id, reason="cannot load quant"):
        return self.client.post(f"/v1/jobs/{job_id}/fail", {"reason": reason}, format="json",
                                **bearer(token))

    def run(self, token, **figures) -> str:
        """Lease, start and complete one job; returns its id."""
        leased = self.lease(token)
        assert leased.status_code == 200, (leased.status_code, leased.content)
        job_id = leased.json()["id"]
        assert self.start(token, job_id).status_code == 200
        done = self.complete(token, job_id, **figures)
        assert done.status_code == 200, done.content
        return job_id

    # buyer side
    def submit(self, token=None, model="tiny-q4", max_tokens=64, content="hello", **extra):
        body = {"model": model, "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": content}]}
        return self.client.post("/v1/jobs", body, format="json", **bearer(token or self.buyer_token),
                                **extra)

    def submit_id(self, token=None, **kwargs) -> str:
        response = self.submit(token, **kwargs)
        assert response.status_code == 202, response.content
        return response.json()["id"]

    def job(self, job_id) -> Job:
        return Job.dangerously_unscoped.get(pk=job_id)


def build_net() -> Net:
    operator = teams.create_team("hostops", "Host Ops", owner=make_user("hostops-owner"))
    buyer = teams.create_team("buyer", "Buyer", owner=make_user("buyer-owner"))
    other = teams.create_team("other-buyer", "Other Buyer", owner=make_user("other-owner"))
    return Net(
        operator=operator,
        buyer=buyer,
        buyer_token=teams.issue_token(buyer, "read-write")[1],
        other_buyer=other,
        other_buyer_token=teams.issue_token(other, "read-write")[1],
    )


@pytest.fixture
def net(db) -> Net:
    make_catalog()
    return build_net()
