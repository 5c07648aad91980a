"""The one table of profile fields (scans/endpoints/profile_fields.py): the API schema's bounds,
the form's inputs and checks, and the site's refusals on every surface all come from its rows;
a workload row reaches the form's fieldset, the scan's Workload and what a report compares."""

from __future__ import annotations

import dataclasses

import pytest
from django.test import Client
from django.urls import reverse

from scans.api.endpoints import EndpointSerializer
from scans.endpoints import profile, profile_fields
from scans.endpoints import service as endpoints
from scans.grader import PlanError, Workload
from scans.models import Endpoint
from scans.pages.forms import EndpointForm
from tests.conftest import bearer
from tests.scans.pages.test_endpoint_form import form_data

pytestmark = pytest.mark.django_db

COLUMNS = [row for row in profile_fields.FIELDS if row.kind != "dataset"]
SITE_MAXIMA = [row for row in profile_fields.FIELDS if row.too_big]
MINIMA = [row for row in COLUMNS if row.minimum is not None and not row.above_minimum]
# What a row's refusal needs besides its own value to be the first thing refused.
NEEDS = {"capacity_alert_below": {"capacity_search": True, "slo_ttft_p95_ms": 500.0}}


def _above(row: profile_fields.ProfileField):
    assert row.maximum is not None
    return row.maximum + 1


def test_every_row_is_a_field_of_the_form_and_of_the_api():
    assert {row.name for row in COLUMNS} <= set(EndpointForm._meta.fields or ())
    assert {row.name for row in profile_fields.FIELDS} <= set(EndpointSerializer.Meta.fields)


def test_the_api_schema_states_each_rows_bounds(client):
    schema = client.get(reverse("api-schema"), HTTP_ACCEPT="application/json").json()
    for body in ("EndpointRequest", "PatchedEndpointRequest"):
        properties = schema["components"]["schemas"][body]["properties"]
        for row in profile_fields.FIELDS:
            for keyword, value in row.schema_bounds().items():
                assert properties[row.name][keyword] == value, (body, row.name, keyword)


def test_the_forms_inputs_take_each_rows_label_help_and_bounds():
    form = EndpointForm()
    for row in COLUMNS:
        assert form.fields[row.name].label == row.label
        assert str(form.fields[row.name].help_text) == profile_fields.help_text(row)
        html = str(form[row.name])
        for attribute, value in row.widget_bounds().items():
            assert f'{attribute}="{value}"' in html, (row.name, html)
    dataset = profile_fields.BY_NAME["load_dataset"]
    assert form.fields["load_dataset"].label == dataset.label
    assert form.fields["load_dataset"].help_text == profile_fields.help_text(dataset)


@pytest.mark.parametrize("row", MINIMA, ids=lambda row: row.name)
def test_the_form_refuses_a_value_below_each_rows_minimum_at_its_field(world, row):
    client = Client()
    client.force_login(world.owner)
    response = client.post(reverse("endpoint-create", args=[world.team.slug]),
                           form_data(**{row.name: row.minimum - 1}))
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert f"greater than or equal to {row.minimum}" in " ".join(errors[row.name])
    assert not Endpoint.dangerously_unscoped.exists()


@pytest.mark.parametrize("row", SITE_MAXIMA, ids=lambda row: row.name)
def test_each_site_maximum_is_refused_in_its_rows_words_on_every_surface(world, api, row):
    fields = {**NEEDS.get(row.name, {}), row.name: _above(row)}
    with pytest.raises(PlanError) as refused:
        endpoints.check_profile({"base_url": "http://127.0.0.1:9/v1", "model": "m",
                                 "levels": [1], **fields})
    assert str(refused.value) == row.refusal()

    answer = api.post(reverse("api-endpoint-list"), {
        "name": "prod", "base_url": "http://127.0.0.1:8080/v1", "model": "tiny",
        "levels": [1, 4], **fields}, format="json", **bearer(world.read_write_token))
    assert answer.status_code == 422
    assert answer.json() == {"scan_profile": [row.refusal()]}

    client = Client()
    client.force_login(world.owner)
    page = client.post(reverse("endpoint-create", args=[world.team.slug]),
                       form_data(**{name: "on" if value is True else value
                                    for name, value in fields.items()}))
    assert page.status_code == 400
    shown_at = row.name if row.group in ("workload", "capacity") else "__all__"
    assert page.context["form"].errors[shown_at] == [
        f"This scan profile cannot run: {row.refusal()}."]
    assert not Endpoint.dangerously_unscoped.exists()


def test_each_workload_row_reaches_the_scan_the_report_and_the_forms_fieldset(world):
    workload = {option.name for option in dataclasses.fields(Workload)}
    numbers = profile_fields.group("workload", kind="number")
    for row in numbers:
        assert row.name in workload
        assert profile.PLAN_PATHS[row.name] == ("workload", row.name)
        assert profile_fields.in_site_words(f"{row.flag} must be at least 1") == (
            f"{row.words} must be at least 1")
    # the fieldset holds every workload row but the dataset (a file, after them), in table order
    shown = [row for row in profile_fields.group("workload") if row.kind != "dataset"]
    assert [field.name for field in EndpointForm().workload_fields] == [r.name for r in shown]
    assert {"api", "agent_workload"} <= {row.name for row in shown}
    client = Client()
    client.force_login(world.owner)
    page = client.get(reverse("endpoint-create", args=[world.team.slug])).content.decode()
    fieldset = page[page.index("<legend>Workload"):]
    fieldset = fieldset[:fieldset.index("</fieldset>")]
    places = [fieldset.index(f'name="{row.name}"') for row in shown]
    assert places == sorted(places)
