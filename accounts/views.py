"""Team pages: dashboard, members and invitations, API tokens, team switching.

Every team is fetched through tenancy.get_visible_or_404 (outsiders get 404); writes check
the role after the object is found (viewers get 403).
"""

from __future__ import annotations

from smtplib import SMTPException

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import SetPasswordForm
from django.core.exceptions import PermissionDenied
from django.core.validators import validate_email
from django.db import transaction
from django.forms import ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts import teams
from accounts.models import Membership, Role, Team, TokenScope
from accounts.tenancy import Access, get_visible_or_404, require_manage

CURRENT_TEAM_SESSION_KEY = "current_team"


def team_for_request(request, slug: str) -> Team:
    """The team in the URL, if the caller belongs to it (404 otherwise); it becomes the
    team the navigation shows as current."""
    team = get_visible_or_404(request, Team, slug=slug)
    request.session[CURRENT_TEAM_SESSION_KEY] = team.slug
    return team


def team_to_create_in(request, slug: str) -> Team:
    """The team in the URL of a create page, chosen as the API chooses it
    (teams.team_for_new_object): 404 outside it, 403 for a read-only role."""
    try:
        team = teams.team_for_new_object(Access.for_request(request), slug)
    except teams.NoSuchTeam:
        raise Http404("No such team.") from None
    except teams.ReadOnlyInTeam as exc:
        raise PermissionDenied(str(exc)) from None
    request.session[CURRENT_TEAM_SESSION_KEY] = team.slug
    return team


@login_required
def home(request):
    access = Access.for_request(request)
    visible = Team.objects.visible_to(access)
    current = visible.filter(slug=request.session.get(CURRENT_TEAM_SESSION_KEY)).first()
    current = current or visible.first()
    if current is None:
        return render(request, "accounts/no_team.html")
    return redirect("team-dashboard", slug=current.slug)


@login_required
def team_members(request, slug):
    team = team_for_request(request, slug)
    access = Access.for_request(request)
    context = {
        "team": team,
        "memberships": team.memberships.select_related("user").order_by("created_at"),
        "invitations": team.invitations.filter(accepted_at__isnull=True),
        "roles": Role.choices,
        "can_manage": access.can_manage(team.pk),
    }
    return render(request, "accounts/team_members.html", context)


@login_required
@require_POST
def member_invite(request, slug):
    team = team_for_request(request, slug)
    require_manage(request, team)
    email = request.POST.get("email", "").strip()
    role = request.POST.get("role", Role.MEMBER)
    _require_owner_for_owners(request, team, role)
    try:
        validate_email(email)
        with transaction.atomic():  # no invitation is kept when its email cannot be sent
            teams.invite(team, email, role, invited_by=request.user)
    except (ValidationError, teams.TeamRuleError) as exc:
        messages.error(request, f"Invitation not sent: {'; '.join(getattr(exc, 'messages', [str(exc)]))}")
        return redirect("team-members", slug=team.slug)
    except (SMTPException, OSError):
        messages.error(request, "Invitation not sent: the email could not be delivered. Try again.")
        return redirect("team-members", slug=team.slug)
    # The link itself is not shown here: it is a secret for the invitee's mailbox only.
    messages.success(request, f"Invitation sent to {email}. The link works once.")
    return redirect("team-members", slug=team.slug)


def _require_owner_for_owners(request, team: Team, *roles: str) -> None:
    """Owners are made, demoted and removed by owners only (admins cannot promote themselves)."""
    if Role.OWNER in roles and Access.for_request(request).role_in(team.pk) != Role.OWNER:
        raise PermissionDenied("Only an owner can do this to an owner.")


def _membership(team: Team, public_id) -> Membership:
    return get_object_or_404(team.memberships.select_related("user"), public_id=public_id)


@login_required
@require_POST
def member_role(request, slug, public_id):
    team = team_for_request(request, slug)
    membership = _membership(team, public_id)
    require_manage(request, team)
    new_role = request.POST.get("role", "")
    _require_owner_for_owners(request, team, new_role, membership.role)
    try:
        teams.change_role(membership, new_role)
    except teams.TeamRuleError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{membership.user} is now {new_role}.")
    return redirect("team-members", slug=team.slug)


