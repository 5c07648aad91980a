"""Who a person is: the email address the site knows is theirs, and their profile.

Accounts made by self sign-up prove their address by the verification mail (allauth). Accounts
the site makes itself (an invitation accepted: the link came to that mailbox; an operator's
`createteam --owner EMAIL`; the demo) have their address recorded as verified here, or
allauth's mandatory verification would stop them at the login.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from allauth.account.models import EmailAddress
from django.http import HttpRequest

from accounts.models import Profile

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class SignedInRequest(HttpRequest):
    """The type of a request that `login_required` let through: its user is an account, never
    AnonymousUser (for type checking only: Django builds the request)."""

    user: User


def vouch_for_email(user: User) -> None:
    """Record the user's email as their verified, primary address."""
    if not user.email:
        return
    EmailAddress.objects.update_or_create(
        user=user,
        email__iexact=user.email,
        defaults={"email": user.email.lower(), "verified": True, "primary": True},
    )


def has_verified_email(user: User, email: str) -> bool:
    """Whether `email` is an address of the user's that has been proven theirs."""
    return EmailAddress.objects.filter(user=user, email__iexact=email.strip(), verified=True).exists()


def is_unclaimed_sign_up(user: User, email: str) -> bool:
    """Whether `user` is a self sign-up with `email` that nobody has used yet: its address is
    recorded but never proven, it never signed in, it belongs to no team, it is not staff and
    has no second factor. Only such an account may have its password set by whoever proves the
    mailbox (an invitation link); any other account is someone's, and its owner logs in."""
    from allauth.mfa.models import Authenticator

    return (
        EmailAddress.objects.filter(user=user, email__iexact=email.strip()).exists()
        and not has_verified_email(user, email)
        and user.last_login is None
        and not (user.is_staff or user.is_superuser)
        and not user.memberships.exists()
        and not Authenticator.objects.filter(user=user).exists()
    )


def profile_of(user: User) -> Profile:
    profile, _ = Profile.objects.get_or_create(user=user)
    return profile


def display_name(user: User) -> str:
    """The name the user chose, else their email (or username)."""
    name = Profile.objects.filter(user_id=user.pk).values_list("name", flat=True).first()
    return name or user.email or user.get_username()
