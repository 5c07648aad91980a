"""Workload options over the other APIs (`--api completions|responses|messages`): prompts sized
in the server's own tokens through each API's body and usage (or its /tokenize), the shared
prefix where each API keeps it and cached across requests, the length presets, a spread, a
dataset, a trace, and conversations resent in each API's own shape with per-turn figures; what
an API cannot carry is refused before any request. Against `tokvera target` on loopback (its
own tokenizer and prefix cache) and a raw server that counts the requests it got."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scans.grader import ScanPlan, run_scan
from scans.grader.agent_load import TOOL_RESULT, load_schema, load_tools
from scans.grader.demo_apis import end_events, shaped_events
from scans.grader.demo_apis import read_request as read_request_of
from scans.grader.demo_model import count_tokens
from scans.grader.demo_server import TargetConfig, serving_target
from scans.grader.report import agent_figures, report_from_measurement
from scans.grader.sizing import tolerance
from scans.grader.sse import SSEDecoder
from scans.grader.stream_apis import parser_class
from scans.grader.trace_file import TraceReplay, load_trace
from scans.grader.workload import Workload, load_dataset, parse_input_tokens
from tests.helpers.paths import ROOT
from tests.helpers.servers import counting_server, raw_server, validate_report
from tokvera_site.cli import main

NONCE = re.compile(r"\[(\d{10})-(\d{6})\]")
FAST = dict(ttft_ms=2.0, itl_ms=0.5, tokens=12)
MOONCAKE = ROOT / "docs" / "examples" / "trace-mooncake.jsonl"


def _plan(port: int, api: str, levels=(1, 2), requests: int = 4, max_tokens: int = 16,
          **workload) -> ScanPlan:
    return ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="tokvera-target",
                    levels=levels, requests=requests, timeout_s=20.0, max_tokens=max_tokens,
                    use_nvidia_smi=False, api=api, workload=Workload(**workload)).validate()


def _report(plan: ScanPlan) -> dict:
    report = report_from_measurement(plan, run_scan(plan))
    validate_report(report)
    return report


def _prompt_tokens(report: dict) -> list[int]:
    return [t["prompt_tokens"] for lv in report["levels"] for t in lv["request_timelines"]]


def _shared_and_own(api: str, body: dict) -> tuple[str, str]:
    """(the shared part, the request's own part starting at its nonce) of a load body."""
    if api == "messages":
        return body.get("system", ""), body["messages"][0]["content"]
    text = body["prompt"] if api == "completions" else body["input"][0]["content"]
    start = NONCE.search(text).start()
    return text[:start], text[start:]


# -- prompt lengths --------------------------------------------------------------------------

@pytest.mark.parametrize(("api", "tokenize"), [
    ("completions", True), ("completions", False), ("responses", False), ("messages", True),
    ("messages", False)])
def test_sized_prompts_land_within_tolerance_and_the_shared_prefix_is_cached(api, tokenize):
    with serving_target(TargetConfig(**FAST, tokenize=tokenize)) as (server, _, port):
        report = _report(_plan(port, api, input_tokens=600, shared_prefix_tokens=200))
        bodies = [b for b in server.received if "Read the notes" in json.dumps(b)][-8:]
    counts = _prompt_tokens(report)
    assert len(counts) == 8 and all(abs(c - 600) <= tolerance(600) for c in counts), counts
    work = report["plan"]["workload"]
    assert work["sizing"] == ("tokenize" if tokenize else "probe")
    # every request repeats the same prefix, where its API keeps it, and its nonce follows
    parts = [_shared_and_own(api, body) for body in bodies]
    assert len({shared for shared, _ in parts}) == 1 and len(parts[0][0]) > 400
    assert all(NONCE.match(own) for _, own in parts)
    assert len({NONCE.match(own).group(0) for _, own in parts}) == 8
    if api == "messages":
        assert all(len(b["messages"]) == 1 for b in bodies)
    # the target's 16-token blocks of the prefix are served from its cache
    assert 0.25 <= report["levels"][-1]["cached_prompt_share"] <= 0.4


@pytest.mark.parametrize(("api", "enforced", "cap"), [("responses", True, "max_output_tokens"),
                                                      ("messages", False, "max_tokens")])
def test_a_length_preset_sizes_prompts_and_says_whether_the_reply_length_held(
        api, enforced, cap, tmp_path):
    with serving_target(TargetConfig(**FAST)) as (_, host, port):
        status = main(["scan", f"http://{host}:{port}/v1", "--model", "tokvera-target",
                       "--api", api, "--workload", "chat", "--concurrency", "1",
                       "--requests", "2", "--out", str(tmp_path), "--quiet"])
    assert status == 0
    report = json.loads((tmp_path / "report.json").read_text())
    validate_report(report)
    work = report["plan"]["workload"]
    assert work["preset"]["name"] == "chat"
    assert all(abs(c - 100) <= tolerance(100) for c in _prompt_tokens(report))
    length = work["output_length"]
    assert length["enforced"] is enforced and length["sent"][0] == cap
    outputs = report["levels"][0]["output_tokens"]
    if enforced:
        assert outputs["min"] == outputs["max"] == 300
    else:  # Anthropic's API has no ignore_eos: the reply ends where the model stops
        assert f"{cap} alone is sent" in length["note"] and outputs["max"] == 12


def test_a_spread_gives_each_completions_prompt_its_own_length():
    center, spread = parse_input_tokens("200-400")
    with serving_target(TargetConfig(**FAST)) as (server, _, port):
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="tokvera-target",
                        levels=(1,), requests=8, timeout_s=20.0, max_tokens=16,
                        use_nvidia_smi=False, api="completions",
                        workload=Workload(input_tokens=center, input_spread=spread))
        report = _report(plan)
        scan = report["plan"]["workload"]["nonce"]["scan"]
        load = [(int(m.group(2)), count_tokens(b["prompt"])) for b in server.received
                if (m := NONCE.search(b["prompt"])) and m.group(1) == scan
                and int(m.group(2)) < 900_000][-8:]
    assert spread is not None and len(load) == 8
    misses = [(spread.target(n), counted) for n, counted in load
              if abs(counted - spread.target(n)) > tolerance(spread.target(n))]
    assert not misses, misses
    assert len({counted for _, counted in load}) > 4


