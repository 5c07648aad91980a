"""Team pages: dashboard, members and invitations, API tokens, team switching.

Every team is fetched through tenancy.get_visible_or_404 (outsiders get 404); writes check
the role after the object is found (viewers get 403).
"""

from __future__ import annotations

from smtplib import SMTPException
from typing import TYPE_CHECKING, cast
from uuid import UUID

from allauth.mfa.utils import is_mfa_enabled
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import ProtectedError
from django.forms import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts import identity, teams
from accounts.forms import InvitedAccountForm, ProfileForm, TeamCreateForm, TeamRenameForm, TokenForm
from accounts.identity import SignedInRequest
from accounts.middleware import ask_for_two_factor
from accounts.models import Invitation, Membership, Role, Team
from accounts.sso import signed_in_with_sso
from accounts.tenancy import Access, get_visible_or_404, require_manage, require_owner
from audit import record as audit

if TYPE_CHECKING:
    from django.contrib.auth.models import User

CURRENT_TEAM_SESSION_KEY = "current_team"


def team_for_request(request: HttpRequest, slug: str) -> Team:
    """The team in the URL, if the caller belongs to it (404 otherwise); it becomes the
    team the navigation shows as current."""
    team = get_visible_or_404(request, Team, slug=slug)
    request.session[CURRENT_TEAM_SESSION_KEY] = team.slug
    return team


def team_to_create_in(request: HttpRequest, slug: str) -> Team:
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
def home(request: SignedInRequest) -> HttpResponse:
    access = Access.for_request(request)
    visible = Team.objects.visible_to(access)
    current = visible.filter(slug=request.session.get(CURRENT_TEAM_SESSION_KEY)).first()
    current = current or visible.first()
    if current is None:
        # A team that requires two-factor is the user's team all the same: say what it takes.
        return ask_for_two_factor(request) or render(request, "accounts/no_team.html")
    return redirect("team-dashboard", slug=current.slug)


@login_required
def profile(request: SignedInRequest) -> HttpResponse:
    """Name and timezone; the sign-in settings (email, password, two-factor) link from here."""
    form = ProfileForm(request.POST or None, instance=identity.profile_of(request.user))
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, "Profile saved.")
        return redirect("profile")
    return render(request, "accounts/profile.html", {"form": form})


@login_required
def team_create(request: SignedInRequest) -> HttpResponse:
    """A new team; its creator is its owner."""
    form = TeamCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        name = form.cleaned_data["name"].strip()
        slug = form.cleaned_data["slug"] or teams.free_slug(name)
        if teams.team_by_slug(slug) is not None:
            form.add_error("slug", "This slug is taken: choose another (or leave it empty).")
        else:
            try:
                team = teams.create_team(slug, name, owner=request.user)
            except teams.TeamRuleError as exc:
                form.add_error("name", str(exc))
            else:
                request.session[CURRENT_TEAM_SESSION_KEY] = team.slug
                messages.success(request, f"Team {team.name} created; you are its owner.")
                return redirect("team-dashboard", slug=team.slug)
    return render(request, "accounts/team_create.html", {"form": form},
                  status=400 if form.errors else 200)


