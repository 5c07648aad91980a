"""What the schema states and what the query parameters refuse: error
answers documented with their shapes, the limits the code enforces, the host heartbeat, and
400 for a page size or cursor the API cannot use instead of silently ignoring it."""

from __future__ import annotations

import base64
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.urls import reverse

from tests.conftest import bearer
from tests.helpers.factories import make_endpoint, make_scan

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def schema(client) -> dict:
    response = client.get(reverse("api-schema"), HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return response.json()


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        kind, name = node["$ref"].split("/")[-2:]
        node = schema["components"][kind][name]
    return node


def _responses(schema: dict, path: str, method: str) -> dict:
    return {code: _resolve(schema, answer)
            for code, answer in schema["paths"][path][method]["responses"].items()}


def _request_schema(schema: dict, path: str, method: str) -> dict:
    body = schema["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return _resolve(schema, body)


def test_endpoint_operations_document_their_error_answers(schema):
    retrieve = _responses(schema, "/api/v1/endpoints/{public_id}/", "get")
    assert {"200", "401", "404", "503"} <= set(retrieve)
    assert "403" not in retrieve  # a read never answers 403
    error = _resolve(schema, retrieve["404"]["content"]["application/json"]["schema"])
    assert error["properties"]["detail"]["type"] == "string" and error["required"] == ["detail"]
    update = _responses(schema, "/api/v1/endpoints/{public_id}/", "patch")
    assert {"200", "400", "401", "403", "404", "503"} <= set(update)
    field_errors = _resolve(schema, update["400"]["content"]["application/json"]["schema"])
    assert field_errors["additionalProperties"] == {}
    create = _responses(schema, "/api/v1/endpoints/", "post")
    assert {"201", "400", "401", "403", "404", "429", "503"} <= set(create)  # 404: `team`
    for code in ("429", "503"):
        assert create[code]["headers"]["Retry-After"]["required"] is True
    assert "WWW-Authenticate" in create["401"]["headers"]


def test_every_operation_documents_503_and_every_authenticated_one_401(schema):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            assert "503" in codes, (method, path)
            if operation.get("security") and {} not in operation["security"]:
                assert "401" in codes, (method, path)


def test_the_host_heartbeat_is_in_the_schema_with_its_shapes_and_host_token(schema):
    operation = schema["paths"]["/v1/hosts/heartbeat"]["post"]
    assert operation["security"] == [{"hostToken": []}]
    body = _request_schema(schema, "/v1/hosts/heartbeat", "post")
    assert body["required"] == ["models"]
    assert body["properties"]["models"]["maxItems"] == 64
    assert body["properties"]["slots"]["minimum"] == 1
    answers = _responses(schema, "/v1/hosts/heartbeat", "post")
    assert {"200", "400", "401", "429", "503"} <= set(answers)
    answer = _resolve(schema, answers["200"]["content"]["application/json"]["schema"])
    assert {"online", "heartbeat_interval_s", "models", "slots", "trust_level",
            "suspended"} <= set(answer["properties"])


def test_the_limits_the_code_enforces_are_schema_constraints(schema):
    job = _request_schema(schema, "/v1/jobs", "post")
    assert job["properties"]["messages"]["minItems"] == 1
    assert job["properties"]["messages"]["maxItems"] == 256
    endpoint = _request_schema(schema, "/api/v1/endpoints/", "post")["properties"]
    assert endpoint["slo_objective"]["exclusiveMinimum"] == 0
    assert endpoint["slo_objective"]["maximum"] == 1
    assert endpoint["slo_error_rate"]["minimum"] == 0 and endpoint["slo_error_rate"]["maximum"] == 1
    assert endpoint["price_input_per_mtok"]["multipleOf"] == 0.0001  # 4 decimal places
    assert endpoint["price_input_per_mtok"]["minimum"] == 0
    assert endpoint["timeout_s"]["maximum"] == 300
    assert endpoint["levels"]["maxItems"] == 8
    assert "\\u0000" in endpoint["name"]["pattern"]  # one line: no control characters
    assert endpoint["model"]["pattern"] == "^[^\\u0000]*$"  # the parser refuses NUL
    fail = _request_schema(schema, "/v1/jobs/{job_id}/fail", "post")
    assert fail["properties"]["reason"]["pattern"] == "^[^\\u0000]*$"
    complete = _request_schema(schema, "/v1/jobs/{job_id}/complete", "post")
    # Free-form JSON: no NUL in any string or key, at any depth.
    assert "JsonValue" in str(complete["properties"]["result"])
    value = schema["components"]["schemas"]["JsonValue"]
    assert {"type": "string", "pattern": "^[^\\u0000]*$"} in value["anyOf"]
    assert {"pattern": "^[^\\u0000]*$"} in [b.get("propertyNames") for b in value["anyOf"]]


def test_page_size_and_cursor_are_documented_with_their_bounds(schema):
    parameters = {p["name"]: p for p in schema["paths"]["/api/v1/endpoints/"]["get"]["parameters"]}
    assert parameters["page_size"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 500}
    scans = {p["name"]: p for p in
             schema["paths"]["/api/v1/endpoints/{public_id}/scans/"]["get"]["parameters"]}
    assert {"cursor", "page_size", "since", "until"} <= set(scans)
    page = _resolve(schema, _responses(schema, "/api/v1/endpoints/{public_id}/scans/", "get")
                    ["200"]["content"]["application/json"]["schema"])
    assert "results" in page["properties"]  # the page, not a bare list


@pytest.mark.parametrize("value", ["abc", "0", "-3", "501", "1.5", "", "٣"])
def test_a_page_size_the_api_cannot_use_is_refused(world, api, value):
    make_endpoint(world.team)
    response = api.get("/api/v1/endpoints/", {"page_size": value}, **bearer(world.read_only_token))
    assert response.status_code == 400
    assert "page_size" in response.json()


@pytest.mark.parametrize("cursor", [
    "nonsense",
    base64.b64encode(b"o=x").decode(),
    base64.b64encode(b"p=not-a-time").decode(),  # a forged position: no database error
    base64.b64encode(b"p=2026-01-01\x00").decode(),
])
def test_a_cursor_the_api_did_not_give_out_is_refused(world, api, cursor):
    endpoint = make_endpoint(world.team)
    make_scan(endpoint)
    for url in ("/api/v1/endpoints/", f"/api/v1/endpoints/{endpoint.public_id}/scans/"):
        response = api.get(url, {"cursor": cursor}, **bearer(world.read_only_token))
        assert response.status_code == 400, (url, response.content)
        assert "cursor" in response.json()


def test_the_cursors_the_api_gives_out_still_work(world, api):
    for i in range(3):
        make_endpoint(world.team, name=f"e{i}")
    first = api.get("/api/v1/endpoints/", {"page_size": 2}, **bearer(world.read_only_token)).json()
    second = api.get(first["next"], **bearer(world.read_only_token))
    assert second.status_code == 200 and len(second.json()["results"]) == 1


@pytest.mark.parametrize("query", [{"since": "yesterday"}, {"until": "2026-13-01T00:00:00Z"}])
def test_bad_time_filters_are_refused(world, api, query):
    endpoint = make_endpoint(world.team)
    make_scan(endpoint)
    for url, extra in ((f"/api/v1/endpoints/{endpoint.public_id}/scans/", {}),
                       (f"/api/v1/endpoints/{endpoint.public_id}/history/", {"check": "error_rate"})):
        response = api.get(url, {**query, **extra}, **bearer(world.read_only_token))
        assert response.status_code == 400, (url, response.content)
        assert set(query) <= set(response.json())


@pytest.mark.parametrize(("query", "found"), [
    # Times the schema allows (date-time) but out of the database's reach: these were 500s,
    # then 400s; no scan is older than 1970 or newer than 9998, so they select what those do.
    ({"since": "0180-04-27T14:43:30.0+23:19"}, 1), ({"since": "0001-01-01T00:00:00+23:00"}, 1),
    ({"until": "9999-12-31T23:59:59-23:00"}, 1), ({"until": "0814-09-03T05:37:25.194-21:50"}, 0),
])
def test_a_time_beyond_the_calendars_reach_selects_what_the_nearest_bound_does(world, api, query,
                                                                              found):
    endpoint = make_endpoint(world.team)
    make_scan(endpoint)
    response = api.get(f"/api/v1/endpoints/{endpoint.public_id}/scans/", query,
                       **bearer(world.read_only_token))
    assert response.status_code == 200, response.content
    assert len(response.json()["results"]) == found


def test_the_cursor_pattern_says_which_cursors_are_taken(world, api, schema):
    parameters = {p["name"]: p for p in schema["paths"]["/api/v1/endpoints/"]["get"]["parameters"]}
    pattern = parameters["cursor"]["schema"]["pattern"]
    for i in range(3):
        make_endpoint(world.team, name=f"e{i}")
    first = api.get("/api/v1/endpoints/", {"page_size": 2}, **bearer(world.read_only_token)).json()
    given = parse_qs(urlsplit(first["next"]).query)["cursor"][0]
    assert re.fullmatch(pattern, given)  # the API's own cursors match it
    # Any cursor that matches is a place in the list, whoever wrote it (a position before,
    # between or after the rows, an offset past DRF's cap, no position at all).
    for cursor in ("0.0.0", "0.1.0", "999999999.0.", "0.0.-9999999999999999",
                   "0.1.99999999999999999", given):
        assert re.fullmatch(pattern, cursor)
        response = api.get("/api/v1/endpoints/", {"cursor": cursor},
                           **bearer(world.read_only_token))
        assert response.status_code == 200, (cursor, response.content)
    rest = api.get("/api/v1/endpoints/", {"cursor": given}, **bearer(world.read_only_token))
    assert [e["name"] for e in rest.json()["results"]] == ["e2"]


def test_a_base_url_that_matches_the_schema_is_taken(world, api, schema):
    pattern = _request_schema(schema, "/api/v1/endpoints/", "post")["properties"]["base_url"][
        "pattern"]
    for url in ("http://0.0.0.0", "https://[::1]:65535/v1", "http://localhost/v1/",
                "https://a-b.models.example.com:8443/openai/v1"):
        assert re.fullmatch(pattern, url)
        response = api.post("/api/v1/endpoints/", {"name": url, "base_url": url, "model": "m"},
                            format="json", **bearer(world.read_write_token))
        assert response.status_code == 201, (url, response.content)
    for url in ("0", "ftp://example.com", "https://example.com/v1?x=1", "http://example.com:65536"):
        assert not re.fullmatch(pattern, url)


def test_a_team_rename_through_the_api_is_one_line_as_the_schema_says(world, api, schema):
    rename = _request_schema(schema, "/api/v1/teams/{slug}/", "patch")
    assert "\\u0000" in rename["properties"]["name"]["pattern"]
    api.force_authenticate(world.owner)
    response = api.patch(f"/api/v1/teams/{world.team.slug}/", {"name": "Acme\nBcc: x"},
                         format="json")
    assert response.status_code == 400 and "name" in response.json()
