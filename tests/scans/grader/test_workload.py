"""Issue 21: scans send the prompts and replies users really send. Real loopback servers only:
`tokvera target` in-process (its own tokenizer, prefix cache, prefill time) and a raw asyncio
server that counts tokens its own way."""

from __future__ import annotations

import asyncio
import json
import re
import statistics
from dataclasses import replace

import pytest

from scans.grader import ScanPlan, run_scan
from scans.grader.demo_server import TargetConfig, serving_target
from scans.grader.plan import PlanError
from scans.grader.report import report_from_measurement
from scans.grader.report_text import comparability, workload_lines
from scans.grader.sizing import tolerance
from scans.grader.workload import Workload, WorkloadError, load_dataset
from tests.helpers.servers import (
    END_CHUNKS,
    SSE_HEAD,
    content_event,
    done_event,
    finish_event,
    http_chunk,
    json_response,
    raw_server,
    read_request,
    validate_report,
)
from tokvera_site.cli import main

NONCE = re.compile(r"\[(\d{10})-(\d{6})\]")
FAST = dict(ttft_ms=5.0, itl_ms=1.0, tokens=8)


def _plan(port: int, **workload) -> ScanPlan:
    output = workload.get("output_tokens")
    return ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="m", levels=(1, 2),
                    requests=4, timeout_s=20.0, max_tokens=output or 16, use_nvidia_smi=False,
                    workload=Workload(**workload))


def _report(plan: ScanPlan) -> dict:
    report = report_from_measurement(plan, run_scan(plan))
    validate_report(report)
    return report


def _prompt_tokens(report: dict) -> list[int]:
    return [t["prompt_tokens"] for lv in report["levels"] for t in lv["request_timelines"]]


def _first_content(request: dict) -> str:
    content = request["messages"][0]["content"]
    return content if isinstance(content, str) else content[0]["text"]


# -- 1. no cache flattery --------------------------------------------------------------------

def test_every_prompt_starts_with_a_nonce_unique_to_the_scan_and_the_request():
    with serving_target(TargetConfig(**FAST)) as (server, _, port):
        first = _report(_plan(port))
        second = _report(_plan(port))
        sent = [_first_content(r) for r in server.received]
    nonces = [NONCE.match(text) for text in sent]
    assert all(nonces), sent[:3]
    assert len({m.group(0) for m in nonces}) == len(sent)  # no two requests alike
    assert len({m.group(1) for m in nonces}) == 2  # one per scan
    assert first["plan"]["workload"]["nonce"]["scan"] != second["plan"]["workload"]["nonce"]["scan"]
    # the target caches every 16-token block: nothing of the first scan served the second
    for level in second["levels"]:
        assert level["cached_prompt_share"] == 0.0
        assert level["cached_reported"] == level["succeeded"]
    assert second["plan"]["workload"]["sizing"] == "builtin"
    assert second["plan"]["max_tokens"] == 16


# -- 2. reply length ---------------------------------------------------------------------------

def test_output_tokens_enforced_where_the_server_accepts_ignore_eos():
    with serving_target(TargetConfig(**FAST)) as (server, _, port):
        report = _report(_plan(port, output_tokens=40))
        # after the preflight's probe (the plain body) and the output-length probe
        load = [r for r in list(server.received)[2:] if r.get("max_tokens") == 40]
    assert len(load) == 8
    length = report["plan"]["workload"]["output_length"]
    assert length["enforced"] is True and "ignore_eos" in length["sent"]
    assert all(r["ignore_eos"] is True and r["min_tokens"] == 40 for r in load)
    for level in report["levels"]:  # the target's natural end is 8 tokens
        assert level["output_tokens"] == {"p50": 40, "min": 40, "max": 40, "n": 4}


def test_output_tokens_refused_is_reported_and_fails_no_request():
    with serving_target(TargetConfig(**FAST, strict_params=True)) as (server, _, port):
        report = _report(_plan(port, output_tokens=40))
        load = [r for r in server.received if r.get("max_tokens") == 40]
    length = report["plan"]["workload"]["output_length"]
    assert length["enforced"] is False
    assert length["note"].startswith("not enforced: the server refused ignore_eos and min_tokens")
    assert load and not any("ignore_eos" in r or "min_tokens" in r for r in load)
    assert all(level["failed"] == {} for level in report["levels"])
    assert report["levels"][0]["output_tokens"]["max"] == 8  # the length did not hold
    assert any("not enforced" in line for line in workload_lines(report))


# -- 3. prompt length --------------------------------------------------------------------------

