"""Sign-up does not tell, by the time it takes, whether an address already has an account."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.hashers import MD5PasswordHasher
from django.test import Client
from django.urls import reverse

from tests.conftest import make_user

pytestmark = pytest.mark.django_db
PASSWORD = "a long enough passphrase"


class CountingHasher(MD5PasswordHasher):
    """The configured hasher, counting the passwords it hashes (the costly step of a sign-up
    with the production hashers)."""

    algorithm = "counting_md5"
    hashed: list[str] = []

    def encode(self, password, salt):
        CountingHasher.hashed.append(password)
        return super().encode(password, salt)


@pytest.fixture
def counted(settings) -> list[str]:
    settings.PASSWORD_HASHERS = ["tests.accounts.test_signup_cost.CountingHasher"]
    CountingHasher.hashed.clear()
    return CountingHasher.hashed


def test_signing_up_with_a_taken_address_hashes_the_password_as_a_new_one_does(counted):
    """Not a timing assertion: what makes both answers cost the same is that the password is
    hashed (the dominant cost, hundreds of milliseconds with the production hashers) on both
    paths, which this counts through a real hasher registered in PASSWORD_HASHERS."""
    # Addresses new to this run: allauth limits mails per address in the shared cache.
    taken = make_user(f"taken-{uuid.uuid4().hex[:8]}")
    counted.clear()
    new_address = f"new-{uuid.uuid4().hex[:8]}@example.test"

    answers = {}
    for label, address in (("taken", taken.email), ("new", new_address)):
        client = Client(REMOTE_ADDR="192.0.2.81")
        answers[label] = client.post(reverse("account_signup"), {
            "email": address, "password1": PASSWORD, "password2": PASSWORD})
        answers[label] = (answers[label].status_code, answers[label]["Location"], counted.count(PASSWORD))
        counted.clear()

    # The same answer, and one hash of the typed password each.
    assert answers["taken"] == answers["new"] == (302, reverse("account_email_verification_sent"), 1)
