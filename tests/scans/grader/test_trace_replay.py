"""Trace replay (`--trace FILE`, `--trace-speed`, `--trace-limit`, `--trace-max-s`): a Mooncake
and a BurstGPT trace replayed against the reference target, open-loop at the trace's own times,
prompts as long as the trace says in the server's tokens with its shared blocks as shared text;
and every bad trace refused in one line before anything is sent. Measured, never graded."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jsonschema
import pytest

from scans.grader import ScanPlan, run_scan
from scans.grader.demo_server import TargetConfig, serving_target
from scans.grader.report import report_from_measurement
from scans.grader.report_html import render_html
from scans.grader.report_text import trace_rows
from scans.grader.request_log import request_lines
from scans.grader.sizing import tolerance
from scans.grader.trace_file import TraceReplay, load_trace
from tests.helpers.paths import ROOT
from tests.helpers.servers import raw_server, read_request
from tests.helpers.servers import validate_report as validate
from tokvera_site.cli import main

FAST = TargetConfig(ttft_ms=5, itl_ms=1, tokens=4)
MOONCAKE = ROOT / "docs" / "examples" / "trace-mooncake.jsonl"
BURSTGPT = ROOT / "docs" / "examples" / "trace-burstgpt.jsonl"
REQUESTS_SCHEMA = json.loads((ROOT / "docs" / "requests.schema.json").read_text())


def _scan(url: str, trace: TraceReplay, **kwargs) -> ScanPlan:
    return ScanPlan(base_url=url, model="tokvera-target", levels=(1,), requests=2,
                    timeout_s=10, max_tokens=16, trace=trace, **kwargs)


def _replayed(plan: ScanPlan) -> tuple[dict, list[dict]]:
    measurement = run_scan(plan)
    report = report_from_measurement(plan, measurement)
    validate(report)
    lines = list(request_lines(measurement))
    for line in lines:
        jsonschema.validate(line, REQUESTS_SCHEMA)
    return report, lines


def _write(tmp_path: Path, lines: list[str], name: str = "trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# -- the two shapes, replayed ------------------------------------------------------------------


def test_a_mooncake_trace_sends_each_line_at_its_length_and_shared_blocks_come_from_cache(tmp_path):
    out = tmp_path / "r"
    with serving_target(FAST) as (_, host, port):
        code = main(["scan", f"http://{host}:{port}/v1", "--model", "tokvera-target",
                     "--concurrency", "1", "--requests", "2", "--trace", str(MOONCAKE),
                     "--trace-speed", "8", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    validate(report)
    trace = report["trace_replay"]
    assert trace["shape"] == "mooncake" and trace["file"] == "trace-mooncake.jsonl"
    assert trace["requests"] == trace["succeeded"] == 12 and trace["failed"] == {}
    assert trace["input_length_error"]["within_tolerance"] == 12
    assert trace["shared_block_share"] > 0.5
    # the target's prefix cache served the blocks named again, and only those
    assert trace["cached_prompt_share"] > 0.5
    assert report["plan"]["trace"]["speed"] == 8.0
    assert report["score"]["grade"] == "A"  # the replay is not graded

    asked = {number: json.loads(line) for number, line in
             enumerate(MOONCAKE.read_text().splitlines(), start=1)}
    sent = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    replayed = [line for line in sent if line["phase"] == "trace"]
    assert [line["trace_line"] for line in replayed] == list(range(1, 13))
    for line in replayed:
        jsonschema.validate(line, REQUESTS_SCHEMA)
        wanted = asked[line["trace_line"]]
        assert abs(line["prompt_tokens"] - wanted["input_length"]) <= tolerance(
            wanted["input_length"])
        assert line["completion_tokens"] == wanted["output_length"]
    first_of_block_0 = replayed[0]
    assert not first_of_block_0["cached_prompt_tokens"]  # no block is cached before the load
    by_line = {line["trace_line"]: line for line in replayed}
    assert by_line[4]["cached_prompt_tokens"] >= 2 * 512  # blocks 0 and 1, as line 1 sent them
    assert by_line[8]["cached_prompt_tokens"] >= 3 * 512  # 0, 1 and 2 whole, as line 4 sent them
    html = (out / "report.html").read_text()
    assert 'id="trace-replay"' in html and "trace-mooncake.jsonl" in html


def test_a_burstgpt_trace_is_told_by_its_keys_and_each_prompt_is_its_own(tmp_path):
    config = TargetConfig(ttft_ms=5, itl_ms=1, tokens=4, tokenize=True, max_model_len=8192)
    with serving_target(config) as (server, host, port):
        plan = _scan(f"http://{host}:{port}/v1", TraceReplay(load_trace(BURSTGPT), speed=8))
        report, lines = _replayed(plan)
    trace = report["trace_replay"]
    assert trace["shape"] == "burstgpt"
    assert trace["preparation"]["sizing"] == "tokenize"
    assert trace["preparation"]["max_model_len"] == 8192
    assert trace["succeeded"] == 8 and trace["shared_block_share"] == 0
    assert not trace["cached_prompt_share"]  # no two requests share a prefix
    replayed = [line for line in lines if line["phase"] == "trace"]
    tokens = [json.loads(line)["Request tokens"] for line in BURSTGPT.read_text().splitlines()]
    counted = [line["prompt_tokens"] for line in replayed]
    assert all(abs(c - t) <= tolerance(t) for c, t in zip(counted, tokens, strict=True)), counted


def test_a_faster_speed_sends_the_same_requests_over_a_proportionally_shorter_span():
    spans = {}
    with serving_target(FAST) as (_, host, port):
        for speed in (4.0, 8.0):
            plan = _scan(f"http://{host}:{port}/v1", TraceReplay(load_trace(MOONCAKE), speed=speed))
            report, lines = _replayed(plan)
            due = [line["start_offset_ms"] for line in lines if line["phase"] == "trace"]
            spans[speed] = due[-1] - due[0]
            assert report["trace_replay"]["span_s"] == pytest.approx(1.6 / speed)
    # requests are due at the trace's own times over the speed: twice the speed, half the span
    assert spans[8.0] == pytest.approx(spans[4.0] / 2, rel=0.01)


def test_limit_and_max_s_replay_part_of_the_trace():
    assert [r.line for r in load_trace(MOONCAKE, limit=3).requests] == [1, 2, 3]
    part = load_trace(MOONCAKE, max_s=0.62)
    assert [r.line for r in part.requests] == [1, 2, 3, 4, 5, 6]
    assert part.lines == 12
    burst = load_trace(BURSTGPT)
    assert burst.requests[0].at_s == 0 and burst.requests[-1].at_s == pytest.approx(2.2)
    assert all(r.hash_ids == () for r in burst.requests)


def test_a_burst_over_max_connections_waits_and_the_wait_is_reported(tmp_path):
    path = _write(tmp_path, [json.dumps({"timestamp": 0, "input_length": 200,
                                         "output_length": 8, "hash_ids": [1]})] * 8)
    slow = TargetConfig(ttft_ms=40, itl_ms=2, tokens=4)
    with serving_target(slow) as (_, host, port):
        plan = _scan(f"http://{host}:{port}/v1",
                     TraceReplay(load_trace(path), max_connections=2, speed=1))
        report, _ = _replayed(plan)
    trace = report["trace_replay"]
    assert trace["peak_in_flight"] <= 2
    assert trace["waited_for_connection"] >= 6
    assert trace["connection_wait_ms"] is not None
    rows = dict(trace_rows(trace))
    assert rows["Peak in flight / waited for a connection"].endswith(
        f"/ {trace['waited_for_connection']}")
    assert 'id="trace-replay"' in render_html(report)


def test_the_cli_prints_the_trace_replay_within_80_columns(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "r"
    with serving_target(FAST) as (_, host, port):
        code = main(["scan", f"http://{host}:{port}/v1", "--model", "tokvera-target",
                     "--concurrency", "1", "--requests", "2", "--trace", str(BURSTGPT),
                     "--trace-speed", "8", "--trace-limit", "5", "--max-connections", "4",
                     "--out", str(out)])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if len(line) > 80 and not line.endswith("report.html")] == []
    said = " ".join(line.removeprefix("tokvera scan:").strip() for line in lines)
    assert "trace replay (not graded): trace-burstgpt.jsonl (burstgpt" in said
    assert "5 of 5 succeeded" in said
    report = json.loads((out / "report.json").read_text())
    assert report["plan"]["trace"]["limit"] == 5 and report["plan"]["trace"]["lines"] == 8


# -- bad traces: one line, exit 2, nothing sent -------------------------------------------------

MOONCAKE_LINE = json.dumps({"timestamp": 0, "input_length": 600, "output_length": 8,
                            "hash_ids": [1, 2]})


@pytest.mark.parametrize(
    ("lines", "extra", "says"),
    [
        ([MOONCAKE_LINE, "{not json"], [], "line 2: not JSON"),
        (['{"timestamp": 0, "input_length": 600, "hash_ids": []}'], [],
         'line 1: "output_length" is missing'),
        (['{"timestamp": 0, "input_length": -5, "output_length": 8}'], [],
         '"input_length" -5 must be from 1'),
        (['{"timestamp": 0, "input_length": 1.5, "output_length": 8}'], [], "whole number"),
        (['{"timestamp": -1, "input_length": 10, "output_length": 8}'], [], "at least 0"),
        (['{"Timestamp": 1.0, "Request tokens": 50, "Response tokens": 0}'], [],
         "BurstGPT marks a failed request"),
        ([MOONCAKE_LINE, MOONCAKE_LINE.replace('"timestamp": 0', '"timestamp": 900'),
          MOONCAKE_LINE.replace('"timestamp": 0', '"timestamp": 400')], [],
         "line 3: its timestamp goes back"),
        (['{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2, 3]}'],
         [], "more than input_length 600 holds (2)"),
        (['{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": ["a"]}'],
         [], "list of whole numbers"),
        ([MOONCAKE_LINE, '{"Timestamp": 1.0, "Request tokens": 50, "Response tokens": 5}'],
         [], "line 2: a burstgpt line in a mooncake trace"),
        (['{"time": 0, "prompt": "hello"}'], [], "neither a Mooncake line"),
        (["", "  "], [], "has no requests"),
        ([MOONCAKE_LINE], ["--trace-speed", "0"], "--trace-speed 0"),
        ([MOONCAKE_LINE], ["--trace-limit", "0"], "--trace-limit 0"),
        ([MOONCAKE_LINE], ["--trace-max-s", "-1"], "--trace-max-s -1"),
        ([MOONCAKE_LINE, MOONCAKE_LINE.replace('"timestamp": 0', '"timestamp": 99000000000')],
         [], "the replay would last"),
        ([MOONCAKE_LINE], ["--turns", "2"], "--turns with --trace"),
    ],
)
def test_a_bad_trace_is_one_line_exit_2_and_nothing_is_sent(lines, extra, says, tmp_path, capsys):
    path = _write(tmp_path, lines)
    requests: list[bytes] = []
    with raw_server(_counting(requests)) as port:
        code = main(["scan", f"http://127.0.0.1:{port}/v1", "--model", "m", "--trace",
                     str(path), "--out", str(tmp_path / "r"), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and says in err, err
    assert requests == []
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--trace", "missing.jsonl"], "cannot read trace"),
        (["--trace-speed", "2"], "--trace-speed needs --trace"),
        (["--trace-limit", "2"], "--trace-limit needs --trace"),
        (["--max-connections", "2"], "--max-connections needs --rate or --trace"),
    ],
)
def test_trace_options_without_a_readable_trace_are_refused(argv, says, tmp_path, capsys,
                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    requests: list[bytes] = []
    with raw_server(_counting(requests)) as port:
        code = main(["scan", f"http://127.0.0.1:{port}/v1", "--model", "m", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and says in err, err
    assert requests == []


def test_a_trace_past_the_models_context_stops_before_any_of_its_requests(tmp_path, capsys):
    path = _write(tmp_path, [MOONCAKE_LINE, json.dumps(
        {"timestamp": 10, "input_length": 1000, "output_length": 100, "hash_ids": [1, 2]})])
    config = TargetConfig(ttft_ms=5, itl_ms=1, tokens=4, tokenize=True, max_model_len=1024)
    with serving_target(config) as (server, host, port):
        code = main(["scan", f"http://{host}:{port}/v1", "--model", "tokvera-target",
                     "--concurrency", "1", "--requests", "2", "--trace", str(path),
                     "--out", str(tmp_path / "r")])
        sent = [r for r in server.received if "block-" in json.dumps(r)]
    err = capsys.readouterr().err
    assert code == 2
    assert "line 2: input_length 1,000 plus output_length 100 exceed the model's context of " \
           "1,024 tokens" in err
    assert sent == []  # the preflight probed, but no trace request and no level was sent
    assert not (tmp_path / "r").exists()


def _counting(requests: list[bytes]):
    """A loopback server that notes every request it is sent and answers none usefully."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, _ = await read_request(reader)
            requests.append(head)
            writer.write(b"HTTP/1.1 500 Error\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()

    return handler
