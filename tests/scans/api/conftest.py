"""Fixtures of the API tests."""

from __future__ import annotations

import pytest

from tests.helpers import workers
from tests.helpers.workers import stop
from tokvera_site.celery import app


@pytest.fixture
def proof_worker():
    """A real Celery worker on the proof queue ("proofs", prefork, one process), as deployed."""
    app.control.purge()
    worker = workers.start("-Q", "proofs", "--pool", "prefork", "--concurrency", "1",
                          "-n", "proofs-test@%h")
    yield worker
    stop(worker)
