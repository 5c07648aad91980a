"""`--workload agent`: an agent's sessions in one word. Conversations that send the system
prompt once, sessions that cycle through tool use, structured output and plain chat (each
judged by its own kind only), tool calls resent with their results as an agent's client does,
and the preset refused before any request where it cannot be sent. Against `tokvera target`
on loopback (which keeps the bodies it received) and a raw server that counts requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scans.grader import (
    AGENT_PRESET,
    WORKLOAD_PRESETS,
    ScanPlan,
    Workload,
    apply_workload_preset,
    run_scan,
)
from scans.grader.agent_load import TOOL_RESULT, load_schema, load_tools
from scans.grader.demo_model import render_chat
from scans.grader.demo_server import TargetConfig, serving_target
from scans.grader.measurement import AgentRecord
from scans.grader.report import agent_figures
from tests.helpers.servers import good_stream, raw_server, stream_server, validate_report

TOKVERA = [sys.executable, "-m", "tokvera_site.cli"]
# One tool call in four and one JSON reply in four made bad, so that each kind's shares say
# which requests they were counted over.
TARGET = TargetConfig(ttft_ms=2.0, itl_ms=0.5, tokens=12, bad_tool_share=0.25,
                      bad_json_share=0.25)


def _agent_plan(port: int, sessions: int = 6, **given) -> ScanPlan:
    workload = apply_workload_preset(Workload(think_time_ms=1.0, **given), "agent")
    turns = workload.turns
    return ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="tokvera-target",
                    levels=(1, 3), requests=(turns, sessions * turns), timeout_s=10.0,
                    max_tokens=workload.output_tokens or 128, workload=workload).validate()


def _kind(body: dict) -> str:
    if "tools" in body:
        return "tools"
    return "structured_output" if "response_format" in body else "chat"


def test_the_preset_fills_what_is_unset_and_keeps_what_is_given() -> None:
    assert "agent" in WORKLOAD_PRESETS
    filled = apply_workload_preset(Workload(), "agent")
    assert (filled.preset, filled.turns, filled.think_time_ms) == ("agent", 4, 500.0)
    assert filled.shared_prefix_tokens == AGENT_PRESET.system_prompt_tokens == 1_000
    assert filled.input_tokens == 1_200 and filled.output_tokens == 128
    assert filled.tools is not None and filled.tools.source == "builtin"
    assert filled.tools.choice == "auto"
    assert filled.structured_output is not None and filled.mix == (
        "tools", "structured_output", "chat")

    mine = load_tools("builtin", "required")
    given = apply_workload_preset(Workload(turns=2, think_time_ms=50.0, input_tokens=3_000,
                                           shared_prefix_tokens=2_000, tools=mine), "agent")
    assert (given.turns, given.think_time_ms, given.input_tokens) == (2, 50.0, 3_000)
    assert given.shared_prefix_tokens == 2_000 and given.tools is mine

    lengths = apply_workload_preset(Workload(output_tokens=64), "rag")
    assert (lengths.input_tokens, lengths.output_tokens, lengths.turns) == (4_000, 64, 1)
    assert lengths.mix is None and lengths.tools is None


def test_each_session_kind_is_judged_by_what_it_declared_only() -> None:
    with serving_target(TARGET) as (server, _, port):
        level = run_scan(_agent_plan(port)).levels[-1]
        bodies = list(server.received)
    assert len(level.requests) == 24 and all(r.succeeded for r in level.requests)
    by_session: dict[int, list[AgentRecord]] = {}
    for record in level.requests:
        assert isinstance(record, AgentRecord)
        by_session.setdefault(record.session or 0, []).append(record)
    # sessions cycle tools, structured output, plain chat by their index
    for session, records in by_session.items():
        kind = ("tools", "structured_output", "chat")[session % 3]
        assert all((r.tool_calls is not None) == (kind == "tools") for r in records)
        assert all((r.structured is not None) == (kind == "structured_output") for r in records)

    figures = agent_figures(level)
    # 2 tool sessions × 4 turns: 8 tool calls, of which 2 bad (one unparsable, one unnamed)
    assert figures["tool_calls"] == {"requests": 8, "replies_with_calls": 8, "called": 8,
                                     "parsed_share": 0.875, "named_share": 0.875,
                                     "valid_share": 0.75}
    # 2 structured sessions × 4 turns: 8 JSON replies, 2 bad (one cut short, one wrong type)
    assert figures["structured_output"] == {"requests": 8, "parsed_share": 0.875,
                                            "valid_share": 0.75}
    assert [t["turn"] for t in figures["turns"]] == [1, 2, 3, 4]

    # A structured session's requests carry the schema only, a tool session's the tools only;
    # the reply length is forced (min_tokens, ignore_eos) on plain sessions only.
    level_bodies = [b for b in bodies if any(m["role"] == "system" for m in b["messages"])]
    kinds = {_kind(b) for b in level_bodies}
    assert kinds == {"tools", "structured_output", "chat"}
    for body in level_bodies:
        assert not ("tools" in body and "response_format" in body)
        assert ("min_tokens" in body) == (_kind(body) == "chat")


def test_a_session_sends_the_system_prompt_once_and_its_nonce_in_its_first_user_message(
) -> None:
    with serving_target(TARGET) as (server, _, port):
        level = run_scan(_agent_plan(port, sessions=3)).levels[-1]
        bodies = [b for b in server.received if b["messages"][0]["role"] == "system"]
    assert all(r.succeeded for r in level.requests)
    assert len(bodies) >= 12  # both levels' turns: every one opens with the system prompt
    system_prompts = {b["messages"][0]["content"] for b in bodies}
    assert len(system_prompts) == 1  # one prompt, shared by every session: a shared prefix
    for body in bodies:
        roles = [m["role"] for m in body["messages"]]
        assert roles.count("system") == 1, roles
        first_user = next(m for m in body["messages"] if m["role"] == "user")
        assert first_user["content"].startswith("[")  # the nonce, no copy of the system prompt
        assert not any(m.get("content") in system_prompts for m in body["messages"][1:])
    first_turns = [b for b in bodies if len(b["messages"]) == 2]
    nonces = {b["messages"][1]["content"].split("]")[0] for b in first_turns}
    assert len(nonces) == len(first_turns)  # the nonce keeps sessions apart
    # the shared system prompt is served from the prefix cache: most of a first turn's prompt
    assert agent_figures(level)["turns"][0]["cached_share"] > 0.5


def test_shared_prefix_tokens_with_turns_also_sends_the_prefix_once() -> None:
    with serving_target(TargetConfig(ttft_ms=2.0, itl_ms=0.5, tokens=8)) as (server, _, port):
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="tokvera-target",
                        levels=(1,), requests=6, timeout_s=10.0, max_tokens=16,
                        workload=Workload(turns=3, input_tokens=300,
                                          shared_prefix_tokens=200)).validate()
        assert all(r.succeeded for r in run_scan(plan).levels[0].requests)
        third = [b["messages"] for b in server.received if len(b["messages"]) == 6]
    assert third, "no third turn"
    assert [m["role"] for m in third[0]] == ["system", "user", "assistant", "user",
                                             "assistant", "user"]


def test_a_tool_call_is_resent_with_its_result_and_the_target_counts_both() -> None:
    with serving_target(TargetConfig(ttft_ms=2.0, itl_ms=0.5, tokens=12)) as (server, _, port):
        level = run_scan(_agent_plan(port, sessions=3)).levels[-1]
        bodies = [b for b in server.received if "tools" in b and len(b["messages"]) > 2]
    assert all(r.succeeded for r in level.requests)
    assert bodies, "no later turn of a tool session"
    messages = max(bodies, key=lambda b: len(b["messages"]))["messages"]
    # system, user, then per earlier turn: the call, its result, the next user message
    assert [m["role"] for m in messages] == ["system", "user",
                                             "assistant", "tool", "user",
                                             "assistant", "tool", "user",
                                             "assistant", "tool", "user"]
    for call_message, result in zip(messages[2::3], messages[3::3], strict=True):
        (call,) = call_message["tool_calls"]
        assert call["id"].startswith("call_tv")  # the id as the target streamed it
        assert call["function"]["name"] in ("get_weather", "search_documents")
        assert isinstance(json.loads(call["function"]["arguments"]), dict)
        assert result == {"role": "tool", "tool_call_id": call["id"], "content": TOOL_RESULT}
    # the target's chat template renders the calls and results: they count in the prompt
    rendered = render_chat(messages)
    assert rendered.count(TOOL_RESULT) == 3
    assert call["function"]["arguments"] in rendered
    # ...and the resent call was found in its prefix cache, turn after turn
    tool_turns = [r for r in level.requests if r.tool_calls is not None and (r.turn or 0) > 1]
    assert tool_turns and all((r.cached_tokens or 0) > 0 for r in tool_turns)


def test_the_cli_writes_the_preset_and_its_mix_and_names_the_mix(tmp_path: Path) -> None:
    with serving_target(TARGET) as (_, host, port):
        run = subprocess.run([*TOKVERA, "scan", f"http://{host}:{port}/v1", "--model", "m",
                              "--concurrency", "1,3", "--requests", "12", "--workload",
                              "agent", "--think-time-ms", "0", "--out", str(tmp_path)],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "COLUMNS": "80"})
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    validate_report(report)
    work = report["plan"]["workload"]
    assert work["preset"]["name"] == "agent"
    assert work["agent"]["mix"] == ["tools", "structured_output", "chat"]
    assert work["agent"]["think_time_ms"] == 0  # given: it overrides the preset's 500
    assert (work["input_tokens"], work["output_tokens"], work["shared_prefix_tokens"]) == (
        1_200, 128, 1_000)
    top = report["levels"][-1]
    assert top["tool_calls"]["requests"] == 4 and top["structured_output"]["requests"] == 4
    out = run.stdout
    assert "tool calls → JSON schema → plain chat" in " ".join(
        line.removeprefix("tokvera scan:").strip() for line in out.splitlines())
    # 80 columns, but for the report's path (one word, never broken)
    assert all(len(line) <= 80 for line in out.splitlines() if str(tmp_path) not in line), out


@pytest.mark.parametrize(("flags", "said"), [
    (["--workload", "agent", "--api", "embeddings"], "--workload agent with --api embeddings"),
    (["--workload", "agent", "--api", "completions"], "--workload agent with --api completions"),
    (["--workload", "agent", "--rate", "2"], "--workload agent with --rate"),
])
def test_the_agent_preset_is_refused_in_one_line_before_any_request(
        tmp_path: Path, flags: list[str], said: str) -> None:
    seen: list[int] = []

    def body(number: int) -> bytes:
        seen.append(number)
        return good_stream()

    with raw_server(stream_server(body)) as port:
        run = subprocess.run([*TOKVERA, "scan", f"http://127.0.0.1:{port}/v1", "--model", "m",
                              "--out", str(tmp_path / "out"), *flags],
                             capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert said in run.stderr
    assert seen == []


def test_a_mix_without_what_its_kinds_declare_is_refused() -> None:
    from scans.grader import PlanError

    plan = ScanPlan(base_url="http://127.0.0.1:9/v1", model="m", levels=(1,), requests=4,
                    workload=Workload(turns=2, mix=("tools", "chat"),
                                      structured_output=load_schema("builtin")))
    with pytest.raises(PlanError, match="needs tools"):
        plan.validate()
