"""The assignment pass worker as docs/operations.md runs it (`-Q passes --concurrency 1`, one
thread, a prefetch multiplier of 1) takes each pass message as it comes, not at its event
loop's next timer (celery/celery#6941: a task finishing on a pool thread does not wake the
loop, which then waited up to ~10 s to read the broker again; tokvera_site/celery.py)."""

from __future__ import annotations

import pytest

from benchmarks.tasks import assign_queued_jobs
from tests.helpers.processes import wait_for
from tests.helpers.workers import start_worker, stop

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("messages_on_the_broker")]


def test_the_one_thread_pass_worker_takes_each_pass_as_it_is_queued(tmp_path):
    log = tmp_path / "passes.log"
    worker = start_worker("-Q", "passes", "--concurrency", "1", "-n", "passes@test", log=log)
    try:
        wait_for(lambda: " ready." in log.read_text(), 90, "the pass worker to start")
        for sent in range(1, 9):
            assign_queued_jobs.delay()
            # Well within the loop's own timer (5-10 s) that it waited for before.
            wait_for(lambda sent=sent: log.read_text().count("succeeded") >= sent, 3,
                     f"pass {sent} to be taken")
    finally:
        stop(worker)
