"""`tokvera scan --repeat N` as a user meets it: N reports in run-1/ … run-N/, a repeat.json
whose medians are the medians of those reports' figures, with 95 % confidence intervals around
them and a spread of grades that counts every run, the median run's verdict printed last (and
its grade deciding --fail-under), and bad values refused in one line. The scans run the real
`tokvera scan` against a `tokvera target` subprocess on 127.0.0.1."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from scans.grader.repeat import bootstrap_interval, median_run
from tests.helpers.cli import (
    FAST,
    MODEL,
    assert_readable_at_80,
    target_process,
    tokvera,
)


def repeat_scan(url: str, cwd: Path, runs: str, *extra: str):
    return tokvera("scan", url, "--model", MODEL, "--concurrency", "1,2", "--requests", "4",
                   "--timeout", "5", "--out", "r", "--repeat", runs, *extra, cwd=cwd)


def level_1(report: dict) -> dict:
    return next(lv for lv in report["levels"] if lv["concurrency"] == 1)


def test_three_runs_give_three_reports_and_the_median_and_interval_of_their_figures(tmp_path):
    with target_process(*FAST) as (_, url):
        done = repeat_scan(url, tmp_path, "3")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "r"
    reports = []
    for run in (1, 2, 3):
        assert {p.name for p in (out / f"run-{run}").iterdir()} == {
            "report.json", "report.html", "requests.jsonl"}
        reports.append(json.loads((out / f"run-{run}" / "report.json").read_text()))
    summary = json.loads((out / "repeat.json").read_text())
    assert summary["runs"] == 3
    by_hand = {
        "ttft_p50_ms_at_concurrency_1": [level_1(r)["ttft_ms"]["p50"] for r in reports],
        "ttft_p95_ms_at_concurrency_1": [level_1(r)["ttft_ms"]["p95"] for r in reports],
        "generation_rate_at_concurrency_1": [level_1(r)["generation_rate"]["median"]
                                             for r in reports],
        "error_rate": [next(c["value"] for c in r["checks"] if c["id"] == "error_rate")
                       for r in reports],
        "points": [r["score"]["points"] for r in reports],
    }
    assert set(summary["figures"]) == set(by_hand)
    for key, values in by_hand.items():
        figure = summary["figures"][key]
        assert figure["values"] == pytest.approx(values, abs=1e-3)
        assert figure["median"] == pytest.approx(statistics.median(values), abs=1e-3)
        assert figure["ci_low"] <= figure["median"] <= figure["ci_high"]
        assert figure["runs"] == 3
    grades = [r["score"]["grade"] for r in reports]
    assert sum(summary["grades"].values()) == 3
    assert summary["grades"] == {g: grades.count(g) for g in set(grades)}
    assert summary["grade_spread"] in done.stdout
    # the verdict last: the median run's headline and grade line
    lines = done.stdout.splitlines()
    assert_readable_at_80(done.stdout)
    median = summary["median_run"]["run"]
    grade_at = max(i for i, line in enumerate(lines) if line.startswith("tokvera scan: grade "))
    assert lines[grade_at].startswith(f"tokvera scan: grade {reports[median - 1]['score']['grade']} (")
    assert all(line.startswith("tokvera scan:   ") for line in lines[grade_at + 1:])
    assert lines[grade_at - 1].startswith("tokvera scan: A at 1/2 × 4")
    assert lines[grade_at - 2] == (f"tokvera scan: grades over 3 runs: {summary['grade_spread']}; "
                                   f"median run: run {median}")


def test_the_exit_status_follows_the_median_runs_grade(tmp_path):
    with target_process(*FAST, "--error-rate", "0.5", "--seed", "3") as (_, url):
        done = repeat_scan(url, tmp_path, "2", "--fail-under", "B", "--quiet")
    summary = json.loads((tmp_path / "r" / "repeat.json").read_text())
    median = summary["median_run"]
    assert median["grade"] not in ("A", "B")  # half the requests fail: capped at F
    assert done.returncode == 4
    assert done.stderr.endswith(f"tokvera scan: the median run (run {median['run']}): grade "
                                f"{median['grade']} is below --fail-under B\n")
    # --quiet: the spread, then the median run's verdict
    logical = [line for line in done.stdout.splitlines() if not line.startswith("tokvera scan:   ")]
    assert len(logical) == 3, done.stdout
    assert logical[0].startswith("tokvera scan: grades over 2 runs: ")
    assert logical[2].startswith(f"tokvera scan: grade {median['grade']} (")


@pytest.mark.parametrize("value", ["0", "21", "1.5", "two", "-3"])
def test_a_bad_repeat_is_one_line_and_exit_2_before_anything_is_sent(tmp_path, value):
    # a port nothing listens on: exit 2, not 5, says nothing was tried
    done = repeat_scan("http://127.0.0.1:9/v1", tmp_path, value)
    assert done.returncode == 2
    assert done.stderr == (f"tokvera scan: --repeat {value!r}: expected a whole number of runs "
                           "from 1 to 20\n")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("flags", [("--preflight-only",),
                                   ("--publish", "http://127.0.0.1:9", "--token-env", "T",
                                    "--endpoint", "x")])
def test_repeat_refuses_what_has_no_repeated_meaning(tmp_path, flags):
    done = repeat_scan("http://127.0.0.1:9/v1", tmp_path, "2", *flags)
    assert done.returncode == 2
    assert done.stderr.startswith(f"tokvera scan: --repeat with {flags[0]}: ")
    assert len(done.stderr.splitlines()) == 1


def test_the_interval_is_the_same_for_the_same_runs_and_holds_the_median():
    values = [5.8, 5.1, 5.3, 6.4, 5.2, 5.0, 7.9]
    interval = bootstrap_interval(values)
    assert interval is not None and bootstrap_interval(values) == interval
    low, high = interval
    assert min(values) <= low <= sorted(values)[3] <= high <= max(values)
    assert bootstrap_interval([5.0]) is None


def test_with_an_even_number_of_runs_the_median_run_is_the_worse_middle_one():
    def report(grade: str, points: float) -> dict:
        return {"score": {"grade": grade, "points": points},
                "levels": [{"concurrency": 1, "requests": 4, "succeeded": 4}]}

    runs = [report("A", 95.0), report("C", 72.0), report("B", 85.0), report("A", 91.0)]
    assert median_run(runs) == 2  # A 95, A 91 | B 85, C 72: the B
