"""The agent-shaped figures in report.html and in the comparison of two reports: per level the
per-turn TTFT and cached share, the tool calls' and JSON replies' shares, each marked measured
and not graded, and the load asked (its mix named); no such section for a scan without that
shape; two reports of different agent shapes are not comparable, said in a reader's words.
Real scans of `tokvera target` on loopback, written by the CLI; the page looked at in Chromium
at a phone's width and a desktop's."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from scans.grader import format_percent
from scans.grader.demo_server import TargetConfig, running_target
from scans.grader.report_text import comparability
from tests.helpers.browser import ARTIFACTS
from tokvera_site.cli import main

TOKVERA = [sys.executable, "-m", "tokvera_site.cli"]
TARGET = TargetConfig(ttft_ms=2.0, itl_ms=0.5, tokens=12, bad_tool_share=0.25)


@pytest.fixture(scope="module")
def scans(tmp_path_factory) -> dict[str, Path]:
    """An agent-preset scan's output directory and a plain scan's."""
    out = tmp_path_factory.mktemp("agent-report")
    with running_target(TARGET) as (host, port):
        url = f"http://{host}:{port}/v1"
        common = ["--model", "tokvera-target", "--concurrency", "1,3", "--requests", "12",
                  "--timeout", "10", "--quiet"]
        assert main(["scan", url, *common, "--workload", "agent", "--think-time-ms", "0",
                     "--out", str(out / "agent")]) == 0
        assert main(["scan", url, *common, "--out", str(out / "plain")]) == 0
    return {"agent": out / "agent", "plain": out / "plain"}


def _html(directory: Path) -> str:
    return (directory / "report.html").read_text(encoding="utf-8")


def test_report_html_shows_each_levels_agent_figures_as_measured_not_graded(scans):
    html = _html(scans["agent"])
    section = html[html.index('<section id="agent">'):]
    section = section[:section.index("</section>")]
    assert "(measured, not graded)" in section
    assert ("Sessions of 4 turns; tools builtin (tool_choice auto); JSON schema builtin; "
            "sessions cycle tool calls → JSON schema → plain chat.") in section
    report = json.loads((scans["agent"] / "report.json").read_text())
    for level in report["levels"]:
        assert f'data-concurrency="{level["concurrency"]}"' in section
    top = report["levels"][-1]
    for turn in top["turns"]:
        assert f"Turn {turn['turn']}" in section
    # the shares report.json holds, in words (the target made a bad tool call in four)
    calls = top["tool_calls"]
    assert calls["valid_share"] < 1.0
    shares = [format_percent(calls[name])
              for name in ("parsed_share", "named_share", "valid_share")]
    assert (f"{calls['called']} calls in {calls['replies_with_calls']} of {calls['requests']} "
            f"replies: {shares[0]} parsed, {shares[1]} named a declared tool, {shares[2]} "
            "valid") in section
    assert "100.0 % parsed, 100.0 % valid for the schema" in section
    assert "p95" in section and "of the prompt cached" in section


def test_a_scan_without_an_agent_shape_has_no_agent_section(scans):
    html = _html(scans["plain"])
    assert 'id="agent"' not in html
    assert "Tool calls" not in html and "JSON replies" not in html


def test_reports_of_different_agent_shapes_are_not_comparable_in_a_readers_words(
        scans, tmp_path):
    report = json.loads((scans["agent"] / "report.json").read_text())
    assert comparability(report, copy.deepcopy(report)) == []
    other = copy.deepcopy(report)
    agent = other["plan"]["workload"]["agent"]
    agent.update(mix=None, tools=None, turns=2)
    (tmp_path / "other.json").write_text(json.dumps(other))
    run = subprocess.run([*TOKVERA, "regrade", str(scans["agent"] / "report.json"),
                          "--against", str(tmp_path / "other.json")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 6, run.stderr
    said = " ".join(line.removeprefix("tokvera regrade:").strip()
                    for line in run.stdout.splitlines())
    assert "workloads differ" in said
    assert "turns 4 vs 2" in said
    assert "tools builtin (tool_choice auto) vs not set" in said
    assert "mix tools → structured_output → chat vs not set" in said
    assert "None" not in said

    # the preset alone differs: a conversation shaped by hand is not the preset's
    by_hand = copy.deepcopy(report)
    by_hand["plan"]["workload"].pop("preset")
    assert any("preset agent vs not set" in r for r in comparability(report, by_hand))


OVERFLOW = """() => {
  const section = document.querySelector('#agent');
  const wide = [...section.querySelectorAll('*')].filter(
      e => e.getBoundingClientRect().right > innerWidth + 0.5 || e.scrollWidth > e.clientWidth + 1);
  return [document.documentElement.scrollWidth, innerWidth,
          wide.map(e => e.tagName + ' ' + e.textContent.slice(0, 40))];
}"""


@pytest.mark.browser
@pytest.mark.parametrize("width", [390, 1400])
def test_the_agent_section_fits_a_phone_and_a_desktop(scans, browser, width):
    page = browser.new_page(viewport={"width": width, "height": 900})
    requested: list[str] = []

    def refuse_the_network(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            requested.append(route.request.url)
            route.abort()

    page.route("**/*", refuse_the_network)
    page.goto((scans["agent"] / "report.html").as_uri())
    scroll_width, inner_width, wide = page.evaluate(OVERFLOW)
    assert scroll_width <= inner_width == width
    assert wide == []
    page.locator("#agent").screenshot(path=str(ARTIFACTS / f"report-agent-{width}.png"))
    assert requested == []
