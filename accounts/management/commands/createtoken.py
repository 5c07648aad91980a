from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from accounts import teams
from accounts.models import TokenScope


class Command(BaseCommand):
    help = "Create an API token for a team and print it once, alone on one line."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--team", required=True, metavar="SLUG")
        parser.add_argument("--scope", required=True, choices=TokenScope.values)
        parser.add_argument("--name", default="")

    def handle(self, team: str, scope: str, name: str, **options: Any) -> None:
        row = teams.team_by_slug(team)
        if row is None:
            raise CommandError(f"No team with slug {team!r}.")
        _, secret = teams.issue_token(row, scope, name or f"{scope} (createtoken)")
        self.stdout.write(secret)
