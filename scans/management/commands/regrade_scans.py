"""Re-grade stored scans under a scoring version from their stored check values (never
re-measuring), each re-grade marked in its report; prints one summary line.

The work is scans.running.regrading.regrade_scans. Rollups are left as they were (they hold
sums per scoring version, recomputed from their scans only when a scan finishes in their hour),
and no alert is sent: a re-grade measured nothing, so it is no news about an endpoint.
"""

from uuid import UUID

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Team
from scans.grader import SCORING_VERSION, SCORING_VERSIONS
from scans.models import Endpoint
from scans.running import regrading


class Command(BaseCommand):
    help = ("Re-grade succeeded scans graded under another scoring version from the check "
            "values their report stored (nothing is re-measured), in batches; each re-grade "
            "is marked in its report (measurements.regraded_from_scoring_version). Scans whose "
            "report was pruned or holds no checks are skipped and counted. Rollups stay as "
            "they were (they hold sums per scoring version); no alert is sent. Safe to run "
            "again: a second run changes nothing.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--scoring-version", default=SCORING_VERSION,
                            choices=SCORING_VERSIONS,
                            help="the version to grade under (default %(default)s)")
        parser.add_argument("--team", metavar="SLUG", help="only this team's scans")
        parser.add_argument("--endpoint", metavar="PUBLIC_ID", help="only this endpoint's scans")
        parser.add_argument("--dry-run", action="store_true",
                            help="count what would change, write nothing")
        parser.add_argument("--batch", type=int, default=regrading.DEFAULT_BATCH,
                            help="scans per transaction (default %(default)s)")

    def handle(self, *args: object, scoring_version: str, team: str | None,
               endpoint: str | None, dry_run: bool, batch: int, **options: object) -> None:
        if batch < 1:
            raise CommandError(f"--batch must be at least 1, got {batch}")
        team_row = _team(team) if team else None
        endpoint_row = _endpoint(endpoint, team_row) if endpoint else None
        result = regrading.regrade_scans(
            scoring_version, team_id=team_row.pk if team_row else None, endpoint=endpoint_row,
            dry_run=dry_run, batch=batch)
        self.stdout.write(result.summary())


def _team(slug: str) -> Team:
    # An admin's command: the team is named on the command line, not by a signed-in member.
    found = Team.dangerously_unscoped.filter(slug=slug).first()
    if found is None:
        raise CommandError(f"no team with slug {slug!r}")
    return found


def _endpoint(public_id: str, team: Team | None) -> Endpoint:
    try:
        key = UUID(public_id)
    except ValueError:
        raise CommandError(f"--endpoint expects an endpoint's public id, got {public_id!r}") \
            from None
    # An admin's command: the endpoint is looked up by its id before any team is known.
    found = Endpoint.dangerously_unscoped.filter(public_id=key).first()
    if found is None or (team is not None and found.team_id != team.pk):
        where = f" in team {team.slug!r}" if team is not None else ""
        raise CommandError(f"no endpoint {public_id}{where}")
    return found
