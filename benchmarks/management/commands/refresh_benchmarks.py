"""manage.py refresh_benchmarks: rebuild the public benchmark snapshot now."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from benchmarks.public import cache as public_cache


class Command(BaseCommand):
    help = "Rebuild the snapshot behind /benchmarks, /v1/slo and /v1/stats at once."

    def handle(self, *args, **options):
        started = time.perf_counter()
        snapshot = public_cache.refresh()
        elapsed_ms = (time.perf_counter() - started) * 1000
        self.stdout.write(
            f"Benchmarks snapshot rebuilt for {snapshot['generated_at']}: "
            f"{len(snapshot['models'])} models, {snapshot['online_hosts']} hosts online "
            f"({elapsed_ms:.0f} ms)."
        )
