"""The stored pilots and `tokvera calibrate`: the calibration table is reproducible from the
repository, and the rules scoring 1.0.0 was calibrated to keep still hold on the real pilots."""

from __future__ import annotations

import json

import pytest

from scans.grader import calibration
from scans.grader.scoring import GRADES
from tests.helpers.paths import ROOT
from tokvera_site import cli

PILOTS = sorted((ROOT / "calibration" / "pilots").glob("*.json"))
DOCS = ROOT / "docs" / "calibration.md"


def loaded() -> list[calibration.Pilot]:
    return [calibration.load_pilot(path) for path in PILOTS]


def test_there_are_pilots_of_two_servers_at_several_workloads_each_with_its_conditions():
    pilots = loaded()
    assert len(pilots) >= 4
    servers = {p.conditions["flags"] for p in pilots}
    assert len(servers) >= 2
    for flags in servers:
        workloads = {((p.report["plan"].get("workload") or {}).get("preset") or {}).get("name", "built-in")
                     for p in pilots if p.conditions["flags"] == flags}
        assert len(workloads) >= 2, flags
    for path, pilot in zip(PILOTS, pilots, strict=True):
        assert path.stat().st_size < 200_000, path  # a summary, not samples
        for key in calibration.CONDITIONS:
            assert pilot.conditions[key], (path, key)
        assert pilot.report["score"]["scoring_version"] in {"0.9.0", "1.0.0"}


def test_the_pilots_do_not_all_land_on_the_same_letter():
    letters = {p.graded("1.0.0")["score"]["grade"] for p in loaded()}
    assert len(letters & set(GRADES)) >= 2, letters


def test_a_cpu_server_with_4000_token_prompts_fails_time_to_first_token():
    long_prompts = [p for p in loaded() if (p.input_tokens or 0) >= 3500]
    assert long_prompts, "no pilot at the rag preset"
    for pilot in long_prompts:
        ttft = next(c for c in pilot.graded("1.0.0")["checks"]
                    if c["id"] == "ttft_p95_at_concurrency_1")
        assert ttft["status"] == "fail", pilot.id


def test_docs_calibration_holds_the_table_the_command_prints(capsys):
    assert cli.main(["calibrate", *map(str, PILOTS), "--check", str(DOCS)]) == 0
    assert cli.main(["calibrate", *map(str, PILOTS), "--markdown"]) == 0
    block = capsys.readouterr().out
    assert "| `ttft_p95_at_concurrency_1` |" in block and "### Grades" in block


def test_a_changed_pilot_makes_the_docs_check_fail(tmp_path, capsys):
    first = json.loads(PILOTS[0].read_text(encoding="utf-8"))
    ttft = next(c for c in first["report"]["checks"] if c["id"] == "ttft_p95_at_concurrency_1")
    ttft["value"] = (ttft["value"] or 0) + 12_345
    changed = tmp_path / PILOTS[0].name
    changed.write_text(json.dumps(first), encoding="utf-8")
    assert cli.main(["calibrate", str(changed), *map(str, PILOTS[1:]), "--check",
                     str(DOCS)]) == 1
    assert "differs" in capsys.readouterr().err


def test_the_table_fits_80_columns_and_names_both_versions(capsys):
    assert cli.main(["calibrate", *map(str, PILOTS)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "0.9.0 bounds" in out and "1.0.0 bounds" in out
    for pilot in loaded():
        assert pilot.id in out


@pytest.mark.parametrize("body", ['{"report": {"checks": []}}', "[]", "not json"])
def test_a_file_that_is_not_a_pilot_is_refused_in_one_line(tmp_path, capsys, body):
    bad = tmp_path / "bad.json"
    bad.write_text(body, encoding="utf-8")
    assert cli.main(["calibrate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.json" in err
