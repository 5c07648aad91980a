"""Issue 21, the rest: `--workload chat|rag|long` presets, `--input-tokens N±SD` / `MIN-MAX`
spreads, and `--input-tokens` with `--dataset` refused. Real loopback servers that count tokens
their own way: `tokvera target` (its tokenizer and chat template, with and without /tokenize)
and a raw asyncio server counting one token per three bytes."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from scans.grader import ScanPlan, run_scan
from scans.grader.demo_server import TargetConfig, serving_target
from scans.grader.report import report_from_measurement
from scans.grader.report_text import comparability
from scans.grader.sizing import tolerance
from scans.grader.workload import (
    AGENT,
    PRESETS,
    InputSpread,
    Workload,
    WorkloadError,
    parse_input_tokens,
)
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
FAST = dict(ttft_ms=2.0, itl_ms=0.2, tokens=8)


def _bytes_counted(body: dict) -> int:
    """The raw server's count: one token per 3 bytes of message text, plus 11 (its template)."""
    text = "".join(str(m.get("content")) for m in body.get("messages", []))
    return len(text.encode()) // 3 + 11


def _byte_counting_server(received: list[dict]):
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
            usage = {"prompt_tokens": _bytes_counted(body), "completion_tokens": 1}
            events = content_event("hi", role=True) + finish_event()
            events += b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"
            writer.write(SSE_HEAD + http_chunk(events + done_event()) + END_CHUNKS)
            await writer.drain()

    return handler


def _scan_args(port: int, out, *extra: str) -> list[str]:
    return [
        "scan",
        f"http://127.0.0.1:{port}/v1",
        "--model",
        "m",
        "--concurrency",
        "1",
        "--requests",
        "3",
        "--timeout",
        "30",
        "--quiet",
        "--out",
        str(out),
        *extra,
    ]


def _said(out: str) -> str:
    return " ".join(line.removeprefix("tokvera scan:").strip() for line in out.splitlines())


# -- presets -------------------------------------------------------------------------------------


# The length presets; agent's sessions are test_agent_preset.py's.
@pytest.mark.parametrize("name", sorted(set(PRESETS) - {AGENT}))
def test_each_preset_sends_its_lengths_and_is_written_out_in_the_report(name, tmp_path, capsys):
    tokens_in, tokens_out, _ = PRESETS[name]
    out = tmp_path / "r"
    with serving_target(TargetConfig(**FAST, tokenize=True)) as (_, _, port):
        assert main(_scan_args(port, out, "--workload", name)) == 0
    report = json.loads((out / "report.json").read_text())
    validate_report(report)
    work = report["plan"]["workload"]
    assert work["preset"]["name"] == name
    assert (work["preset"]["input_tokens"], work["preset"]["output_tokens"]) == (tokens_in, tokens_out)
    assert (work["input_tokens"], work["output_tokens"]) == (tokens_in, tokens_out)
    assert report["plan"]["max_tokens"] == tokens_out
    [level] = report["levels"]
    assert level["succeeded"] == 3
    prompts, outputs = level["prompt_tokens"], level["output_tokens"]
    assert (
        tokens_in - tolerance(tokens_in)
        <= prompts["min"]
        <= prompts["max"]
        <= tokens_in + tolerance(tokens_in)
    )
    assert work["output_length"]["enforced"] is True
    assert outputs["min"] == outputs["max"] == tokens_out
    assert f"{tokens_in:,} → {tokens_out:,} tokens (--workload {name})" in _said(capsys.readouterr().out)


def test_a_presets_lengths_give_way_to_the_ones_given(tmp_path):
    out = tmp_path / "r"
    with serving_target(TargetConfig(**FAST, tokenize=True)) as (_, _, port):
        assert main(_scan_args(port, out, "--workload", "rag", "--input-tokens", "600")) == 0
    work = json.loads((out / "report.json").read_text())["plan"]["workload"]
    assert (work["input_tokens"], work["output_tokens"]) == (600, 256)
    assert work["preset"]["input_tokens"] == 4_000  # the preset as defined, beside what was sent


# -- a spread of input lengths -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "low", "high"),
    [
        ("300±60", "normal", 120, 480),
        ("300+-60", "normal", 120, 480),
        ("200-600", "uniform", 200, 600),
        ("1,000", None, 1000, 1000),
    ],
)
def test_input_tokens_are_parsed_as_a_length_or_a_spread(text, kind, low, high):
    center, spread = parse_input_tokens(text)
    if kind is None:
        assert spread is None and center == low
        return
    assert spread is not None and (spread.kind, spread.low, spread.high) == (kind, low, high)
    targets = [spread.target(i) for i in range(2000)]
    assert low <= min(targets) and max(targets) <= high
    assert targets == [spread.target(i) for i in range(2000)]  # seeded by the request's index


def test_a_normal_spread_has_the_mean_and_sd_asked():
    import statistics

    _, spread = parse_input_tokens("1000±150")
    assert spread is not None
    targets = [spread.target(i) for i in range(4000)]
    assert statistics.fmean(targets) == pytest.approx(1000, rel=0.02)
    assert statistics.pstdev(targets) == pytest.approx(150, rel=0.05)
    other = InputSpread(spread.kind, spread.low, spread.high, spread.mean, spread.sd, seed=1)
    assert [other.target(i) for i in range(50)] != targets[:50]


