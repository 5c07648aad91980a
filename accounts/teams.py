"""Team services: creating teams, roles, invitations and API tokens. Each owns its transaction."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from accounts import credentials
from accounts.models import ApiToken, Invitation, Membership, Role, Team, TokenScope
from accounts.tenancy import Access
from accounts.validators import validate_one_line


class TeamRuleError(ValueError):
    """A request that would break a team rule (e.g. leaving a team without an owner)."""


class NotTheInvitee(TeamRuleError):
    """An invitation used by an account whose email is not the invited address."""


def is_invitee(invitation: Invitation, user) -> bool:
    """Only the invited address may accept: a link forwarded, leaked or guessed from a log
    must not let another account (of any team) join, let alone with the invited role."""
    return (user.email or "").strip().lower() == invitation.email


def _one_line(label: str, value: str) -> None:
    try:
        validate_one_line(value)
    except ValidationError as exc:
        raise TeamRuleError(f"{label}: {exc.messages[0]}") from None


@transaction.atomic
def create_team(slug: str, name: str, owner) -> Team:
    _one_line("Team name", name)
    team = Team.dangerously_unscoped.create(slug=slug, name=name or slug)  # no team yet: this makes it
    Membership.objects.for_team(team).create(team=team, user=owner, role=Role.OWNER)
    return team


def team_by_slug(slug: str) -> Team | None:
    """The team with this slug, or None: for commands given a slug before any team is known."""
    return Team.dangerously_unscoped.filter(slug=slug).first()  # the slug is the only key here


def _lock_owners(team: Team) -> list[Membership]:
    # Locking the owner rows serialises two owners demoting each other at the same moment.
    return list(
        Membership.objects.for_team(team).select_for_update().filter(role=Role.OWNER)
    )


@transaction.atomic
def change_role(membership: Membership, new_role: str) -> Membership:
    if new_role not in Role.values:
        raise TeamRuleError(f"Unknown role {new_role!r}.")
    owners = _lock_owners(membership.team)
    membership.refresh_from_db()
    if membership.role == Role.OWNER and new_role != Role.OWNER and len(owners) <= 1:
        raise TeamRuleError("The last owner cannot be demoted; make someone else owner first.")
    membership.role = new_role
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def remove_member(membership: Membership) -> None:
    owners = _lock_owners(membership.team)
    membership.refresh_from_db()
    if membership.role == Role.OWNER and len(owners) <= 1:
        raise TeamRuleError("The last owner cannot leave; make someone else owner first.")
    membership.delete()


def _invite_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def invite(team: Team, email: str, role: str, invited_by) -> tuple[Invitation, str]:
    """Create an invitation and email its link. Returns the invitation and the link."""
    if role not in Role.values:
        raise TeamRuleError(f"Unknown role {role!r}.")
    secret = secrets.token_urlsafe(32)
    invitation = Invitation.objects.for_team(team).create(
        team=team,
        email=email.strip().lower(),
        role=role,
        secret_hash=_invite_hash(secret),
        invited_by=invited_by,
        expires_at=timezone.now() + timedelta(hours=settings.INVITE_MAX_AGE_HOURS),
    )
    link = f"{settings.SITE_URL}/invites/{secret}/"
    send_mail(
        subject=f"You are invited to {team.name} on Tokvera",
        message=(
            f"{invited_by} invited you to join {team.name} as {role}.\n\n"
            f"Accept within {settings.INVITE_MAX_AGE_HOURS} hours: {link}\n"
            "The link works once."
        ),
        from_email=None,
        recipient_list=[invitation.email],
    )
    return invitation, link


def find_invitation(secret: str) -> Invitation | None:
    """The open invitation for this link, or None if it is unknown, used or expired."""
    return (
        # Found by the link's secret hash: whose team it is, is what this lookup learns.
        Invitation.dangerously_unscoped.select_related("team")
        .filter(
            secret_hash=_invite_hash(secret), accepted_at__isnull=True, expires_at__gt=timezone.now()
        )
        .first()
    )


@transaction.atomic
def accept_invitation(secret: str, user) -> Membership | None:
    """Use the link once: the conditional UPDATE's row count decides who wins a race."""
    invitation = find_invitation(secret)
    if invitation is None:
        return None
    if not is_invitee(invitation, user):
        raise NotTheInvitee(f"This invitation is for {invitation.email}, not {user.email or 'you'}.")
    claimed = Invitation.objects.for_team(invitation.team).filter(
        pk=invitation.pk, accepted_at__isnull=True
    ).update(accepted_at=timezone.now(), accepted_by=user)
    if not claimed:
        return None
    membership, created = Membership.objects.for_team(invitation.team).get_or_create(
        team=invitation.team, user=user, defaults={"role": invitation.role}
    )
    return membership


def issue_token(team: Team, scope: str, name: str = "", created_by=None) -> tuple[ApiToken, str]:
    """Create an API token; the returned secret is shown once and never stored."""
    if scope not in TokenScope.values:
        raise TeamRuleError(f"Unknown scope {scope!r}: expected read-only or read-write.")
    _one_line("Token name", name)
    new = credentials.new_secret("tkv")
    token = ApiToken.objects.for_team(team).create(
        team=team,
        name=name or f"{scope} token",
        prefix=new.prefix,
        secret_hmac=new.digest,
        scope=scope,
        created_by=created_by,
    )
    return token, new.token


def revoke_token(token: ApiToken) -> None:
    ApiToken.objects.for_team(token.team_id).filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )


def user_by_email(email: str, create: bool = False):
    User = get_user_model()
    email = email.strip().lower()
    user = User.objects.filter(email__iexact=email).first()
    if user is None and create:
        user = User.objects.create_user(username=email, email=email)
        user.set_unusable_password()
        user.save()
    return user


# --- which team a new object goes into (the page and the API ask the same way) -------------


class TeamChoiceError(Exception):
    """Why a new endpoint (or other team object) cannot be created in the team asked for."""


class TeamNotChosen(TeamChoiceError):
    """The caller belongs to several teams and named none."""


class NoSuchTeam(TeamChoiceError):
    """No team of the caller's has that slug (the same answer as for a team that does not exist)."""


class ReadOnlyInTeam(TeamChoiceError):
    """The caller may read the team but not write to it."""


def team_for_new_object(access: Access, slug: str | None) -> Team:
    """The team named by `slug` among the caller's teams or, with no slug, the caller's only
    team (a team token, or a user in one team); the caller must be able to write there."""
    visible = Team.objects.visible_to(access)
    if slug is not None:
        team = visible.filter(slug=slug).first()
    elif len(access.team_ids) == 1:
        team = visible.first()
    else:
        raise TeamNotChosen("say which team (its slug)")
    if team is None:
        raise NoSuchTeam("No such team.")
    if not access.can_write(team.pk):
        raise ReadOnlyInTeam("Your role in this team is read-only.")
    return team
