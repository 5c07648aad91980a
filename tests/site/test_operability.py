"""/healthz, /metrics, the admin, bad API input and secret redaction in logs."""

from __future__ import annotations

import logging

import pytest
from django.urls import reverse

from accounts.tasks import delete_expired_invitations
from common.logging import RedactSecretsFilter
from tests.conftest import bearer
from tokvera_site.celery import app as celery_app

pytestmark = pytest.mark.django_db


def test_healthz_reports_database_and_broker(client):
    response = client.get(reverse("healthz"))
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok"}


def test_healthz_is_503_when_the_broker_is_unreachable(client):
    original = celery_app.conf.broker_write_url
    celery_app.conf.broker_write_url = "redis://127.0.0.1:9/0"  # discard port: nothing listens
    try:
        response = client.get(reverse("healthz"))
    finally:
        celery_app.conf.broker_write_url = original
    assert response.status_code == 503
    body = response.json()
    assert body["database"] == "ok" and body["broker"].startswith("error")


def test_metrics_expose_requests_and_tasks(client):
    client.get(reverse("healthz"))
    delete_expired_invitations.apply()
    text = client.get(reverse("site-metrics")).content.decode()
    assert "django_http_requests_latency_seconds_by_view_method" in text
    assert 'tokvera_celery_tasks_total{state="SUCCESS",task="scans.tasks.delete_expired_invitations"}' in text


def test_admin_lists_teams_memberships_and_tokens(world, admin_client):
    for name in ("accounts_team", "accounts_membership", "accounts_apitoken"):
        response = admin_client.get(reverse(f"admin:{name}_changelist"))
        assert response.status_code == 200, name
    page = admin_client.get(reverse("admin:accounts_apitoken_changelist")).content.decode()
    assert world.read_only_token[:12] in page
    assert world.read_only_token not in page


def test_malformed_json_gets_400_and_changes_nothing(world, api):
    url = reverse("api-team-detail", kwargs={"slug": world.team.slug})
    api.force_authenticate(world.owner)
    response = api.generic("PATCH", url, data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]
    world.team.refresh_from_db()
    assert world.team.name == "Acme"


def test_invalid_field_gets_400_with_per_field_errors(world, api):
    url = reverse("api-team-detail", kwargs={"slug": world.team.slug})
    response = api.patch(url, {"name": ""}, format="json", **bearer(world.read_write_token))
    # a read-write token may not administer the team at all
    assert response.status_code == 403
    api.force_authenticate(world.owner)
    response = api.patch(url, {"name": ""}, format="json")
    assert response.status_code == 400
    assert "name" in response.json()


def test_unknown_team_slug_is_404(world, client):
    client.force_login(world.owner)
    assert client.get(reverse("team-dashboard", kwargs={"slug": "no-such-team"})).status_code == 404


def test_tokens_and_passwords_are_redacted_from_log_lines():
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1,
        "auth %s with password=%s and Authorization: Bearer %s",
        ("tkv_abcdefghijklmnopqrstuvwxyz123456", "hunter2", "sk-live-123"), None,
    )
    RedactSecretsFilter().filter(record)
    message = record.getMessage()
    assert "tkv_abcdefghijklmnop" not in message
    assert "hunter2" not in message
    assert "sk-live-123" not in message
    assert message.count("[redacted]") == 3
