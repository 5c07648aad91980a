"""The account URLs (registry.ACCOUNT): each one's own user only. Anonymous callers are sent to
log in, team tokens get nothing, and one user's two-factor keys are out of another's reach."""

from __future__ import annotations

import pytest
from allauth.mfa.models import Authenticator
from django.test import Client
from django.urls import reverse

from tests.conftest import bearer, build_world
from tests.isolation.registry import ACCOUNT

# The account pages a GET opens without arguments (the rest take an object, below, or are the
# API's whoami, tested in tests/accounts/test_api_tokens.py).
PAGES = sorted(ACCOUNT - {"api-whoami", "mfa_remove_webauthn", "mfa_edit_webauthn"})


@pytest.mark.django_db
@pytest.mark.parametrize("name", PAGES)
def test_an_account_page_sends_anonymous_callers_and_tokens_to_log_in(name):
    world = build_world()
    for headers in ({}, bearer(world.read_write_token)):
        answer = Client().get(reverse(name), **headers)
        assert answer.status_code == 302, (name, answer.status_code)
        assert answer["Location"].startswith(reverse("account_login")), answer["Location"]


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["mfa_remove_webauthn", "mfa_edit_webauthn"])
def test_another_users_security_key_is_not_found(name):
    world = build_world()
    key = Authenticator.objects.create(user=world.outsider, type=Authenticator.Type.WEBAUTHN,
                                       data={"name": "outsider's key", "credential": {}})
    client = Client(REMOTE_ADDR="203.0.113.41")
    password = "correct horse battery staple"  # tests.conftest.make_user's
    client.post(reverse("account_login"), {"login": world.owner.email, "password": password})
    client.post(reverse("account_reauthenticate"), {"password": password})  # as the page asks
    for method in (client.get, client.post):
        answer = method(reverse(name, kwargs={"pk": key.pk}), {"name": "taken over"})
        assert answer.status_code == 404, answer.status_code  # found among one's own keys only
        assert "outsider" not in answer.content.decode()
    key.refresh_from_db()
    assert key.data["name"] == "outsider's key"