@pytest.mark.parametrize("tokenize", [True, False], ids=["tokenize", "probe"])
def test_input_tokens_within_tolerance_as_the_server_counts(tokenize):
    with serving_target(TargetConfig(**FAST, tokenize=tokenize)) as (_, _, port):
        report = _report(_plan(port, input_tokens=1500))
    counts = _prompt_tokens(report)
    assert all(abs(c - 1500) <= tolerance(1500) for c in counts), counts
    assert report["plan"]["workload"]["sizing"] == ("tokenize" if tokenize else "probe")
    assert report["levels"][0]["prompt_tokens"]["n"] == 4


def _byte_counting_server(received: list[dict], usage: bool = True):
    """Counts a prompt as one token per 3 bytes of all message text, plus 11 (its template);
    no /tokenize."""

    async def handler(reader, writer):
        while True:
            try:
                head, body = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            if b"/chat/completions" not in head.split(b"\r\n")[0]:
                writer.write(json_response(404, {"error": {"message": "not found"}}, b"Not Found"))
                await writer.drain()
                continue
            received.append(body)
            text = "".join(str(m.get("content")) for m in body.get("messages", []))
            prompt = len(text.encode()) // 3 + 11
            events = content_event("hi", role=True) + finish_event()
            if usage:
                events += (b"data: " + json.dumps({"choices": [], "usage": {
                    "prompt_tokens": prompt, "completion_tokens": 1}}).encode() + b"\n\n")
            writer.write(SSE_HEAD + http_chunk(events + done_event()) + END_CHUNKS)
            await writer.drain()

    return handler


def test_input_tokens_sized_by_probes_on_a_server_counting_its_own_way():
    received: list[dict] = []
    with raw_server(_byte_counting_server(received)) as port:
        report = _report(_plan(port, input_tokens=700))
    counts = _prompt_tokens(report)
    assert all(abs(c - 700) <= tolerance(700) for c in counts), counts
    assert report["plan"]["workload"]["sizing"] == "probe"


def test_input_tokens_refused_without_usage_or_tokenize():
    received: list[dict] = []
    with raw_server(_byte_counting_server(received, usage=False)) as port:
        with pytest.raises(WorkloadError, match="reports no token usage and has no /tokenize"):
            run_scan(_plan(port, input_tokens=700))
    assert len(received) == 2  # the preflight's probe and one sizing probe: no load


def test_ttft_grows_with_input_length_on_the_servers_clock():
    config = TargetConfig(**FAST, prefill_ms_per_1k_tokens=40.0, prefix_cache=False)
    with serving_target(config) as (server, _, port):
        medians = []
        for n in (200, 4000):
            server.stream_timings.clear()
            run_scan(replace(_plan(port, input_tokens=n), levels=(1,), requests=5))
            medians.append(statistics.median(t.first_output_at - t.received_at
                                             for t in server.stream_timings))
    assert medians[1] > medians[0] * 2, medians


