"""The periodic rebuild of the public benchmark snapshot (registered in scans/schedules.py).

Safe to run twice: each run builds a fresh snapshot at its own coordinator time and replaces the
cached one; it writes nothing to the database.
"""

from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True)
def refresh_public_benchmarks() -> str:
    """Rebuild the snapshot behind /benchmarks (and the live JSON) so no visitor pays for it."""
    from benchmarks import public_views

    return public_views.refresh()["generated_at"]