def test_a_datasets_prompts_go_over_the_messages_api_system_apart(tmp_path):
    path = tmp_path / "load.jsonl"
    path.write_text('{"prompt": "first question"}\n'
                    '{"messages": [{"role": "system", "content": "be brief"},'
                    ' {"role": "user", "content": "second question"}]}\n', encoding="utf-8")
    with serving_target(TargetConfig(**FAST)) as (server, _, port):
        report = _report(_plan(port, "messages", dataset=load_dataset(path)))
        sent = list(server.received)[-8:]
    assert all(level["failed"] == {} for level in report["levels"])
    assert all(m["role"] != "system" for body in sent for m in body["messages"])
    with_system = [b for b in sent if "system" in b]
    assert len(with_system) == 4
    assert all(NONCE.match(b["system"]) and b["system"].endswith(" be brief")
               and b["messages"][0]["content"] == "second question" for b in with_system)


def test_a_trace_replays_over_the_responses_api_at_its_lengths():
    trace = TraceReplay(load_trace(MOONCAKE), speed=8.0)
    with serving_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=4)) as (_, _, port):
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="tokvera-target",
                        levels=(1,), requests=2, timeout_s=10, max_tokens=16, api="responses",
                        trace=trace, use_nvidia_smi=False).validate()
        report = _report(plan)
    replay = report["trace_replay"]
    assert replay["requests"] == replay["succeeded"] == 12
    assert replay["input_length_error"]["within_tolerance"] == 12
    assert replay["cached_prompt_share"] > 0.5  # the trace's shared blocks, from the cache
    assert replay["preparation"]["output_length"]["sent"][0] == "max_output_tokens"


# -- conversations -----------------------------------------------------------------------------

def _third_turn(bodies: list[dict]) -> dict:
    """The last body that resent two earlier turns (three nonces: one per user message)."""
    return next(b for b in reversed(bodies) if len(NONCE.findall(json.dumps(b))) == 3)


