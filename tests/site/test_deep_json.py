"""JSON nested too deep is a 400, never a RecursionError 500: on the
host heartbeat (and every API view) through common/parsers.py; the report upload reads its
body itself (scans/running/pushes.py) so that it can limit its size before parsing, and its proof task
refuses it with the same rule."""

from __future__ import annotations

import pytest

from benchmarks.network import hosts
from benchmarks.network.host_protocol import HEARTBEAT_MAX_BYTES
from common.parsers import MAX_JSON_DEPTH, TOO_DEEP
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint

pytestmark = pytest.mark.django_db

DEEP_ARRAY = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000
JUST_OVER = '{"levels":' * (MAX_JSON_DEPTH + 1) + "[]" + "}" * (MAX_JSON_DEPTH + 1)


def post(api, path, body, token):
    return api.generic("POST", path, data=body, content_type="application/json", **bearer(token))


@pytest.mark.parametrize("body", [DEEP_ARRAY, DEEP_OBJECT, JUST_OVER],
                         ids=["100000-deep-array", "100000-deep-object", "just-over-the-limit"])
def test_a_deeply_nested_report_upload_is_refused(world, api, body, eager_tasks):
    """The upload is taken (202) and parsed by the proof task: in-process here."""
    endpoint = make_endpoint(world.team, mode="pushed")
    response = post(api, f"/api/v1/endpoints/{endpoint.public_id}/reports", body,
                    world.read_write_token)
    assert response.status_code == 202
    scan = endpoint.scans.get()
    assert scan.status == "refused" and scan.report is None
    assert scan.error_reason == TOO_DEEP


@pytest.mark.parametrize("body", [DEEP_ARRAY, DEEP_OBJECT, JUST_OVER],
                         ids=["100000-deep-array", "100000-deep-object", "just-over-the-limit"])
def test_a_deeply_nested_heartbeat_is_a_400(world, api, body):
    host, token = hosts.create_host(world.team, "box-1")
    response = post(api, "/v1/hosts/heartbeat", body, token)
    assert response.status_code == 400
    if len(body) > HEARTBEAT_MAX_BYTES:  # refused for its size before it is parsed
        assert response.json()["detail"] == f"A heartbeat body is at most {HEARTBEAT_MAX_BYTES} bytes."
    else:
        assert response.json()["detail"] == TOO_DEEP  # the API parser's message, naming the limit
    host.refresh_from_db()
    assert host.last_heartbeat_at is None