@pytest.mark.parametrize("text", ["300±60", "150-450"])
def test_each_request_gets_its_own_length_as_the_server_counts_it(text):
    received: list[dict] = []
    center, spread = parse_input_tokens(text)
    assert spread is not None
    with raw_server(_byte_counting_server(received)) as port:
        plan = ScanPlan(
            base_url=f"http://127.0.0.1:{port}/v1",
            model="m",
            levels=(1, 4),
            requests=16,
            timeout_s=20,
            max_tokens=16,
            use_nvidia_smi=False,
            workload=Workload(input_tokens=center, input_spread=spread),
        )
        report = report_from_measurement(plan, run_scan(plan))
    validate_report(report)
    work = report["plan"]["workload"]
    assert work["sizing"] == "probe"
    assert work["input_distribution"]["kind"] == spread.kind
    assert abs(work["input_distribution"]["sized_at"][0] - spread.low) <= tolerance(spread.low)
    load = [
        (int(match.group(2)), body)
        for body in received
        if (match := NONCE.search(body["messages"][0]["content"]))
        and int(match.group(1)) == int(work["nonce"]["scan"])
        and int(match.group(2)) < 900_000
    ]
    load = load[-32:]  # the measured requests (the probes before them are sizing)
    misses = [
        (spread.target(n), _bytes_counted(body))
        for n, body in load
        if abs(_bytes_counted(body) - spread.target(n)) > tolerance(spread.target(n))
    ]
    assert not misses, misses
    achieved = [lv["prompt_tokens"] for lv in report["levels"]]
    assert all(a["max"] - a["min"] > 20 for a in achieved), achieved  # lengths differ


def test_a_spread_is_sized_through_tokenize_on_the_reference_target():
    center, spread = parse_input_tokens("400±80")
    with serving_target(TargetConfig(**FAST, tokenize=True)) as (_, _, port):
        plan = ScanPlan(
            base_url=f"http://127.0.0.1:{port}/v1",
            model="m",
            levels=(1,),
            requests=20,
            timeout_s=20,
            max_tokens=16,
            use_nvidia_smi=False,
            workload=Workload(input_tokens=center, input_spread=spread),
        )
        spread_report = report_from_measurement(plan, run_scan(plan))
        fixed_plan = ScanPlan(
            base_url=plan.base_url,
            model="m",
            levels=(1,),
            requests=20,
            timeout_s=20,
            max_tokens=16,
            use_nvidia_smi=False,
            workload=Workload(input_tokens=center),
        )
        fixed_report = report_from_measurement(fixed_plan, run_scan(fixed_plan))
    validate_report(spread_report)
    assert spread_report["plan"]["workload"]["sizing"] == "tokenize"
    achieved = spread_report["levels"][0]["prompt_tokens"]
    assert spread.low - 2 <= achieved["min"] < achieved["max"] <= spread.high + 2
    assert abs(achieved["p50"] - 400) <= 80
    # a spread and a fixed length of the same center are different workloads
    assert any("input_distribution" in reason for reason in comparability(spread_report, fixed_report))


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--input-tokens", "300", "--dataset", "DATASET"], "--input-tokens and --dataset exclude"),
        (["--workload", "rag", "--dataset", "DATASET"], "--workload rag and --dataset exclude"),
        (["--input-tokens", "300±0"], "SD above 0"),
        (["--input-tokens", "600-200"], "MIN < MAX"),
        (["--input-tokens", "lots"], "expected N, N±SD"),
        (["--input-tokens", "300±60", "--shared-prefix-tokens", "150"], "the shortest"),
        (["--workload", "huge"], "invalid choice"),
    ],
)
def test_bad_workload_input_is_one_line_exit_2_and_nothing_is_sent(extra, says, tmp_path, capsys):
    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"prompt": "a real question"}\n', encoding="utf-8")
    extra = [str(dataset) if e == "DATASET" else e for e in extra]
    with serving_target(TargetConfig(**FAST)) as (server, _, port):
        with pytest.raises(SystemExit) if says == "invalid choice" else _no_raise() as exit_:
            code = main(_scan_args(port, tmp_path / "r", *extra))
        assert not server.received
    if says == "invalid choice":
        assert exit_.value.code == 2
        return
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and says in err, err
    assert "never padded or cut" in err or "--dataset" not in " ".join(extra)


class _no_raise:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_workload_validation_refuses_a_spread_wider_than_the_limit():
    _, spread = parse_input_tokens("100-20000000")
    with pytest.raises(WorkloadError, match="between 1 and"):
        Workload(input_tokens=spread.center, input_spread=spread).validate(16)


def test_a_spread_reaching_below_the_prompts_fixed_part_stops_before_the_load():
    center, spread = parse_input_tokens("5-200")
    with serving_target(TargetConfig(**FAST, tokenize=True)) as (server, _, port):
        plan = ScanPlan(
            base_url=f"http://127.0.0.1:{port}/v1",
            model="m",
            levels=(1,),
            requests=3,
            timeout_s=20,
            max_tokens=16,
            use_nvidia_smi=False,
            workload=Workload(input_tokens=center, input_spread=spread),
        )
        with pytest.raises(WorkloadError, match="reaches down to 5, below the prompt's fixed"):
            run_scan(plan)
        assert len(server.received) == 1  # the preflight's probe; sizing used /tokenize
