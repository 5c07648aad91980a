from django.core.management.base import BaseCommand, CommandError

from accounts import teams
from benchmarks.models import GRANTABLE_TRUST
from benchmarks.network import hosts


class Command(BaseCommand):
    help = "Create a network host for a team and print its token once, alone on one line."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--team", required=True, metavar="SLUG", help="the operating team")
        parser.add_argument("--trust", default="none", choices=[t.value for t in GRANTABLE_TRUST],
                            help="trust level (hardware is reserved and cannot be granted)")

    def handle(self, name, team, trust, **options):
        row = teams.team_by_slug(team)
        if row is None:
            raise CommandError(f"No team with slug {team!r}.")
        try:
            _, token = hosts.create_host(row, name, trust, actor="command createhost")
        except hosts.HostError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(token)
