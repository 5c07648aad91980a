"""Creating, editing and deleting an endpoint through its form: validation at the edge,
secrets write-only (stored encrypted, never rendered back), schedule kept consistent."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts import encryption
from scans.models import CheckResult, Endpoint, Scan
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, NOW, scan_at

pytestmark = pytest.mark.django_db

API_KEY = "sk-live-very-secret-4242"
WEBHOOK_SECRET = "whsec-do-not-show-9191"
PROMPTS = "what is the capital of France?\nsummarize this ticket\n"


def form_data(**changes) -> dict:
    data = {"name": "llama on box", "base_url": "http://127.0.0.1:8080/v1", "model": "tiny",
            "mode": "scheduled", "levels_text": "1, 4, 16", "max_tokens": 64, "timeout_s": 30,
            "interval_minutes": 60, "enabled": "on", "slo_grade_floor": "B",
            "slo_objective": 0.9, "alert_after_errors": 3, "all_channels": "on"}
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def create(client, world, **changes):
    return client.post(reverse("endpoint-create", args=[world.team.slug]), form_data(**changes))


def test_a_member_creates_an_endpoint_and_lands_on_its_page(world):
    client = Client()
    client.force_login(world.member)

    response = create(client, world, api_key=API_KEY, slo_ttft_p95_ms=800,
                      slo_error_rate=0.02, price_input_per_mtok="0.15")

    endpoint = Endpoint.dangerously_unscoped.get(team=world.team)
    assert response.status_code == 302
    assert response["Location"] == reverse("endpoint-detail", args=[endpoint.public_id])
    assert endpoint.levels == [1, 4, 16]
    assert (endpoint.slo_ttft_p95_ms, endpoint.slo_error_rate) == (800, 0.02)
    assert str(endpoint.price_input_per_mtok) == "0.1500"
    assert encryption.decrypt(endpoint.api_key_encrypted) == API_KEY
    assert API_KEY not in endpoint.api_key_encrypted
    assert endpoint.all_channels  # alerts go to every channel of the team
    assert endpoint.next_scan_at is not None and endpoint.next_scan_at <= timezone.now()


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"interval_minutes": 4}, "interval_minutes", "greater than or equal to 5"),
    ({"interval_minutes": 1441}, "interval_minutes", "less than or equal to 1440"),
    ({"levels_text": "4, 16"}, "levels_text", "must start at 1"),
    ({"levels_text": "1, 8, 4"}, "levels_text", "strictly ascending"),
    ({"levels_text": "one, two"}, "levels_text", "whole numbers"),
    ({"base_url": "ftp://host/v1"}, "base_url", "http(s) URL"),
    ({"slo_objective": 90}, "slo_objective", "0.9 is 90%"),
    ({"slo_error_rate": 1.5}, "slo_error_rate", "between 0 and 1"),
    ({"timeout_s": 0}, "timeout_s", "above 0"),
    ({"name": ""}, "name", "required"),
])
def test_the_form_refuses_bad_input_with_a_clear_error(world, owner_client, changes, field,
                                                       message):
    response = create(owner_client, world, **changes)

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert field in errors and message in " ".join(errors[field])
    assert message in response.content.decode().replace("&#x27;", "'")
    assert not Endpoint.dangerously_unscoped.filter(team=world.team).exists()


def test_credentials_in_the_url_are_refused_by_the_plans_own_check(world, owner_client):
    response = create(owner_client, world, base_url="https://user:pw@host.example.test/v1")

    assert response.status_code == 400
    assert "credentials in the URL are not accepted" in response.content.decode()


def test_no_secret_is_rendered_back_on_any_page(world, owner_client):
    create(owner_client, world, api_key=API_KEY,
           prompt_sample=SimpleUploadedFile("prompts.txt", PROMPTS.encode()))
    endpoint = Endpoint.dangerously_unscoped.get(team=world.team)
    scan = scan_at(endpoint, NOW - timedelta(hours=1), GRADE_A)
    secrets = [API_KEY, "capital of France", endpoint.api_key_encrypted,
               endpoint.prompt_sample_encrypted]
    pages = [reverse("endpoint-edit", args=[endpoint.public_id]),
             reverse("endpoint-detail", args=[endpoint.public_id]),
             reverse("endpoint-delete", args=[endpoint.public_id]),
             reverse("team-dashboard", args=[world.team.slug]),
             reverse("scan-detail", args=[scan.public_id]),
             reverse("scan-report-html", args=[scan.public_id]),
             reverse("scan-compare", args=[scan.public_id])]

    for url in pages:
        body = owner_client.get(url).content.decode()
        for secret in secrets:
            assert secret not in body, (url, secret[:12])
    edit = owner_client.get(pages[0]).content.decode()
    assert "An API key is stored." in edit and "A prompt sample is stored." in edit


def test_a_rejected_form_does_not_echo_the_new_secrets(world, owner_client):
    endpoint = make_endpoint(world.team)

    response = owner_client.post(
        reverse("endpoint-edit", args=[endpoint.public_id]),
        form_data(api_key=API_KEY, interval_minutes=1))

    assert response.status_code == 400
    body = response.content.decode()
    assert API_KEY not in body
    endpoint.refresh_from_db()
    assert not endpoint.has_api_key


def test_a_blank_key_keeps_the_stored_one_and_clear_removes_it(world, owner_client):
    endpoint = make_endpoint(world.team, api_key_encrypted=encryption.encrypt(API_KEY))
    url = reverse("endpoint-edit", args=[endpoint.public_id])

    owner_client.post(url, form_data(name="renamed", api_key=""))
    endpoint.refresh_from_db()
    assert endpoint.name == "renamed"
    assert encryption.decrypt(endpoint.api_key_encrypted) == API_KEY

    owner_client.post(url, form_data(clear_api_key="on"))
    endpoint.refresh_from_db()
    assert endpoint.api_key_encrypted == ""


def test_giving_a_key_and_clearing_it_at_once_is_refused(world, owner_client):
    endpoint = make_endpoint(world.team, api_key_encrypted=encryption.encrypt(API_KEY))

    response = owner_client.post(reverse("endpoint-edit", args=[endpoint.public_id]),
                                 form_data(api_key="sk-new", clear_api_key="on"))

    assert response.status_code == 400
    assert "Either give a new key or remove the stored one" in response.content.decode()


def test_a_prompt_sample_is_stored_encrypted_and_can_be_deleted(world, owner_client):
    endpoint = make_endpoint(world.team)
    owner_client.post(reverse("endpoint-edit", args=[endpoint.public_id]), form_data(
        prompt_sample=SimpleUploadedFile("prompts.txt", PROMPTS.encode())))
    endpoint.refresh_from_db()
    assert encryption.decrypt(endpoint.prompt_sample_encrypted) == PROMPTS
    assert "capital" not in endpoint.prompt_sample_encrypted

    response = owner_client.post(reverse("endpoint-prompt-sample-delete",
                                         args=[endpoint.public_id]))

    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert not endpoint.has_prompt_sample


def test_a_prompt_sample_that_is_not_text_is_refused(world, owner_client):
    endpoint = make_endpoint(world.team)

    response = owner_client.post(reverse("endpoint-edit", args=[endpoint.public_id]), form_data(
        prompt_sample=SimpleUploadedFile("dump.bin", b"\xff\xfe\x00binary")))

    assert response.status_code == 400
    assert "must be UTF-8 text" in response.content.decode()


def test_a_shorter_interval_brings_the_next_scan_forward(world, owner_client):
    later = timezone.now() + timedelta(hours=20)
    endpoint = make_endpoint(world.team, interval_minutes=1440, next_scan_at=later)

    owner_client.post(reverse("endpoint-edit", args=[endpoint.public_id]),
                      form_data(interval_minutes=15))

    endpoint.refresh_from_db()
    assert endpoint.next_scan_at <= timezone.now() + timedelta(minutes=15)


@pytest.mark.parametrize("changes", [{"enabled": None}, {"mode": "pushed"}])
def test_a_paused_or_pushed_endpoint_has_no_next_scan(world, owner_client, changes):
    endpoint = make_endpoint(world.team, next_scan_at=timezone.now())

    owner_client.post(reverse("endpoint-edit", args=[endpoint.public_id]), form_data(**changes))

    endpoint.refresh_from_db()
    assert endpoint.next_scan_at is None


def test_a_viewer_cannot_open_the_form(world, viewer_client):
    endpoint = make_endpoint(world.team)

    assert viewer_client.get(reverse("endpoint-create", args=[world.team.slug])).status_code == 403
    assert viewer_client.get(reverse("endpoint-edit", args=[endpoint.public_id])).status_code == 403


def test_deleting_asks_first_then_removes_the_endpoint_and_its_scans(world, owner_client):
    endpoint = make_endpoint(world.team)
    scan_at(endpoint, NOW - timedelta(hours=1), GRADE_A)
    url = reverse("endpoint-delete", args=[endpoint.public_id])

    confirm = owner_client.get(url)
    assert confirm.status_code == 200
    assert "its 1 scan and their reports" in confirm.content.decode()

    response = owner_client.post(url)

    assert response["Location"] == reverse("team-dashboard", args=[world.team.slug])
    assert not Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).exists()
    assert not Scan.dangerously_unscoped.filter(endpoint_id=endpoint.pk).exists()
    assert not CheckResult.dangerously_unscoped.filter(endpoint_id=endpoint.pk).exists()


def test_a_prompt_sample_is_parsed_like_the_clis_prompts_file(world, owner_client):
    endpoint = make_endpoint(world.team)
    url = reverse("endpoint-edit", args=[endpoint.public_id])

    bad = owner_client.post(url, form_data(prompt_sample=SimpleUploadedFile(
        "sample.jsonl", b'{"prompt": "hello"}\n{"text": "no prompt here"}\n')))
    good = owner_client.post(url, form_data(prompt_sample=SimpleUploadedFile(
        "sample.jsonl", b'{"prompt": "hello"}\n{"messages": [{"role": "user", "content": "x"}]}\n')))

    assert bad.status_code == 400
    assert "The sample, line 2: expected a string" in bad.content.decode().replace("&quot;", '"')
    assert "no prompt here" not in bad.content.decode()
    assert good.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.has_prompt_sample


def test_a_url_without_a_scheme_is_refused_with_the_fix_not_guessed(world):
    """Issue 23: a URL typed without its scheme became http:// silently (an API key in clear
    to a server that wanted https)."""
    client = Client()
    client.force_login(world.member)
    response = client.post(reverse("endpoint-create", args=[world.team.slug]),
                           form_data(base_url="127.0.0.1:8080/V1"))
    assert response.status_code == 400
    [error] = response.context["form"].errors["base_url"]
    assert error == ("The URL has no scheme: did you mean http://127.0.0.1:8080/V1 or "
                     "https://127.0.0.1:8080/V1?")
    assert not Endpoint.dangerously_unscoped.filter(team=world.team).exists()


def test_the_api_refuses_a_url_without_a_scheme_with_the_fix(world, api):
    api.force_login(world.member)
    created = api.post("/api/v1/endpoints/", {
        "team": world.team.slug, "name": "box", "base_url": "llm.example.test/v1",
        "model": "tiny"}, format="json")
    assert created.status_code == 400
    assert "did you mean http://llm.example.test/v1 or https://llm.example.test/v1?" in (
        created.json()["base_url"][0])
    bad = api.post("/api/v1/endpoints/", {
        "team": world.team.slug, "name": "box", "base_url": "https://",
        "model": "tiny"}, format="json")
    assert bad.status_code == 400 and "http(s) URL" in bad.json()["base_url"][0]
