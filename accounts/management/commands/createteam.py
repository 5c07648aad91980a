from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.core.validators import validate_email, validate_slug
from django.forms import ValidationError

from accounts import teams


class Command(BaseCommand):
    help = "Create a team and make EMAIL its owner (the account is created if needed)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--owner", required=True, metavar="EMAIL")
        parser.add_argument("--name", default="")

    def handle(self, slug: str, owner: str, name: str, **options: Any) -> None:
        try:
            validate_slug(slug)
            validate_email(owner)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        if teams.team_by_slug(slug) is not None:
            raise CommandError(f"A team with slug {slug!r} already exists.")
        user = teams.user_by_email(owner, create=True)
        try:
            team = teams.create_team(slug, name or slug, owner=user)
        except teams.TeamRuleError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"created team {team.slug} owned by {user.email}")