@pytest.mark.parametrize("api", ["completions", "responses", "messages"])
def test_conversations_resend_the_history_in_each_apis_shape_and_the_cache_grows(api):
    with serving_target(TargetConfig(**FAST)) as (server, _, port):
        plan = _plan(port, api, requests=6, turns=3, shared_prefix_tokens=200)
        measurement = run_scan(plan)
        bodies = list(server.received)
    validate_report(report_from_measurement(plan, measurement))
    level = measurement.levels[-1]
    assert len(level.requests) == 6 and all(r.succeeded for r in level.requests)
    turns = agent_figures(level)["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert all(t["ttft_ms"]["p50"] is not None for t in turns)
    shares = [t["cached_share"] for t in turns]
    assert 0.5 < shares[1] < shares[2], shares  # the history, replies included, is cached
    body = _third_turn(bodies)
    reply = " the model streams a token at steady pace while load grows and"
    if api == "completions":
        prompt = body["prompt"]
        assert prompt.count("\n\nUser: [") == 3 and prompt.endswith("\n\nAssistant:")
        assert prompt.count(f"Assistant:{reply}\n\n") == 2
        assert NONCE.search(prompt).start() > 400  # the system prompt comes first, once
    elif api == "responses":
        items = body["input"]
        assert [i["role"] for i in items] == ["system", "user", "assistant", "user",
                                              "assistant", "user"]
        assert items[2] == {"role": "assistant", "content": reply}
    else:
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user",
                                                         "assistant", "user"]
        assert body["messages"][1]["content"] == reply
        assert len(body["system"]) > 400 and not NONCE.search(body["system"])


# -- tools and structured output -------------------------------------------------------------