def test_input_tokens_below_the_overhead_or_above_the_context_stop_before_the_load(capsys):
    with serving_target(TargetConfig(**FAST, tokenize=True, max_model_len=2048)) as (
            server, _, port):
        base = f"http://127.0.0.1:{port}/v1"
        assert main(["scan", base, "--model", "m", "--input-tokens", "5", "--quiet",
                     "--concurrency", "1", "--requests", "2", "--out", "/tmp/unused"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "below the prompt's fixed part" in err[0]
        assert main(["scan", base, "--model", "m", "--input-tokens", "2000", "--quiet",
                     "--concurrency", "1", "--requests", "2", "--out", "/tmp/unused"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "exceed the model's context of 2,048 tokens" in err[0]
        assert len(server.received) == 2  # the two preflight probes, nothing else


# -- 5. warm-up --------------------------------------------------------------------------------

def test_warmup_requests_are_sent_and_not_counted():
    with serving_target(TargetConfig(**FAST)) as (server, _, port):
        report = _report(_plan(port, warmup=3))
        sent = len(server.received)
    assert [lv["requests"] for lv in report["levels"]] == [4, 4]
    assert sent == 1 + 2 * 3 + 8  # probe, warm-ups, load
    assert report["plan"]["workload"]["warmup"] == 3


# -- 7. shared prefix --------------------------------------------------------------------------

def test_shared_prefix_is_reported_as_cached():
    with serving_target(TargetConfig(**FAST, tokenize=True)) as (server, _, port):
        report = _report(_plan(port, input_tokens=1000, shared_prefix_tokens=600))
        sent = [_first_content(r) for r in server.received if "Read the notes" in
                _first_content(r)]
    prefixes = {text[:NONCE.search(text).start()] for text in sent}
    assert len(prefixes) == 1 and len(next(iter(prefixes))) > 1000  # the nonce follows it
    # the scan's first request finds the prefix cold (sizing asked /tokenize, not the model);
    # every later one finds its 16-token blocks cached
    first, second = (level["cached_prompt_share"] for level in report["levels"])
    assert 0.75 * 0.5 <= first <= 0.75 * 0.62, first
    assert 0.5 <= second <= 0.62, second


# -- 8. dataset --------------------------------------------------------------------------------

def test_dataset_prompts_reach_the_server(tmp_path):
    path = tmp_path / "load.jsonl"
    path.write_text('{"prompt": "first question"}\n\n'
                    '{"messages": [{"role": "system", "content": "be brief"},'
                    ' {"role": "user", "content": "second question"}]}\n', encoding="utf-8")
    with serving_target(TargetConfig(**FAST)) as (server, _, port):
        report = _report(_plan(port, dataset=load_dataset(path)))
        sent = list(server.received)
    firsts = [_first_content(r) for r in sent]
    assert all(NONCE.match(t) for t in firsts)
    assert sum(t.endswith(" first question") for t in firsts) >= 4
    seconds = [r for r in sent if len(r["messages"]) == 2]
    assert len(seconds) >= 4 and all(r["messages"][1]["content"] == "second question"
                                     for r in seconds)
    assert report["plan"]["workload"]["dataset"]["lines"] == 2
    assert report["plan"]["workload"]["sizing"] == "dataset"


@pytest.mark.parametrize("text,expected", [
    ("just text\n", "line 1: not JSON"),
    ("", "has no prompts"),
    ('{"prompt": "ok"}\n{"question": "no"}\n', "line 2: expected"),
    ('{"prompt": "ok"}\n{"messages": [{"content": "no role"}]}\n', "line 2: expected"),
])
def test_a_bad_dataset_is_one_line_naming_the_file_and_line_and_nothing_is_sent(
        tmp_path, capsys, text, expected):
    path = tmp_path / "bad.jsonl"
    path.write_text(text, encoding="utf-8")
    with serving_target(TargetConfig(**FAST)) as (server, _, port):
        assert main(["scan", f"http://127.0.0.1:{port}/v1", "--model", "m", "--dataset",
                     str(path), "--quiet", "--out", str(tmp_path / "r")]) == 2
        assert not server.received
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and expected in err[0], err


def test_flags_that_cannot_go_together_are_refused(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "x"}\n', encoding="utf-8")
    base = dict(base_url="http://127.0.0.1:9/v1", model="m")
    with pytest.raises(PlanError, match="exclude each other"):
        ScanPlan(**base, workload=Workload(input_tokens=100,
                                           dataset=load_dataset(path))).validate()
    with pytest.raises(PlanError, match="must be below --input-tokens"):
        ScanPlan(**base, workload=Workload(input_tokens=100,
                                           shared_prefix_tokens=100)).validate()
    with pytest.raises(PlanError, match="disagree"):
        ScanPlan(**base, max_tokens=64, workload=Workload(output_tokens=32)).validate()


# -- 6. the report carries the workload --------------------------------------------------------

def test_cli_summary_report_and_regrade_carry_the_workload(tmp_path, capsys):
    with serving_target(TargetConfig(**FAST, tokenize=True)) as (_, _, port):
        base = f"http://127.0.0.1:{port}/v1"
        args = ["scan", base, "--model", "m", "--concurrency", "1,2", "--requests", "4",
                "--quiet"]
        assert main([*args, "--input-tokens", "400", "--output-tokens", "32",
                     "--out", str(tmp_path / "a")]) == 0
        out = capsys.readouterr().out
        assert "tokvera scan: A at 1/2 × 4, 400 → 32 tokens" in out
        assert main([*args, "--out", str(tmp_path / "b")]) == 0
        capsys.readouterr()
    a = json.loads((tmp_path / "a" / "report.json").read_text())
    b = json.loads((tmp_path / "b" / "report.json").read_text())
    validate_report(a)
    html = (tmp_path / "a" / "report.html").read_text()
    assert "400 → 32 tokens" in html and "prompts sized: tokenize" in html
    assert any("workloads differ" in r for r in comparability(a, b))
    assert main(["regrade", str(tmp_path / "a" / "report.json"), "--against",
                 str(tmp_path / "b" / "report.json")]) == 6  # not comparable
    assert "not comparable" in capsys.readouterr().out
    # an old report (no workload, no new level fields) still validates and is not comparable
    old = json.loads(json.dumps(b))
    del old["plan"]["workload"]
    for level in old["levels"]:
        for key in ("prompt_tokens", "output_tokens", "cached_prompt_share", "cached_reported"):
            del level[key]
        for timeline in level["request_timelines"]:
            del timeline["cached_tokens"]
    validate_report(old)
    assert any("before every prompt carried a nonce" in r for r in comparability(old, b))
    assert comparability(b, json.loads(json.dumps(b))) == []
