"""requests.jsonl as a user reads it after `tokvera scan`: one line per request the scan sent
(probe, warm-ups, levels, search and rate levels), counts that agree with report.json, token
counts as the server reported them, failures with their status and class, every line valid
against docs/requests.schema.json, and no prompt, reply, key or header in the file. Each runs
the real `tokvera scan` against a `tokvera target` subprocess on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections import Counter
from pathlib import Path

import jsonschema

from scans.grader.measurement import FAILURE_CLASSES
from scans.grader.plan import builtin_prompt
from tests.helpers.cli import FAST, MODEL, TOKVERA, target_process
from tests.helpers.paths import ROOT

SCHEMA = json.loads((ROOT / "docs" / "requests.schema.json").read_text())
KEY = "sk-test-never-written-7f3a9c"


def scan(url: str, tmp_path: Path, *extra: str) -> tuple[int, dict, list[dict], str]:
    """Run `tokvera scan` into tmp_path/r; its exit status, report, lines and the file's text."""
    env = {**os.environ, "COLUMNS": "80", "SCAN_TEST_KEY": KEY}
    done = subprocess.run([*TOKVERA, "scan", url, "--model", MODEL, "--concurrency", "1,2",
                           "--requests", "4", "--timeout", "5", "--api-key-env", "SCAN_TEST_KEY",
                           "--out", "r", *extra],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    out = tmp_path / "r"
    report = json.loads((out / "report.json").read_text())
    text = (out / "requests.jsonl").read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for line in lines:
        validator.validate(line)
    return done.returncode, report, lines, text


def test_every_request_sent_is_one_line_counted_as_report_json_counts_it(tmp_path):
    with target_process(*FAST) as (_, url):
        status, report, lines, text = scan(url, tmp_path, "--warmup", "1")
    assert status == 0
    phases = Counter((line["phase"], line["concurrency"]) for line in lines)
    assert phases[("probe", 1)] == 1
    for level in report["levels"]:
        assert phases[("level", level["concurrency"])] == level["requests"]
        assert phases[("warmup", level["concurrency"])] == 1
    assert len(lines) == 1 + sum(lv["requests"] + 1 for lv in report["levels"])
    assert lines[0]["phase"] == "probe"
    assert {line["warmup_for"] for line in lines if line["phase"] == "warmup"} == {"level"}
    # the tokens are what the server reported: its usage, request by request
    for level in report["levels"]:
        reported = {t["index"]: t for t in level["request_timelines"]}
        mine = [line for line in lines
                if line["phase"] == "level" and line["concurrency"] == level["concurrency"]]
        assert sorted(line["index"] for line in mine) == sorted(reported)
        for line in mine:
            timeline = reported[line["index"]]
            assert line["completion_tokens"] == 8 == timeline["completion_tokens"]
            assert line["prompt_tokens"] == timeline["prompt_tokens"] > 0
            assert line["cached_prompt_tokens"] == timeline["cached_tokens"]
            assert line["status"] == 200 and line["error_class"] is None
            assert line["output_chunks"] == timeline["output_chunks"] == 8
            assert line["ttft_ms"] is not None and line["latency_ms"] >= line["ttft_ms"]
    # never a prompt, a reply, the key or a header
    nonce = report["plan"]["workload"]["nonce"]["scan"]
    assert f"[{nonce}-" not in text
    assert builtin_prompt(0)[:40] not in text
    assert KEY not in text
    assert "Bearer" not in text and "authorization" not in text.lower()
    assert "content" not in text


def test_failed_requests_carry_their_status_and_error_class(tmp_path):
    with target_process(*FAST, "--error-rate", "0.5", "--seed", "7") as (_, url):
        _, report, lines, _ = scan(url, tmp_path)
    failed = [line for line in lines if line["error_class"] is not None]
    assert failed, "the target's error rate failed no request"
    for line in failed:
        assert line["error_class"] == "http_status_500"
        assert line["status"] == 500
        assert line["ttft_ms"] is None and line["completion_tokens"] is None
    for level in report["levels"]:
        mine = Counter(line["error_class"] for line in lines
                       if line["phase"] == "level" and line["concurrency"] == level["concurrency"])
        assert {k: v for k, v in mine.items() if k is not None} == level["failed"]
        assert mine[None] == level["succeeded"]


def test_search_and_rate_levels_and_their_warmups_are_lines_too(tmp_path):
    with target_process(*FAST) as (_, url):
        status, report, lines, _ = scan(url, tmp_path, "--warmup", "1",
                                        "--slo", "ttft_p95_ms=1000", "--find-capacity",
                                        "--search-levels", "1", "--rate", "40",
                                        "--rate-requests", "20")
    assert status == 0
    phases = Counter((line["phase"], line["warmup_for"], line["concurrency"],
                      line["rate_per_s"]) for line in lines)
    for level in report["search_levels"]:
        assert phases[("search", None, level["concurrency"], None)] == level["requests"]
        assert phases[("warmup", "search", level["concurrency"], None)] == 1
    (rate_level,) = report["rate_levels"]
    assert phases[("rate", None, None, 40.0)] == rate_level["requests"] == 20
    assert phases[("warmup", "rate", None, 40.0)] == 1
    # in the order sent: probe, the plan's levels, the search, the rate level
    order = [line["phase"] for line in lines if line["phase"] != "warmup"]
    assert order == sorted(order, key=["probe", "level", "search", "rate"].index)


def test_a_scan_the_preflight_stopped_has_its_probe_as_its_one_line(tmp_path):
    with socket.socket() as closed:  # a loopback port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    status, report, lines, _ = scan(f"http://127.0.0.1:{port}/v1", tmp_path)
    assert status == 5
    assert report["preflight"]["stopped"] is True
    (probe,) = lines
    assert probe["phase"] == "probe" and probe["concurrency"] == 1
    assert probe["error_class"] == "transport_error" and probe["status"] is None
    assert probe["body_written_offset_ms"] is None and probe["latency_ms"] is None


def test_the_schema_names_every_failure_class_of_the_grader():
    classes = SCHEMA["properties"]["error_class"]["oneOf"][1]["enum"]
    assert tuple(classes) == FAILURE_CLASSES