@login_required
@require_POST
def member_remove(request, slug, public_id):
    """Remove a member (owners and admins) or leave the team (anyone, for themselves)."""
    team = team_for_request(request, slug)
    membership = _membership(team, public_id)
    leaving = membership.user_id == request.user.pk
    if not leaving:
        require_manage(request, team)
        _require_owner_for_owners(request, team, membership.role)
    try:
        teams.remove_member(membership)
    except teams.TeamRuleError as exc:
        messages.error(request, str(exc))
        return redirect("team-members", slug=team.slug)
    if leaving:
        request.session.pop(CURRENT_TEAM_SESSION_KEY, None)
        messages.success(request, f"You left {team.name}.")
        return redirect("home")
    messages.success(request, f"{membership.user} was removed from {team.name}.")
    return redirect("team-members", slug=team.slug)


@login_required
def team_tokens(request, slug):
    team = team_for_request(request, slug)
    context = {
        "team": team,
        "tokens": team.api_tokens.all(),
        "scopes": TokenScope.choices,
        "can_manage": Access.for_request(request).can_manage(team.pk),
    }
    return render(request, "accounts/team_tokens.html", context)


@login_required
def team_settings(request, slug):
    """Team settings: every member may read them; owners and admins change them."""
    team = team_for_request(request, slug)
    can_manage = Access.for_request(request).can_manage(team.pk)
    if request.method == "POST":
        require_manage(request, team)
        team.badge_site_measured_only = request.POST.get("badge_site_measured_only") == "on"
        team.save(update_fields=["badge_site_measured_only"])
        messages.success(request, "Settings saved.")
        return redirect("team-settings", slug=team.slug)
    return render(request, "accounts/team_settings.html", {"team": team, "can_manage": can_manage})


@never_cache  # the page carries the new token: no cache may keep it
@login_required
@require_POST
def token_create(request, slug):
    team = team_for_request(request, slug)
    require_manage(request, team)
    try:
        token, secret = teams.issue_token(
            team, request.POST.get("scope", ""), request.POST.get("name", "").strip()[:100],
            created_by=request.user,
        )
    except teams.TeamRuleError as exc:
        messages.error(request, str(exc))
        return redirect("team-tokens", slug=team.slug)
    # Shown once, on this response only; never stored or logged.
    return render(request, "accounts/token_created.html", {"team": team, "token": token, "secret": secret})


@login_required
@require_POST
def token_revoke(request, slug, public_id):
    team = team_for_request(request, slug)
    token = get_object_or_404(team.api_tokens, public_id=public_id)
    require_manage(request, team)
    teams.revoke_token(token)
    messages.success(request, f"Token {token.prefix}… revoked.")
    return redirect("team-tokens", slug=team.slug)


@login_required
@require_POST
def team_switch(request, slug):
    team = team_for_request(request, slug)
    return redirect(reverse("team-dashboard", kwargs={"slug": team.slug}))


def invite_accept(request, secret):
    """An invitation link. The account of the invited address accepts it (logged in, or
    logging in first); someone without an account sets a password and joins in one step
    (the new account's email is the invited address). Any other account is refused."""
    invitation = teams.find_invitation(secret)
    if invitation is None:
        return render(request, "accounts/invite_invalid.html", status=404)
    if request.user.is_authenticated and not teams.is_invitee(invitation, request.user):
        return render(request, "accounts/invite_wrong_account.html",
                      {"invitation": invitation}, status=403)
    form = None
    if not request.user.is_authenticated:
        if teams.user_by_email(invitation.email) is not None:
            messages.info(request, "Log in to accept the invitation.")
            return redirect(f"{reverse('login')}?next={request.path}")
        # django-stubs require a user; here the form only validates the new password (the
        # account is created on accept).
        form = SetPasswordForm(user=None, data=request.POST or None)  # type: ignore[type-var]
    if request.method == "POST":
        if form is not None and not form.is_valid():
            return render(
                request, "accounts/invite_accept.html",
                {"invitation": invitation, "form": form}, status=400,
            )
        with transaction.atomic():  # a new account exists only if the invitation was used
            user = request.user
            if form is not None:
                user = teams.user_by_email(invitation.email, create=True)
                form.user = user
                form.save()
            membership = teams.accept_invitation(secret, user)
            if membership is None:
                transaction.set_rollback(True)
                return render(request, "accounts/invite_invalid.html", status=404)
        if form is not None:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, f"You joined {membership.team.name}.")
        return redirect("team-dashboard", slug=membership.team.slug)
    return render(request, "accounts/invite_accept.html", {"invitation": invitation, "form": form})
