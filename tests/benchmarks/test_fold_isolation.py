"""The periodic fold goes on past one host whose jobs cannot be folded: the failure is logged
with the host, and every other host's jobs are folded as usual.

The failing row is real: a completed job whose stored elapsed time is the smallest positive
float, whose tokens per second divide by zero when folded."""

from __future__ import annotations

import logging

import pytest

from benchmarks import tasks
from benchmarks.models import Job
from tests.helpers.network import make_catalog

pytestmark = pytest.mark.django_db


def test_the_sweep_folds_other_hosts_past_one_whose_jobs_cannot_be_folded(net, caplog):
    make_catalog("small-q8")
    broken, broken_token = net.host("h1", models=("tiny-q4",))
    net.submit_id(model="tiny-q4")
    broken_job = net.run(broken_token, ttft_ms=0.0, completion_tokens=10, elapsed_ms=10.0)
    Job.dangerously_unscoped.filter(pk=broken_job).update(elapsed_ms=5e-324)
    fine, fine_token = net.host("h2", models=("small-q8",))
    net.submit_id(model="small-q8")
    net.run(fine_token, ttft_ms=150.0, completion_tokens=30, elapsed_ms=1500.0)

    with caplog.at_level(logging.ERROR):
        tasks.sweep_unfolded()

    fine.refresh_from_db()
    assert (fine.ttft_ewma_ms, fine.tps_ewma) == (150.0, 20.0)
    assert not Job.dangerously_unscoped.filter(host=fine, folded_at__isnull=True).exists()
    assert Job.dangerously_unscoped.filter(host=broken, folded_at__isnull=True).count() == 1
    assert f"host {broken.pk}" in caplog.text