@login_required
def team_members(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_for_request(request, slug)
    access = Access.for_request(request)
    memberships = list(team.memberships.select_related("user", "user__profile").order_by("created_at"))
    context = {
        "team": team,
        "memberships": memberships,
        # The last owner is offered neither "Leave" nor another role (teams.py refuses both).
        "sole_owner_id": _sole_owner_id(memberships),
        "invitations": team.invitations.filter(accepted_at__isnull=True).select_related("invited_by"),
        "roles": Role.choices,
        "can_manage": access.can_manage(team.pk),
        "now": timezone.now(),
    }
    return render(request, "accounts/team_members.html", context)


def _sole_owner_id(memberships: list[Membership]) -> int | None:
    owners = [m for m in memberships if m.role == Role.OWNER]
    return owners[0].pk if len(owners) == 1 else None


def _open_invitation(team: Team, public_id: UUID) -> Invitation:
    return get_object_or_404(team.invitations.filter(accepted_at__isnull=True), public_id=public_id)


@login_required
@require_POST
def invitation_revoke(request: SignedInRequest, slug: str, public_id: UUID) -> HttpResponse:
    team = team_for_request(request, slug)
    invitation = _open_invitation(team, public_id)
    require_manage(request, team)
    _require_owner_for_owners(request, team, invitation.role)
    teams.revoke_invitation(invitation)
    messages.success(request, f"Invitation of {invitation.email} revoked: its link no longer works.")
    return redirect("team-members", slug=team.slug)


@login_required
@require_POST
def invitation_resend(request: SignedInRequest, slug: str, public_id: UUID) -> HttpResponse:
    team = team_for_request(request, slug)
    invitation = _open_invitation(team, public_id)
    require_manage(request, team)
    _require_owner_for_owners(request, team, invitation.role)
    try:
        with transaction.atomic():  # the old link is replaced only if the new one was sent
            teams.resend_invitation(invitation, sent_by=request.user)
    except (SMTPException, OSError):
        messages.error(request, "Invitation not sent: the email could not be delivered. Try again.")
    else:
        messages.success(request, f"Invitation sent again to {invitation.email}, with a new link valid "
                                  f"{settings.INVITE_MAX_AGE_HOURS} hours; the old link no longer works.")
    return redirect("team-members", slug=team.slug)


@login_required
@require_POST
def member_invite(request: SignedInRequest, slug: str) -> HttpResponse:
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


def _require_owner_for_owners(request: HttpRequest, team: Team, *roles: str) -> None:
    """Owners are made, demoted and removed by owners only (admins cannot promote themselves)."""
    if Role.OWNER in roles and Access.for_request(request).role_in(team.pk) != Role.OWNER:
        raise PermissionDenied("Only an owner can do this to an owner.")


def _membership(team: Team, public_id: UUID) -> Membership:
    return get_object_or_404(team.memberships.select_related("user"), public_id=public_id)


@login_required
@require_POST
def member_role(request: SignedInRequest, slug: str, public_id: UUID) -> HttpResponse:
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
def member_remove(request: SignedInRequest, slug: str, public_id: UUID) -> HttpResponse:
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
def team_tokens(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_for_request(request, slug)
    return _tokens_page(request, team, TokenForm())


def _tokens_page(request: HttpRequest, team: Team, form: TokenForm, status: int = 200) -> HttpResponse:
    context = {
        "team": team,
        "tokens": team.api_tokens.select_related("created_by"),
        "form": form,
        "can_manage": Access.for_request(request).can_manage(team.pk),
    }
    return render(request, "accounts/team_tokens.html", context, status=status)


@login_required
def team_settings(request: SignedInRequest, slug: str) -> HttpResponse:
    """Team settings: every member may read them; owners change them (the team is theirs)."""
    team = team_for_request(request, slug)
    can_manage = Access.for_request(request).can_manage(team.pk)
    if request.method == "POST":
        require_owner(request, team)
        team.badge_site_measured_only = request.POST.get("badge_site_measured_only") == "on"
        require_two_factor = request.POST.get("require_two_factor") == "on"
        if require_two_factor and not team.require_two_factor and not is_mfa_enabled(request.user):
            # Or the one who turns it on would be shut out of the team at once.
            messages.error(request, "Set up two-factor authentication for yourself first "
                                    "(Profile → Two-factor), then require it of the team.")
            require_two_factor = False
        team.require_two_factor = require_two_factor
        require_sso = bool(settings.SSO_APP) and request.POST.get("require_sso") == "on"
        if require_sso and not team.require_sso and not signed_in_with_sso(request):
            # As for two-factor: the one who turns it on must not be shut out at once.
            messages.error(request, "Sign in through single sign-on yourself first, then "
                                    "require it of the team.")
            require_sso = False
        team.require_sso = require_sso
        team.sla_report_mail = request.POST.get("sla_report_mail") == "on"
        with audit.track(team):
            team.save(update_fields=["badge_site_measured_only", "require_two_factor",
                                     "require_sso", "sla_report_mail"])
        messages.success(request, "Settings saved.")
        return redirect("team-settings", slug=team.slug)
    context = {"team": team, "can_manage": can_manage, "sso_name": settings.SSO_APP and
               settings.SSO_APP["name"],
               "is_owner": Access.for_request(request).role_in(team.pk) == Role.OWNER,
               "rename_form": TeamRenameForm(initial={"name": team.name})}
    return render(request, "accounts/team_settings.html", context)


@login_required
@require_POST
def team_rename(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_for_request(request, slug)
    require_owner(request, team)
    form = TeamRenameForm(request.POST)
    if form.is_valid():
        try:
            teams.rename_team(team, form.cleaned_data["name"])
        except teams.TeamRuleError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"The team is now called {team.name}.")
    else:
        errors = form.errors.get("name", ["invalid"])
        messages.error(request, "Team name: " + "; ".join(str(e) for e in errors))
    return redirect("team-settings", slug=team.slug)


@login_required
def team_delete(request: SignedInRequest, slug: str) -> HttpResponse:
    """Owners only. The page spells out what goes with the team; typing its name confirms."""
    team = team_for_request(request, slug)
    if Access.for_request(request).role_in(team.pk) != Role.OWNER:
        raise PermissionDenied("Only an owner can delete the team.")
    error = ""
    if request.method == "POST":
        if request.POST.get("confirm_name", "").strip() != team.name:
            error = f"Type the team's name, {team.name}, exactly to confirm."
        else:
            name = team.name
            try:
                teams.delete_team(team)
            except ProtectedError:
                error = "Something still refers to this team's rows; nothing was deleted."
            else:
                request.session.pop(CURRENT_TEAM_SESSION_KEY, None)
                messages.success(request, f"Team {name} and everything in it was deleted.")
                return redirect("home")
    context = {"team": team, "losses": teams.what_deleting_loses(team), "error": error}
    return render(request, "accounts/team_delete.html", context, status=400 if error else 200)


@never_cache  # the page carries the new token: no cache may keep it
@login_required
@require_POST
def token_create(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_for_request(request, slug)
    require_manage(request, team)
    form = TokenForm(request.POST)
    if not form.is_valid():
        return _tokens_page(request, team, form, status=400)
    try:
        token, secret = teams.issue_token(
            team, form.cleaned_data["scope"], form.cleaned_data["name"].strip(),
            created_by=request.user, expires_at=form.expires_at(),
        )
    except teams.TeamRuleError as exc:
        messages.error(request, str(exc))
        return redirect("team-tokens", slug=team.slug)
    # Shown once, on this response only; never stored or logged.
    return render(request, "accounts/token_created.html", {"team": team, "token": token, "secret": secret})


@login_required
@require_POST
def token_revoke(request: SignedInRequest, slug: str, public_id: UUID) -> HttpResponse:
    team = team_for_request(request, slug)
    token = get_object_or_404(team.api_tokens, public_id=public_id)
    require_manage(request, team)
    teams.revoke_token(token)
    messages.success(request, f"Token {token.prefix}… revoked.")
    return redirect("team-tokens", slug=team.slug)


@login_required
@require_POST
def team_switch(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_for_request(request, slug)
    return redirect(reverse("team-dashboard", kwargs={"slug": team.slug}))


def invite_accept(request: HttpRequest, secret: str) -> HttpResponse:
    """An invitation link. The account of the invited address accepts it (logged in, or
    logging in first); someone without an account sets a password and joins in one step
    (the new account's email is the invited address). Any other account is refused.

    A self sign-up whose address was never proven and that was never used (anyone can sign up
    with any address) is not yet anyone's: the link, which reached that mailbox, proves it, and
    the form sets the password, replacing whatever its sign-up chose. Every other account
    (staff, a second factor, a team, a past login) logs in first: a mailbox alone never opens
    an account that is someone's."""
    invitation = teams.find_invitation(secret)
    if invitation is None:
        return render(request, "accounts/invite_invalid.html", status=404)
    if request.user.is_authenticated and not teams.is_invitee(invitation, request.user):
        return render(request, "accounts/invite_wrong_account.html",
                      {"invitation": invitation}, status=403)
    form = None
    if not request.user.is_authenticated:
        existing = teams.user_by_email(invitation.email)
        if existing is not None and not identity.is_unclaimed_sign_up(existing, invitation.email):
            messages.info(request, "Log in to accept the invitation.")
            return redirect(f"{reverse('account_login')}?next={request.path}")
        # Works whether or not self sign-up is open: the link is the permission.
        form = InvitedAccountForm(request.POST or None, email=invitation.email)
    if request.method == "POST":
        if form is not None and not form.is_valid():
            return render(
                request, "accounts/invite_accept.html",
                {"invitation": invitation, "form": form}, status=400,
            )
        with transaction.atomic():  # a new account exists only if the invitation was used
            # Without a form the caller is signed in (an anonymous one got the form above).
            user = cast("User", request.user)
            if form is not None:
                user = teams.user_by_email(invitation.email, create=True)
                user.set_password(form.cleaned_data["new_password1"])
                user.save(update_fields=["password"])
                identity.vouch_for_email(user)  # the link came to this mailbox
                profile = identity.profile_of(user)
                profile.name = form.cleaned_data["name"].strip()
                profile.save(update_fields=["name"])
            membership = teams.accept_invitation(secret, user)
            if membership is None:
                transaction.set_rollback(True)
                return render(request, "accounts/invite_invalid.html", status=404)
        if form is not None:
            login(request, user, backend="allauth.account.auth_backends.AuthenticationBackend")
        messages.success(request, f"You joined {membership.team.name}.")
        return redirect("team-dashboard", slug=membership.team.slug)
    return render(request, "accounts/invite_accept.html", {"invitation": invitation, "form": form})
