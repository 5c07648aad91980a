"""Issue 22: an SLO per scan (attainment, goodput per level) and `--find-capacity`, against the
reference target with a known number of decode slots (`tokvera target --slots N`).

Timing margins come from the target's own configured delays: a stream takes 40 ms to its
first token and 100 ms in all, so a request that queues for a slot waits most of 100 ms
(TTFT ≥ ~100 ms) while one that does not has a TTFT of ~40 ms; the TTFT objective is 80 ms.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from scans.grader import capacity, objective, run_scan
from scans.grader.cli import target as target_cli
from scans.grader.demo_server import TargetConfig, serving_target
from scans.grader.plan import ScanPlan
from scans.grader.report import regrade, report_from_measurement
from tests.helpers.servers import validate_report as validate
from tokvera_site.cli import main

SLOTS = 6
SLOTTED = TargetConfig(ttft_ms=40, itl_ms=20, tokens=4, max_concurrency=SLOTS)
FAST = TargetConfig(ttft_ms=10, itl_ms=5, tokens=4)


def _scan(url: str, out: Path, *extra: str) -> list[str]:
    return ["scan", url, "--model", "tokvera-target", "--timeout", "10", "--out", str(out),
            *extra]


def _said(stdout: str) -> str:
    """The summary's lines as one text (wrapped lines joined)."""
    return " ".join(line.removeprefix("tokvera scan:").strip() for line in stdout.splitlines())


