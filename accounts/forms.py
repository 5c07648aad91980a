"""Forms of the account and team pages (the sign-in forms are allauth's; sign-up is allauth's
with one change, below)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from allauth.account.forms import SignupForm as AllauthSignupForm
from django import forms
from django.contrib.auth import password_validation
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.hashers import make_password
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from timezone_field import TimeZoneFormField

from accounts.models import Profile, TokenScope
from accounts.validators import validate_one_line


class SignupForm(AllauthSignupForm):
    """allauth's sign-up. A new address costs a password hash (the new account's); an address
    that has an account costs none in allauth, which sends a mail instead, and the difference
    in time would say which addresses have accounts. Both pay for one hash."""

    def try_save(self, request: HttpRequest) -> tuple[AbstractBaseUser | None, HttpResponse | None]:
        if self.account_already_exists:
            make_password(self.cleaned_data.get("password1"))  # the cost only: nothing is kept
        return super().try_save(request)


class ProfileForm(forms.ModelForm):
    name = forms.CharField(
        max_length=100,
        required=False,
        validators=[validate_one_line],
        help_text="Shown to your teams instead of your email.",
    )
    timezone = TimeZoneFormField(
        choices_display="WITH_GMT_OFFSET", help_text="Every date and chart is shown in it."
    )

    class Meta:
        model = Profile
        fields = ["name", "timezone"]


class TeamCreateForm(forms.Form):
    name = forms.CharField(max_length=100, validators=[validate_one_line])
    slug = forms.SlugField(
        max_length=50, required=False, help_text="In the team's URLs; made from the name when left empty."
    )


class TeamRenameForm(forms.Form):
    name = forms.CharField(max_length=100, validators=[validate_one_line])


class InvitedAccountForm(forms.Form):
    """The new account of an invitee: a name and a password, checked by the site's validators."""

    name = forms.CharField(max_length=100, required=False, validators=[validate_one_line], label="Your name")
    new_password1 = forms.CharField(
        label="Password", strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "new-password"})
    )
    new_password2 = forms.CharField(
        label="Password (again)",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )

    def __init__(self, *args: Any, email: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.email = email

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        first, second = cleaned.get("new_password1"), cleaned.get("new_password2")
        if first and second and first != second:
            self.add_error("new_password2", "The two passwords differ.")
        elif first:
            try:
                password_validation.validate_password(first)
            except forms.ValidationError as exc:
                self.add_error("new_password1", exc)
        return cleaned


TOKEN_LIFETIMES = [("", "Never"), ("7", "7 days"), ("30", "30 days"), ("90", "90 days"), ("365", "1 year")]


class TokenForm(forms.Form):
    # One line, checked by teams.issue_token (its error names the field: "Token name: …").
    name = forms.CharField(max_length=100, required=False)
    scope = forms.ChoiceField(choices=TokenScope.choices)
    expires_in_days = forms.TypedChoiceField(
        choices=TOKEN_LIFETIMES, coerce=int, empty_value=None, required=False, label="Expires"
    )

    def expires_at(self) -> datetime | None:
        days = self.cleaned_data.get("expires_in_days")
        return None if days is None else timezone.now() + timedelta(days=days)
