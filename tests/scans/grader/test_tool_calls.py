"""Tool calls (`--tools`, `--tool-choice`): every request declares the tools, TTFT counts the
first streamed tool-call delta, and per level the shares of tool calls that parse, name a
declared tool and fit its schema equal what the server produced. Against `tokvera target`
(told how many bad calls to make) and raw servers for streams a target never sends: a call
split mid-JSON across network reads, arguments that never close."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from scans.grader import ScanPlan, run_scan
from scans.grader.agent_load import load_tools
from scans.grader.demo_server import TargetConfig, serving_target
from scans.grader.report import agent_figures
from scans.grader.workload import Workload
from tests.helpers.servers import (
    END_CHUNKS,
    SSE_HEAD,
    done_event,
    finish_event,
    good_stream,
    http_chunk,
    raw_server,
    read_request,
    stream_server,
    usage_event,
    validate_report,
)

TOKVERA = [sys.executable, "-m", "tokvera_site.cli"]


def _plan(port: int, choice: str = "required", requests: int = 8) -> ScanPlan:
    return ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="tokvera-target", levels=(1,),
                    requests=requests, timeout_s=10.0, max_tokens=64,
                    workload=Workload(tools=load_tools("builtin", choice)))


def test_the_shares_equal_the_bad_calls_the_target_was_told_to_make() -> None:
    config = TargetConfig(ttft_ms=2.0, itl_ms=0.5, bad_tool_share=0.25)
    with serving_target(config) as (server, _, port):
        level = run_scan(_plan(port)).levels[0]
        bodies = list(server.received)
    figures = agent_figures(level)["tool_calls"]
    # a bad call in four: alternately unclosed arguments and an undeclared tool's name
    assert figures == {"requests": 8, "replies_with_calls": 8, "called": 8,
                       "parsed_share": 0.875, "named_share": 0.875, "valid_share": 0.75}
    assert all(b["tool_choice"] == "required" and len(b["tools"]) == 2 for b in bodies)
    assert all(r.finish_reason == "tool_calls" and r.ttft_ms is not None for r in level.requests)


def test_ttft_is_at_the_first_tool_call_delta() -> None:
    name = {"role": "assistant", "tool_calls": [{"index": 0, "id": "c", "type": "function",
                                                 "function": {"name": "get_weather",
                                                              "arguments": ""}}]}
    args = {"tool_calls": [{"index": 0, "function": {"arguments":
                                                      '{"city":"Oslo","unit":"celsius"}'}}]}
    events = [_event(name), _event(args), finish_event("tool_calls"), usage_event(10, 2),
              done_event()]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(SSE_HEAD + http_chunk(events[0]))
            await writer.drain()
            await asyncio.sleep(0.05)  # the name's chunk, then the rest
            writer.write(b"".join(http_chunk(e) for e in events[1:]) + END_CHUNKS)
            await writer.drain()

    with raw_server(handler) as port:
        level = run_scan(_plan(port, requests=2)).levels[0]
    for record in level.requests:
        assert record.first_output_at is not None and record.last_output_at is not None
        assert record.last_output_at - record.first_output_at >= 0.04
    assert agent_figures(level)["tool_calls"]["valid_share"] == 1.0


def _event(delta: dict, finish: str | None = None) -> bytes:
    obj = {"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _tool_stream(fragments: list[str], name: str = "get_weather") -> bytes:
    events = [_event({"role": "assistant", "tool_calls": [
        {"index": 0, "id": "c", "type": "function",
         "function": {"name": name, "arguments": ""}}]})]
    events += [_event({"tool_calls": [{"index": 0, "function": {"arguments": f}}]})
               for f in fragments]
    return b"".join(events) + finish_event("tool_calls") + usage_event(10, 5) + done_event()


def test_a_call_split_mid_json_across_reads_is_joined_before_it_is_judged() -> None:
    body = _tool_stream(['{"ci', 'ty": "Os', 'lo", "unit"', ': "celsius"}'])

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(SSE_HEAD)
            # every 7 bytes its own read: events and the JSON inside them split anywhere
            for start in range(0, len(body), 7):
                writer.write(http_chunk(body[start:start + 7]))
                await writer.drain()
                await asyncio.sleep(0.0005)
            writer.write(END_CHUNKS)
            await writer.drain()

    with raw_server(handler) as port:
        level = run_scan(_plan(port, requests=2)).levels[0]
    assert agent_figures(level)["tool_calls"] == {
        "requests": 2, "replies_with_calls": 2, "called": 2,
        "parsed_share": 1.0, "named_share": 1.0, "valid_share": 1.0}


@pytest.mark.parametrize(("fragments", "name", "shares"), [
    (['{"city": "Oslo", "unit": "cel'], "get_weather", (0.0, 1.0, 0.0)),  # never closes
    (['{"city": "Oslo", "unit": "kelvin"}'], "get_weather", (1.0, 1.0, 0.0)),  # off-schema
    (['{"city": "Oslo"}'], "delete_everything", (1.0, 0.0, 0.0)),  # undeclared tool
])
def test_hostile_calls_are_counted_as_what_they_are(fragments: list[str], name: str,
                                                    shares: tuple[float, float, float]) -> None:
    with raw_server(stream_server(lambda _: _tool_stream(fragments, name))) as port:
        level = run_scan(_plan(port, requests=2)).levels[0]
    assert all(r.succeeded for r in level.requests)  # a bad call is still a reply
    figures = agent_figures(level)["tool_calls"]
    assert (figures["parsed_share"], figures["named_share"], figures["valid_share"]) == shares


def test_the_cli_reports_tool_calls_in_report_json(tmp_path: Path) -> None:
    with serving_target(TargetConfig(ttft_ms=2.0, itl_ms=0.5)) as (_, host, port):
        run = subprocess.run([*TOKVERA, "scan", f"http://{host}:{port}/v1", "--model", "m",
                              "--concurrency", "1", "--requests", "4", "--tools", "builtin",
                              "--tool-choice", "auto", "--out", str(tmp_path), "--quiet"],
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    validate_report(report)
    assert report["levels"][0]["tool_calls"]["valid_share"] == 1.0
    assert report["plan"]["workload"]["agent"]["tools"]["tool_choice"] == "auto"


@pytest.mark.parametrize("content", [
    "not json",
    '{"type": "function"}',
    '[{"type": "function", "function": {"name": "f", "parameters": {"type": 7}}}]',
    '[{"type": "function", "function": {"name": "f"}}, '
    '{"type": "function", "function": {"name": "f"}}]',
])
def test_a_bad_tools_file_exits_2_before_any_request(tmp_path: Path, content: str) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(content)
    seen: list[int] = []

    def body(number: int) -> bytes:
        seen.append(number)
        return good_stream()

    with raw_server(stream_server(body)) as port:
        run = subprocess.run([*TOKVERA, "scan", f"http://127.0.0.1:{port}/v1", "--model", "m",
                              "--tools", str(tools), "--out", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1 and "--tools" in run.stderr, run.stderr
    assert seen == []


def test_tool_choice_without_tools_or_unknown_exits_2(tmp_path: Path) -> None:
    for flags in (["--tool-choice", "auto"], ["--tools", "builtin", "--tool-choice", "maybe"]):
        run = subprocess.run([*TOKVERA, "scan", "http://127.0.0.1:9/v1", "--model", "m",
                              *flags, "--out", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