def _report(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    validate(report)
    return report


# -- the search itself, as a pure function --------------------------------------------------------

@pytest.mark.parametrize("true_capacity", [1, 2, 3, 5, 6, 7, 12, 15, 16, 17, 33, 40])
def test_the_search_finds_the_exact_boundary_from_the_plan_levels(true_capacity):
    tried = {c: c <= true_capacity for c in (1, 4, 16)}
    added = 0
    while (nxt := capacity.next_search_level(tried, 4096)) is not None and added < 16:
        assert nxt not in tried
        tried[nxt] = nxt <= true_capacity
        added += 1
    assert max(c for c, ok in tried.items() if ok) == true_capacity
    assert added <= 8


def test_no_search_when_no_level_met():
    assert capacity.next_search_level({1: False, 4: False}, 4096) is None


def _searched(search: capacity.CapacitySearch, true_capacity: int) -> list[int]:
    levels = []
    while (step := search.next_level()) is not None:
        concurrency, requests = step
        assert requests == capacity.search_requests(concurrency)
        levels.append(concurrency)
        search.record(concurrency, requests, concurrency <= true_capacity)
    return levels


def test_the_search_stops_at_its_boundary_not_exhausted():
    search = capacity.CapacitySearch({1: True, 4: True, 16: False}, max_level=4096, max_levels=8,
                                     max_requests=None, warmup=0)
    assert _searched(search, 9) == [10, 7, 8, 9]
    assert search.exhausted is False


def test_the_search_stops_at_its_level_bound_exhausted():
    search = capacity.CapacitySearch({1: True, 4: True, 16: True}, max_level=4096, max_levels=2,
                                     max_requests=None, warmup=0)
    assert _searched(search, 1000) == [32, 64]
    assert search.exhausted is True


def test_the_search_stops_where_the_request_budget_ends_warm_up_included():
    # 32 streams send 64 requests and 5 warm-up requests: 69 fit in 100, the next 133 do not.
    search = capacity.CapacitySearch({1: True, 16: True}, max_level=4096, max_levels=8,
                                     max_requests=100, warmup=5)
    assert _searched(search, 1000) == [32]
    assert search.exhausted is True


def test_a_search_that_met_its_highest_allowed_level_is_exhausted():
    search = capacity.CapacitySearch({1: True, 4: True}, max_level=6, max_levels=8,
                                     max_requests=None, warmup=0)
    assert _searched(search, 1000) == [6]
    assert search.exhausted is True


def test_the_worst_case_rounds_start_at_two_streams():
    # levels 2 and 3: ceil(20 / 2) + ceil(20 / 3) rounds, plus one warm-up round each
    assert capacity.search_worst_waves(2, 1) == 10 + 7 + 1 + 1


# -- a six-slot server -----------------------------------------------------------------------------

def test_the_capacity_of_a_six_slot_server_is_found_within_one_stream(tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "r"
    with serving_target(SLOTTED) as (_, host, port):
        code = main(_scan(f"http://{host}:{port}/v1", out, "--concurrency", "1,4,16",
                          "--slo", "ttft_p95_ms=80", "--find-capacity"))
    assert code == 0
    report = _report(out)
    assert [lv["concurrency"] for lv in report["levels"]] == [1, 4, 16]
    assert not any(lv.get("searched") for lv in report["levels"])
    assert report["search_levels"] and all(lv["searched"] for lv in report["search_levels"])
    assert report["plan"]["slo"] == {"ttft_p95_ms": 80.0, "attainment": 0.95}
    by_level = {lv["concurrency"]: lv["slo"] for lv in
                [*report["levels"], *report["search_levels"]]}
    assert by_level[1]["met"] and by_level[4]["met"] and not by_level[16]["met"]
    found = report["capacity"]
    assert abs(found["concurrency"] - SLOTS) <= 1
    assert found["bound_reached"] is False
    assert found["levels_tried"] == sorted(by_level)
    assert found["requests_per_s"] > 0 and found["output_tokens_per_s"] > 0
    assert found["attainment"] >= 0.95
    for lv in report["search_levels"]:
        assert lv["requests"] == capacity.search_requests(lv["concurrency"])
    stdout = capsys.readouterr().out
    said = _said(stdout)
    assert f"capacity: {found['concurrency']} concurrent requests within the SLO" in said
    assert "SLO at 16: missed" in said
    assert "Levels the capacity search added (not graded" in stdout
    # every line fits 80 columns but the report's path (a long word is never broken)
    assert [line for line in stdout.splitlines() if len(line) > 80 and not line.endswith("report.html")] == []
    html = (out / "report.html").read_text()
    assert 'id="slo"' in html and 'id="capacity"' in html


def test_no_level_met_the_slo_when_even_one_request_misses_it(tmp_path, capsys):
    out = tmp_path / "r"
    with serving_target(SLOTTED) as (_, host, port):
        code = main(_scan(f"http://{host}:{port}/v1", out, "--concurrency", "1,4",
                          "--requests", "20", "--slo", "ttft_p95_ms=10", "--find-capacity"))
    assert code == 0
    report = _report(out)
    found = report["capacity"]
    assert found["concurrency"] is None and found["requests_per_s"] is None
    assert "no level met the SLO" in found["reason"]
    assert report["search_levels"] == [] and found["levels_tried"] == [1, 4]
    said = _said(capsys.readouterr().out)
    assert "capacity search: none, no level met the SLO" in said
    # the headline, just before the grade line
    assert f"capacity: no level tried meets the SLO grade {report['score']['grade']} (" in said


def test_met_at_the_highest_level_tried_when_the_search_reaches_its_bound(tmp_path, capsys):
    out = tmp_path / "r"
    with serving_target(FAST) as (_, host, port):
        code = main(_scan(f"http://{host}:{port}/v1", out, "--concurrency", "1,2",
                          "--requests", "20", "--slo", "ttft_p95_ms=5000",
                          "--find-capacity", "--search-levels", "2"))
    assert code == 0
    report = _report(out)
    assert [lv["concurrency"] for lv in report["search_levels"]] == [4, 8]
    found = report["capacity"]
    assert found["concurrency"] == 8 and found["bound_reached"] is True
    assert "met at the highest level tried" in found["reason"]
    assert "met at the highest level tried" in _said(capsys.readouterr().out)


def test_attainment_counts_failures_as_misses(tmp_path):
    out = tmp_path / "r"
    flaky = dataclasses.replace(FAST, error_rate=0.3, seed=7)
    with serving_target(flaky) as (_, host, port):
        code = main(_scan(f"http://{host}:{port}/v1", out, "--concurrency", "1,2",
                          "--requests", "40", "--slo", "ttft_p95_ms=5000,error_rate=0.5",
                          "--attainment", "0.5"))
    assert code == 0
    report = _report(out)
    assert "capacity" not in report and "search_levels" not in report
    for lv in report["levels"]:
        figures = lv["slo"]
        assert lv["succeeded"] < lv["requests"]  # the seed makes some fail
        assert figures["good"] == lv["succeeded"]  # every success meets the lax TTFT target
        assert figures["attainment"] == pytest.approx(lv["succeeded"] / lv["requests"], abs=1e-4)
        assert figures["error_rate"] == pytest.approx(1 - figures["attainment"], abs=1e-4)
        assert figures["met"] == (figures["attainment"] >= 0.5 and figures["error_rate"] <= 0.5)


def test_the_grade_is_the_same_with_and_without_the_search():
    with serving_target(SLOTTED) as (_, host, port):
        plan = ScanPlan(base_url=f"http://{host}:{port}/v1", model="tokvera-target",
                        levels=(1, 4, 16), timeout_s=10,
                        slo=objective.parse_slo("ttft_p95_ms=80"), find_capacity=True)
        measurement = run_scan(plan)
    assert measurement.searched_levels
    with_search = report_from_measurement(plan, measurement)
    without = report_from_measurement(
        dataclasses.replace(plan, find_capacity=False),
        dataclasses.replace(measurement, searched_levels=[], search_exhausted=False))
    assert with_search["checks"] == without["checks"]
    assert with_search["score"] == without["score"]
    assert with_search["levels"] == without["levels"]
    assert regrade(with_search)["score"] == with_search["score"]
    assert "capacity" in with_search and "capacity" not in without


# -- the target's slots -----------------------------------------------------------------------------

def test_target_slots_flag_sets_the_decode_slots_and_defaults_to_unlimited():
    parser = argparse.ArgumentParser()
    target_cli.add_arguments(parser)
    assert target_cli._config(parser.parse_args(["--port", "0", "--slots", "6"])
                              ).max_concurrency == 6
    assert target_cli._config(parser.parse_args(["--port", "0", "--max-concurrency", "3"])
                              ).max_concurrency == 3
    assert target_cli._config(parser.parse_args(["--port", "0"])).max_concurrency is None


# -- bad input: one line, exit 2, nothing sent ------------------------------------------------------

@pytest.mark.parametrize(("extra", "says"), [
    (["--slo", "latency_ms=5"], "unknown objective"),
    (["--slo", "ttft_p95_ms=0"], "positive"),
    (["--slo", "itl_p95_ms=-5"], "positive"),
    (["--slo", "e2e_p95_ms=fast"], "not a number"),
    (["--slo", "error_rate=2"], "at most 1"),
    (["--slo", "ttft_p95_ms"], "name=value"),
    (["--slo", "ttft_p95_ms=80", "--attainment", "0"], "(0, 1]"),
    (["--slo", "ttft_p95_ms=80", "--attainment", "1.5"], "(0, 1]"),
    (["--find-capacity"], "--slo"),
    (["--attainment", "0.9"], "--slo"),
    (["--slo", "ttft_p95_ms=80", "--find-capacity", "--search-levels", "0"], "--search-levels"),
])
def test_bad_slo_input_is_one_line_exit_2_and_nothing_is_sent(extra, says, tmp_path, capsys):
    with serving_target(FAST) as (server, host, port):
        code = main(_scan(f"http://{host}:{port}/v1", tmp_path / "r", *extra))
        assert not server.received
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and says in err
    assert not (tmp_path / "r").exists()


def test_an_attainment_of_one_is_accepted():
    assert objective.parse_slo("ttft_p95_ms=80", 1.0).attainment == 1.0


def test_a_pushed_reports_slo_is_recomputed_and_its_search_marked_unproven(tmp_path):
    from scans.grader.proof import prove

    out = tmp_path / "r"
    with serving_target(FAST) as (_, host, port):
        assert main(_scan(f"http://{host}:{port}/v1", out, "--concurrency", "1,2",
                          "--requests", "20", "--slo", "ttft_p95_ms=5000",
                          "--find-capacity", "--search-levels", "1")) == 0
    report = _report(out)
    proven = prove(report)
    validate(proven)
    for claimed, recomputed in zip(report["levels"], proven["levels"], strict=True):
        for key in ("good", "requests", "attainment", "error_rate", "met"):
            assert recomputed["slo"][key] == claimed["slo"][key]
    assert proven["capacity"]["proven_from_samples"] is False
    assert proven["score"]["grade"] == report["score"]["grade"]
