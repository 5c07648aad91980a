"""Fixtures of the network's tests (their factories and client: tests/helpers/network.py).

Celery runs eagerly here (the fold task executes inside the completing request's on_commit),
and every test sees an empty cache of its own (rate-limit windows, the catalog id cache).
"""

from __future__ import annotations

import uuid

import pytest

from tests.helpers.network import Net, build_net, make_catalog
from tokvera_site.celery import app


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
def messages_on_the_broker():
    """Tasks go to the broker instead of running in the test process (emptied before and
    after): for tests that run a real worker, or that run the folds themselves when they choose."""
    before = app.conf.task_always_eager
    app.conf.task_always_eager = False
    app.control.purge()
    yield
    app.control.purge()
    app.conf.task_always_eager = before


@pytest.fixture
def queue_without_hosts(settings):
    """Jobs are accepted while no online host serves their model (NETWORK_REQUIRE_ONLINE_HOST
    off, as on a network whose hosts start on demand): for tests about the queue itself."""
    settings.NETWORK_REQUIRE_ONLINE_HOST = False


@pytest.fixture
def net(db) -> Net:
    make_catalog()
    return build_net()
