"""Login throttling (django-axes, common/login_throttle.py): per account and per address,
after 10 failures even the right password is refused for 15 minutes, with a page that says so."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from tests.conftest import make_user

pytestmark = pytest.mark.django_db
RIGHT = "correct horse battery staple"  # tests.conftest.make_user's password
ATTACKER, ELSEWHERE = "198.51.100.7", "203.0.113.9"


def _log_in(address: str, username: str, password: str):
    client = Client(REMOTE_ADDR=address)
    response = client.post("/login/", {"login": username, "password": password})
    return response, "_auth_user_id" in client.session


def test_twenty_wrong_passwords_then_the_right_one_is_refused_until_the_cool_off_ends():
    make_user("victim")
    make_user("bystander")
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        answers = [_log_in(ATTACKER, "victim", f"guess-{i}")[0].status_code for i in range(20)]
        # The form again for 9 failures; the 10th locks the account and the address.
        assert answers == [200] * 9 + [429] * 11

        refused, logged_in = _log_in(ATTACKER, "victim", RIGHT)
        assert (refused.status_code, logged_in) == (429, False)
        assert refused["Retry-After"] == "900"
        assert "Too many failed logins for this account or from this address" in refused.content.decode()
        # Per account: the right password from another address is refused too.
        assert _log_in(ELSEWHERE, "victim", RIGHT)[0].status_code == 429
        # Per address: another account from the attacker's address is refused.
        assert _log_in(ATTACKER, "bystander", RIGHT)[0].status_code == 429
        # Another account from another address is unaffected.
        answer, logged_in = _log_in(ELSEWHERE, "bystander", RIGHT)
        assert (answer.status_code, logged_in) == (302, True)

        clock.shift(timedelta(minutes=15, seconds=1))
        answer, logged_in = _log_in(ATTACKER, "victim", RIGHT)
        assert (answer.status_code, logged_in) == (302, True)


def test_a_few_typos_do_not_lock_anyone_out():
    make_user("typist")
    for i in range(9):
        assert _log_in(ATTACKER, "typist", f"typo-{i}")[0].status_code == 200
    answer, logged_in = _log_in(ATTACKER, "typist", RIGHT)
    assert (answer.status_code, logged_in) == (302, True)
