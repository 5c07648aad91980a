"""Run the report retention pass by hand (the beat runs it hourly): scans finished more than
REPORT_RETENTION_DAYS ago keep only their summary (scans/history/retention.py). Prints what it did."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scans.history import retention


class Command(BaseCommand):
    help = ("Replace the full report.json of scans finished more than REPORT_RETENTION_DAYS "
            "ago by its summary, in batches (row locks only), and print what was done.")

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=retention.DEFAULT_BATCH,
                            help="scans per transaction (default %(default)s)")
        parser.add_argument("--budget-s", type=float, default=None,
                            help="stop after this many seconds (default: until none is left)")

    def handle(self, *args, batch: int, budget_s: float | None, **options):
        if batch < 1:
            raise CommandError(f"--batch must be at least 1, got {batch}")
        days = settings.REPORT_RETENTION_DAYS
        result = retention.prune(batch=batch,
                                 budget_s=float("inf") if budget_s is None else budget_s)
        self.stdout.write(f"Full reports are kept {days} days (REPORT_RETENTION_DAYS): {result}.")
