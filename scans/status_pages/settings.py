"""A team's status page settings: its address (slug), title, whether it is on, and which
endpoints it shows under which names. A change drops the cached page at once."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db import transaction

from accounts.models import Team
from audit import record as audit
from scans.models import Endpoint, StatusPage, StatusPageEndpoint
from scans.status_pages.rendering import forget

__all__ = ["page_of", "save_settings", "validate_slug"]

SLUG_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{1,48}[a-z0-9])$")
# Words a chosen slug may not be: they read as the site's own pages, or invite impersonation.
RESERVED_SLUGS = frozenset(
    {
        "admin",
        "api",
        "app",
        "benchmarks",
        "dashboard",
        "docs",
        "help",
        "login",
        "logout",
        "new",
        "settings",
        "signup",
        "static",
        "status",
        "support",
        "team",
        "teams",
        "tokvera",
        "www",
        "security",
        "billing",
        "account",
        "accounts",
        "about",
        "metrics",
        "healthz",
    }
)


def validate_slug(text: str) -> str:
    """A slug a team chose: 3 to 50 of a-z, 0-9 and inner hyphens, not a reserved word."""
    slug = text.strip().lower()
    if not SLUG_RE.match(slug) or "--" in slug:
        raise ValidationError(
            "Use 3 to 50 lowercase letters, digits and single hyphens, "
            "starting and ending with a letter or digit."
        )
    if slug in RESERVED_SLUGS:
        raise ValidationError(f"“{slug}” is reserved; choose another address.")
    return slug


def page_of(team: Team) -> StatusPage:
    """The team's status page, made (off, with a random slug) the first time it is asked for."""
    page = StatusPage.objects.for_team(team).first()
    if page is None:
        page, _ = StatusPage.dangerously_unscoped.get_or_create(
            team=team, defaults={"title": f"{team.name} status"}
        )
    return page


@transaction.atomic
def save_settings(
    page: StatusPage, *, enabled: bool, slug: str, title: str, shown: list[tuple[Endpoint, str]]
) -> StatusPage:
    """Store the page's settings and the endpoints it shows, in order, under their names
    (blank: the endpoint's own name). `slug` is already validated; a taken one raises
    ValidationError. The cached page (under the old slug and the new) is dropped."""
    with audit.track(page):
        old_slug = page.slug
        if slug != old_slug and (
            StatusPage.dangerously_unscoped.filter(slug=slug).exclude(pk=page.pk).exists()
        ):  # only "taken", never whose
            raise ValidationError("This address is taken; choose another.")
        page.enabled, page.slug, page.title = enabled, slug, title.strip() or "Status"
        page.save()
        for endpoint, _ in shown:
            if endpoint.team_id != page.team_id:
                raise ValueError("a status page shows only its own team's endpoints")
        StatusPageEndpoint.objects.for_team(page.team_id).filter(status_page=page).delete()
        StatusPageEndpoint.dangerously_unscoped.bulk_create(
            [
                StatusPageEndpoint(
                    status_page=page,
                    endpoint=endpoint,
                    position=i,
                    display_name=(name.strip() or endpoint.name)[:100],
                )
                for i, (endpoint, name) in enumerate(shown)
            ]
        )
    # Now, and again once committed: a visitor in between may have cached the old page.
    forget(old_slug, slug)
    transaction.on_commit(lambda: forget(old_slug, slug))
    return page
