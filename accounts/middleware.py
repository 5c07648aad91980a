"""Per-request account settings: the user's timezone, and teams that require two-factor."""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from accounts.models import Profile, Team
from accounts.sso import PROVIDER_ID
from accounts.tenancy import Access

if TYPE_CHECKING:
    from django.contrib.auth.models import User

_View = TypeVar("_View", bound=Callable[..., Any])
GetResponse = Callable[[HttpRequest], HttpResponseBase]


def same_for_everyone(view: _View) -> _View:
    """Marks a public view whose response shared caches keep: it is rendered in UTC, and the
    timezone middleware never reads its visitor's session (which would add "Vary: Cookie")."""
    view.same_for_everyone = True  # type: ignore[attr-defined]  # a function takes attributes
    return view


class UserTimezoneMiddleware:
    """Every page (dates, charts) is shown in the logged-in user's timezone (their profile);
    anonymous pages, public pages and token requests stay in UTC."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        timezone.deactivate()
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()  # a worker thread serves other users next

    def process_view(self, request: HttpRequest, view_func: Callable[..., Any],
                     view_args: tuple[Any, ...], view_kwargs: dict[str, Any]) -> None:
        if getattr(view_func, "same_for_everyone", False):
            return None
        # Only a request that sent a session cookie can be a logged-in user's; reading
        # request.user on any other would load the session for nothing.
        if settings.SESSION_COOKIE_NAME in request.COOKIES and request.user.is_authenticated:
            zone = _profile_timezone(request.user)
            if zone is not None:
                timezone.activate(zone)
        return None


def _profile_timezone(user: User) -> zoneinfo.ZoneInfo | None:
    zone = Profile.objects.filter(user_id=user.pk).values_list("timezone", flat=True).first()
    return None if zone is None or str(zone) == "UTC" else zone


class TwoFactorRequiredMiddleware:
    """A page of a team that requires two-factor answers a member without it with the set-up
    page, naming the team, instead of the 404 the scoping layer gives (accounts.tenancy).
    API requests keep the 404 (session) or are not concerned at all (team tokens)."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponseRedirect | None:
        if not isinstance(exception, Http404) or request.path.startswith("/api/"):
            return None
        if not getattr(request, "user", None) or not request.user.is_authenticated:
            return None
        return ask_for_two_factor(request)


def ask_for_two_factor(request: HttpRequest) -> HttpResponseRedirect | None:
    """The redirect to the two-factor set-up (or to single sign-on), or None when no team of
    the user's is withheld."""
    access = Access.for_request(request)
    sign_on = reverse("openid_connect_login", kwargs={"provider_id": PROVIDER_ID})
    if access.sso_withheld and not access.withheld and not request.path.startswith(sign_on):
        names = sorted(Team.dangerously_unscoped.filter(pk__in=access.sso_withheld)
                       .values_list("name", flat=True))
        messages.warning(request, f"{', '.join(names)} requires single sign-on: sign in "
                                  "through it to see the team's pages.")
        return redirect(f"{sign_on}?{urlencode({'next': request.get_full_path()})}")
    if not access.withheld:
        return None
    # The user is a member of these teams: their names are theirs to see.
    names = sorted(Team.dangerously_unscoped.filter(pk__in=access.withheld).values_list("name", flat=True))
    messages.warning(
        request,
        f"{', '.join(names)} requires two-factor authentication: set it up to see the team's pages.",
    )
    return redirect(reverse("mfa_index"))
