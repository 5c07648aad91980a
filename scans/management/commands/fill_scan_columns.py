"""Fill the report columns of scans stored without them (scans/running/scan_columns.py): run once after
upgrading to the scan columns, when every worker runs the new release. Prints what it did."""

from django.core.management.base import BaseCommand, CommandError

from scans.running import scan_columns


class Command(BaseCommand):
    help = ("Fill the URL, load and down-cause columns of scans stored without them by a "
            "worker of the previous release (run after the rollout; safe to run again).")

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=scan_columns.DEFAULT_BATCH,
                            help="scans per transaction (default %(default)s)")

    def handle(self, *args, batch: int, **options):
        if batch < 1:
            raise CommandError(f"--batch must be at least 1, got {batch}")
        filled = scan_columns.fill_missing(batch=batch)
        noun = "scan" if filled == 1 else "scans"
        self.stdout.write(f"Filled the report columns of {filled} {noun} stored without them.")
