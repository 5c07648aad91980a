from typing import Any

from django.conf import settings
from django.http import HttpRequest

from accounts.models import Team
from accounts.tenancy import Access


def current_team(request: HttpRequest) -> dict[str, Any]:
    """The teams the logged-in user can switch between (for the navigation bar)."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    teams = list(Team.objects.visible_to(Access.for_request(request)))
    return {"my_teams": teams}


def signup_open(request: HttpRequest) -> dict[str, Any]:
    """Whether the login page offers "Create an account" (settings.SIGNUP_OPEN), and the single
    sign-on button's word when the site has a provider."""
    return {"signup_open": settings.SIGNUP_OPEN,
            "sso_name": settings.SSO_APP["name"] if settings.SSO_APP else ""}
