"""An interval shorter than an endpoint's scans take is refused, with the reason, in the form
and the API; before any scan there is nothing to judge by."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.models import Endpoint, Scan
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, scan_at

pytestmark = pytest.mark.django_db


def _scans_took(endpoint, minutes: float, count: int = 3) -> None:
    now = timezone.now()
    for i in range(count):
        scan = scan_at(endpoint, now - timedelta(hours=i + 1), GRADE_A)
        Scan.dangerously_unscoped.filter(pk=scan.pk).update(
            started_at=now - timedelta(hours=i + 1),
            finished_at=now - timedelta(hours=i + 1) + timedelta(minutes=minutes))


def test_the_api_refuses_an_interval_shorter_than_the_endpoints_scans_take(world, api):
    endpoint = make_endpoint(world.team, interval_minutes=60)
    _scans_took(endpoint, 6.2)
    url = reverse("api-endpoint-detail", kwargs={"public_id": endpoint.public_id})

    refused = api.patch(url, data=json.dumps({"interval_minutes": 5}),
                        content_type="application/json", **bearer(world.read_write_token))

    assert refused.status_code == 422
    [why] = refused.json()["interval_minutes"]
    assert why.startswith("scans of this endpoint take about 7 min (the median of its last 3)")
    assert "choose 7 min or more" in why
    assert Endpoint.dangerously_unscoped.get(pk=endpoint.pk).interval_minutes == 60
    ok = api.patch(url, data=json.dumps({"interval_minutes": 10}),
                   content_type="application/json", **bearer(world.read_write_token))
    assert ok.status_code == 200 and ok.json()["interval_minutes"] == 10
    # Other changes leave the interval's check alone.
    renamed = api.patch(url, data=json.dumps({"name": "renamed"}),
                        content_type="application/json", **bearer(world.read_write_token))
    assert renamed.status_code == 200


def test_the_form_shows_the_reason_at_the_interval(world, owner_client):
    endpoint = make_endpoint(world.team, interval_minutes=60)
    _scans_took(endpoint, 6.2)
    edit = reverse("endpoint-edit", args=[endpoint.public_id])
    form = owner_client.get(edit).context["form"]
    data = {name: value for name, value in form.initial.items()
            if value is not None and not isinstance(value, list | dict)}
    data.update({name: form[name].value() for name in form.fields
                 if form[name].value() not in (None, [], False)})
    data["interval_minutes"] = 5

    page = owner_client.post(edit, data)

    assert page.status_code == 400
    errors = page.context["form"].errors
    assert list(errors) == ["interval_minutes"], errors
    assert "queue each scan behind the last" in errors["interval_minutes"][0]


def test_a_new_endpoint_takes_any_allowed_interval(world, api):
    created = api.post(reverse("api-endpoint-list"), data=json.dumps({
        "name": "new box", "base_url": "http://127.0.0.1:9/v1", "model": "m",
        "interval_minutes": 5}), content_type="application/json",
        **bearer(world.read_write_token))
    assert created.status_code == 201, created.content
