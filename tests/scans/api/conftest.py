"""Fixtures of the API tests."""

from __future__ import annotations

import pytest

from tests.helpers.workers import start_worker, stop
from tokvera_site.celery import app


@pytest.fixture
def proof_worker():
    """A real Celery worker on the proof queue ("proofs", prefork, one process), as deployed."""
    app.control.purge()
    worker = start_worker("-Q", "proofs", "--pool", "prefork", "--concurrency", "1",
                          "-n", "proofs-test@%h")
    yield worker
    stop(worker)
