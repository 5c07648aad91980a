import copy
import json

import jsonschema
import pytest

from scans.grader import scoring
from scans.grader.scoring import CheckValue
from tests.helpers.processes import ROOT

SCHEMA_PATH = ROOT / "docs" / "report.schema.json"


@pytest.fixture(scope="module")
def schema():
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def minimal_report(values=None):
    graded = scoring.grade(values if values is not None else {
        "ttft_p95_at_concurrency_1": CheckValue(210.0),
        "error_rate": CheckValue(0.0),
        "error_rate_at_peak": CheckValue(0.0),
        "metrics_endpoint": CheckValue(True),
        "gpu_utilization_at_peak": CheckValue(None, "no GPU utilization source"),
    })
    return {
        "tool_version": "0.1.0",
        "target": {"base_url": "http://127.0.0.1:8080/v1", "model": "tiny"},
        "started_at": "2026-11-29T10:00:00Z",
        "finished_at": "2026-11-29T10:01:00Z",
        "plan": {"levels": [1, 4], "requests_per_level": [20, 40], "max_tokens": 64},
        "levels": [
            {"concurrency": 1, "requests": 20, "succeeded": 20, "failed": {},
             "ttft_ms": {"p50": 201.0, "p95": 210.0, "p99": 212.0},
             "chunk_gap_ms": {"p50": 20.0, "p95": 21.0, "p99": 25.0},
             "generation_rate": {"median": 49.5, "basis": "tokens"},
             "client_bound": False, "loop_lag_ms": {"p99": 0.4, "max": 1.2}},
            {"concurrency": 4, "requests": 40, "succeeded": 0, "failed": {"http_500": 40},
             "ttft_ms": None, "chunk_gap_ms": {"p50": None, "p95": None, "p99": None},
             "generation_rate": {"median": None, "basis": None}},
        ],
        "checks": graded.checks,
        "measurements": {"cost_per_1000_requests": None, "cost_reason": "no prices given",
                         "gpu_samples": []},
        "score": graded.score,
    }


def test_the_schema_is_a_valid_draft_2020_12_schema(schema):
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_the_schema_accepts_a_minimal_report(schema):
    jsonschema.validate(minimal_report(), schema)


def test_the_schema_accepts_a_report_with_no_letter(schema):
    report = minimal_report({})
    assert report["score"]["grade"] == "insufficient_evidence"
    jsonschema.validate(report, schema)


def test_the_schema_accepts_a_report_with_caps_and_every_check_measured(schema):
    report = minimal_report({
        "ttft_p95_at_concurrency_1": CheckValue(2500.0),
        "ttft_p99_load_ratio": CheckValue(5.0),
        "inter_chunk_p95_at_concurrency_1": CheckValue(80.0),
        "error_rate": CheckValue(0.3),
        "error_rate_at_peak": CheckValue(0.6),
        "generation_rate_load_ratio": CheckValue(0.5, basis="chunks"),
        "usage_reported_share": CheckValue(0.0),
        "metrics_endpoint": CheckValue(False),
        "repeat_prompt_share": CheckValue(0.2),
        "gpu_utilization_at_peak": CheckValue(0.7),
    })
    report["measurements"] = {"cost_per_1000_requests": 0.42}
    assert report["score"]["caps_applied"]
    jsonschema.validate(report, schema)


def test_the_schema_rejects_a_report_that_carries_the_api_key(schema):
    report = minimal_report()
    report["target"]["api_key"] = "sk-test"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, schema)


@pytest.mark.parametrize("tamper", [
    lambda r: r["score"].update(grade="E"),
    lambda r: r["score"].update(points=100.5),
    lambda r: r["checks"][0].update(status="ok"),
    lambda r: r["checks"][0]["pass"].update(op="<"),
    lambda r: r["checks"][1].pop("reason"),
    lambda r: r["score"]["caps_applied"].append({"id": "made_up", "grade_at_best": "C"}),
    lambda r: r["measurements"].pop("cost_reason"),
    lambda r: r["levels"][0]["failed"].update(timeout=-1),
    lambda r: r.pop("score"),
], ids=["grade", "points", "status", "op", "reason", "cap", "cost_reason", "failed", "score"])
def test_the_schema_rejects_what_the_issue_rules_out(schema, tamper):
    report = copy.deepcopy(minimal_report())
    tamper(report)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, schema)


def test_the_schema_knows_every_check_pillar_and_cap(schema):
    check = schema["$defs"]["check"]["properties"]
    assert check["id"]["enum"] == [c.id for c in scoring.CHECKS]
    assert check["pillar"]["enum"] == list(scoring.PILLAR_WEIGHTS)
    cap = schema["$defs"]["score"]["properties"]["caps_applied"]["items"]["properties"]
    assert cap["id"]["enum"] == [c.id for c in scoring.CAPS]


def test_the_schema_describes_every_field_of_a_request_timeline_the_scanner_writes(schema):
    """A new RequestRecord field that reaches report.json fails here until the schema says what
    it means (the timelines are what a site re-grades a pushed report from)."""
    from scans.grader.measurement import RequestRecord
    from scans.grader.timeline import sample_times_ms

    record = RequestRecord(level=1, index=0)
    written = {**record.timeline_ms(0.0), **sample_times_ms(record, 0.0)}
    described = schema["$defs"]["request_timeline"]["properties"]
    assert set(written) == set(described)
    assert all(field.get("description") for field in described.values())
    level = schema["$defs"]["level"]["properties"]
    assert level["request_timelines"]["items"] == {"$ref": "#/$defs/request_timeline"}
    assert "output_times_ms" in described and "ttft_samples_ms" in level


def test_the_site_reads_the_schema_the_wheel_ships():
    """scans/grader/report.schema.json is the packaged copy of docs/report.schema.json (a link
    in a checkout; tests/packaging builds the wheel)."""
    from scans.running import pushes

    assert pushes.SCHEMA_PATH.read_bytes() == SCHEMA_PATH.read_bytes()