def _second_turn(bodies: list[dict]) -> dict:
    """The last body that resent an earlier turn (two nonces: one per user message)."""
    return next(b for b in reversed(bodies) if len(NONCE.findall(json.dumps(b))) == 2)


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_tool_calls_stream_in_each_apis_events_are_judged_and_resent_with_their_results(api):
    config = TargetConfig(**FAST, bad_tool_share=0.5)
    with serving_target(config) as (server, _, port):
        plan = _plan(port, api, levels=(1,), requests=4, max_tokens=128, turns=2,
                     tools=load_tools("builtin"))
        measurement = run_scan(plan)
        bodies = list(server.received)
    validate_report(report_from_measurement(plan, measurement))
    calls = agent_figures(measurement.levels[0])["tool_calls"]
    # every reply called a tool; the target made every other one bad, alternately
    # unparsable and naming no declared tool
    assert calls["requests"] == calls["replies_with_calls"] == calls["called"] == 4
    assert calls["valid_share"] == 0.5 and calls["parsed_share"] == calls["named_share"] == 0.75
    body = _second_turn(bodies)
    if api == "responses":
        assert [t["name"] for t in body["tools"]] == ["get_weather", "search_documents"]
        assert all(t["type"] == "function" and "parameters" in t for t in body["tools"])
        call, result = body["input"][1], body["input"][2]
        assert call["type"] == "function_call" and call["name"]  # as streamed, even if bad
        assert result == {"type": "function_call_output", "call_id": call["call_id"],
                          "output": TOOL_RESULT}
        assert body["input"][3]["role"] == "user"
    else:
        assert all(set(t) == {"name", "description", "input_schema"} for t in body["tools"])
        assert body["tool_choice"] == {"type": "auto"}
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
        use = body["messages"][1]["content"][-1]
        assert use["type"] == "tool_use" and isinstance(use["input"], dict)
        result, own = body["messages"][2]["content"]
        assert result == {"type": "tool_result", "tool_use_id": use["id"],
                          "content": TOOL_RESULT}
        assert own["type"] == "text" and NONCE.match(own["text"])


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_a_streamed_tool_call_reads_the_same_however_its_bytes_are_split(api):
    """The target's wire bytes of one tool call, fed whole, then cut at every byte."""
    body = ({"input": "hi", "stream": True} if api == "responses" else
            {"max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    request = read_request_of(api, body, {"anthropic-version": "x"}, "m")
    deltas = ['{"role":"assistant","tool_calls":[{"index":0,"id":"call_7","type":"function",'
              '"function":{"name":"get_weather","arguments":""}}]}',
              *('{"tool_calls":[{"index":0,"function":{"arguments":%s}}]}' % json.dumps(p)
                for p in ('{"city": ', '"Oslo", ', '"unit": "celsius"}'))]
    events = [e for i, d in enumerate(deltas) for e in shaped_events(request, "id1", i, d)]
    events += end_events(request, "id1", "tool_calls", {
        "prompt_tokens": 3, "completion_tokens": 4, "cached": None, "reasoning": 0},
        ("call_7", "get_weather", '{"city": "Oslo", "unit": "celsius"}'))
    wire = b"".join(b"event: %s\ndata: %s\n\n" % (name.encode(), data.encode())
                    for name, data in events)

    def calls(pieces: list[bytes]) -> tuple:
        decoder, parser = SSEDecoder(), parser_class(api)(keep_tool_calls=True)
        for at, piece in enumerate(pieces):
            parser.feed(decoder.feed(piece), float(at))
        parser.feed(decoder.flush(), float(len(pieces)))
        return parser.received_tool_calls(), parser.tally.output_chunks, parser.tally.complete

    whole = calls([wire])
    ident = "call_7" if api == "responses" else "toolu_call_7"
    assert whole == ([(ident, "get_weather", '{"city": "Oslo", "unit": "celsius"}')], 4, True)
    assert all(calls([wire[:cut], wire[cut:]]) == whole for cut in range(1, len(wire)))


def test_structured_output_over_the_responses_api_is_asked_by_text_format_and_judged():
    with serving_target(TargetConfig(**FAST, bad_json_share=0.5)) as (server, _, port):
        plan = _plan(port, "responses", levels=(1,), requests=4, max_tokens=128,
                     structured_output=load_schema("builtin"))
        measurement = run_scan(plan)
        body = list(server.received)[-1]
    figures = agent_figures(measurement.levels[0])["structured_output"]
    assert figures["requests"] == 4 and 0 < figures["valid_share"] < 1
    assert "response_format" not in body
    assert body["text"]["format"]["type"] == "json_schema"
    assert body["text"]["format"]["schema"]["required"] == ["title", "rating", "tags"]


@pytest.mark.parametrize(("api", "mix"), [
    ("responses", ["tools", "structured_output", "chat"]), ("messages", ["tools", "chat"])])
def test_the_agent_preset_runs_over_responses_and_messages(api, mix, tmp_path):
    with serving_target(TargetConfig(**FAST)) as (_, host, port):
        status = main(["scan", f"http://{host}:{port}/v1", "--model", "tokvera-target",
                       "--api", api, "--workload", "agent", "--concurrency", "1,2",
                       "--requests", "8", "--think-time-ms", "0", "--out", str(tmp_path),
                       "--quiet"])
    assert status == 0
    report = json.loads((tmp_path / "report.json").read_text())
    validate_report(report)
    assert report["plan"]["workload"]["agent"]["mix"] == mix
    level = report["levels"][-1]
    assert level["failed"] == {} and [t["turn"] for t in level["turns"]] == [1, 2, 3, 4]
    assert level["tool_calls"]["valid_share"] == 1.0
    assert (level.get("structured_output") is not None) is ("structured_output" in mix)


# -- what stays refused ----------------------------------------------------------------------


@pytest.mark.parametrize(("flags", "option"), [
    (("--api", "completions", "--tools", "builtin"), "--tools"),
    (("--api", "completions", "--workload", "agent"), "--workload agent"),
    (("--api", "messages", "--json-schema", "builtin"), "--json-schema"),
    (("--api", "embeddings", "--input-tokens", "200"), "--input-tokens"),
    (("--api", "embeddings", "--turns", "2"), "--turns"),
])
def test_what_an_api_cannot_carry_is_refused_before_any_request(flags, option, tmp_path: Path,
                                                                 capsys):
    count: list[int] = []
    with raw_server(counting_server(count)) as port:
        status = main(["scan", f"http://127.0.0.1:{port}/v1", "--model", "m",
                       "--out", str(tmp_path / "out"), *flags])
    assert status == 2 and count == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].count(f"{option} with --api {flags[1]}: ") == 1, err


def test_a_conversation_after_an_empty_reply_still_alternates_for_anthropic():
    """Anthropic's Messages API refuses an empty assistant turn and two user turns in a row:
    an empty reply is left out of the history and the user turns around it are joined."""
    from scans.grader.apis import request_body

    history = [{"role": "system", "content": "be brief"},
               {"role": "user", "content": "first"}, {"role": "assistant", "content": ""},
               {"role": "user", "content": "second"}]
    body = request_body("messages", "m", history, 16)
    assert body["system"] == "be brief"
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert [part["text"] for part in body["messages"][0]["content"]] == ["first", "second"]
