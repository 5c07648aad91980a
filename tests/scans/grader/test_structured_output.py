"""Structured output (`--json-schema`): every request asks for response_format json_schema,
and per level the shares of replies that parse and validate equal what the server produced.
Against `tokvera target` (told how many bad replies to make) and a raw server whose replies
parse but break the schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scans.grader import ScanPlan, run_scan
from scans.grader.agent_load import load_schema
from scans.grader.demo_server import TargetConfig, serving_target
from scans.grader.report import agent_figures
from scans.grader.workload import Workload
from tests.helpers.servers import (
    content_event,
    done_event,
    finish_event,
    good_stream,
    raw_server,
    stream_server,
    usage_event,
    validate_report,
)

TOKVERA = [sys.executable, "-m", "tokvera_site.cli"]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"},
                                           "score": {"type": "integer", "minimum": 0}},
          "required": ["name", "score"], "additionalProperties": False}


def _plan(port: int, schema_file: Path, requests: int = 8) -> ScanPlan:
    return ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="tokvera-target", levels=(1,),
                    requests=requests, timeout_s=10.0, max_tokens=64,
                    workload=Workload(structured_output=load_schema(str(schema_file))))


@pytest.fixture
def schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    return path


def test_the_shares_equal_the_bad_replies_the_target_was_told_to_make(schema_file: Path) -> None:
    config = TargetConfig(ttft_ms=2.0, itl_ms=0.5, bad_json_share=0.25)
    with serving_target(config) as (server, _, port):
        level = run_scan(_plan(port, schema_file)).levels[0]
        bodies = list(server.received)
    # a bad reply in four: alternately cut short (not JSON) and JSON of the wrong type
    assert agent_figures(level)["structured_output"] == {
        "requests": 8, "parsed_share": 0.875, "valid_share": 0.75}
    assert all(b["response_format"]["json_schema"]["schema"] == SCHEMA for b in bodies)


def test_all_good_replies_validate(schema_file: Path) -> None:
    with serving_target(TargetConfig(ttft_ms=2.0, itl_ms=0.5)) as (_, _, port):
        level = run_scan(_plan(port, schema_file, requests=4)).levels[0]
    assert agent_figures(level)["structured_output"]["valid_share"] == 1.0


def test_a_reply_that_parses_but_breaks_the_schema_is_not_valid(schema_file: Path) -> None:
    def body(_: int) -> bytes:
        pieces = ['{"name": ', '"x", "sc', 'ore": -3}']  # below the minimum
        return (b"".join(content_event(p, role=i == 0) for i, p in enumerate(pieces))
                + finish_event() + usage_event(10, 3) + done_event())

    with raw_server(stream_server(body)) as port:
        level = run_scan(_plan(port, schema_file, requests=2)).levels[0]
    assert agent_figures(level)["structured_output"] == {
        "requests": 2, "parsed_share": 1.0, "valid_share": 0.0}


def test_the_cli_reports_structured_output_in_report_json(tmp_path: Path) -> None:
    with serving_target(TargetConfig(ttft_ms=2.0, itl_ms=0.5, bad_json_share=0.5)) as (
            _, host, port):
        run = subprocess.run([*TOKVERA, "scan", f"http://{host}:{port}/v1", "--model", "m",
                              "--concurrency", "1", "--requests", "4", "--json-schema",
                              "builtin", "--out", str(tmp_path), "--quiet"],
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    validate_report(report)
    assert report["levels"][0]["structured_output"]["valid_share"] == 0.5


@pytest.mark.parametrize("content", ['{"type": "objekt"}', '{"minimum": "zero"}', "[1, 2]",
                                     "{not json"])
def test_a_schema_that_is_not_a_json_schema_exits_2_before_any_request(
        tmp_path: Path, content: str) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(content)
    seen: list[int] = []

    def body(number: int) -> bytes:
        seen.append(number)
        return good_stream()

    with raw_server(stream_server(body)) as port:
        run = subprocess.run([*TOKVERA, "scan", f"http://127.0.0.1:{port}/v1", "--model", "m",
                              "--json-schema", str(schema), "--out", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1 and "--json-schema" in run.stderr, run.stderr
    assert seen == []
