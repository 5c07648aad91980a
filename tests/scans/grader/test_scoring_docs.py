import argparse

from scans.grader import scoring
from scans.grader.cli import scoring_table
from tests.helpers.processes import ROOT
from tokvera_site import cli

DOCS = ROOT / "docs" / "scoring.md"


def run_scoring_table(*argv):
    """Run `tokvera scoring-table` through the module's own CLI interface."""
    parser = argparse.ArgumentParser(prog="tokvera scoring-table")
    scoring_table.add_arguments(parser)
    return scoring_table.run(parser.parse_args(list(argv)))


def test_docs_scoring_block_equals_markdown():
    block = scoring.extract_generated_block(DOCS.read_text(encoding="utf-8"))
    assert block is not None, "docs/scoring.md lost its generated-block markers"
    assert block.strip("\n") == scoring.markdown().strip("\n")


def test_the_0_9_0_tables_still_carry_the_spec_figures_and_ids():
    text = scoring.markdown("0.9.0")
    assert "Scoring version: 0.9.0" in text
    assert "**Provisional.**" in text
    for row in [
        "| latency | 35 |", "| reliability | 30 |", "| capacity | 15 |",
        "| observability | 10 |", "| cost_and_cache | 10 |",
        "| ≤ 800 | ≤ 2000 | > 2000 | yes |", "| ≤ 2 | ≤ 4 | > 4 | yes |",
        "| ≤ 100 | ≤ 250 | > 250 | yes |", "| ≤ 0.01 | ≤ 0.05 | > 0.05 | yes |",
        "| ≥ 0.7 | ≥ 0.4 | < 0.4 | yes |", "| ≥ 1 | ≥ 0.5 | < 0.5 | yes |",
        "| present | absent | never | yes |", "| ≤ 0.1 | ≤ 0.25 | > 0.25 | yes |",
        "| ≥ 0.6 | ≥ 0.3 | < 0.3 | no (preview) |",
        "| A | 90 |", "| B | 80 |", "| C | 70 |", "| D | 60 |", "| F | 0 |",
        "| `no_successful_request` | F |", "| `error_rate_over_25_percent` | F |",
        "| `error_rate_over_5_percent` | D |", "| `ttft_at_concurrency_1_failed` | C |",
        "| `ttft_collapses_under_load` | C |",
    ]:
        assert row in text, row
    for check in scoring.CHECKS:
        assert f"| `{check.id}` | {check.pillar} |" in text


def test_the_current_tables_show_the_calibrated_bounds_and_where_each_comes_from():
    text = scoring.markdown()
    assert "Scoring version: 1.0.0" in text and "Provisional" not in text
    assert ("| ≤ 500 + 100 per 1,000 input tokens | ≤ 2000 + 500 per 1,000 input tokens "
            "| > 2000 + 500 per 1,000 input tokens | yes |") in text
    assert "| ≤ 50 | ≤ 150 | > 150 | yes |" in text
    assert "| ≤ 2 | ≤ 4 | > 4 | yes |" in text  # kept
    sources = text.split("### Where each bound comes from")[1].split("###")[0]
    for check in scoring.CHECKS:
        row = next(line for line in sources.splitlines() if line.startswith(f"| `{check.id}` |"))
        assert len(row.split("|")[2].strip()) > 20, row  # a reason, not a blank
    assert "MLPerf" in sources and "GuideLLM" in sources


def test_scoring_table_prints_markdown(capsys):
    assert run_scoring_table() == 0
    assert capsys.readouterr().out == scoring.markdown()


def test_scoring_table_check_passes_on_the_docs():
    assert run_scoring_table("--check", str(DOCS)) == 0


def test_scoring_table_check_fails_with_one_line_on_a_tampered_copy(tmp_path, capsys):
    tampered = tmp_path / "scoring.md"
    tampered.write_text(DOCS.read_text(encoding="utf-8").replace("| ≤ 50 |", "| ≤ 60 |"),
                        encoding="utf-8")
    assert run_scoring_table("--check", str(tampered)) == 1
    message = capsys.readouterr().err
    assert message.count("\n") == 1
    assert "differs" in message


def test_scoring_table_check_fails_on_a_file_without_markers(tmp_path, capsys):
    plain = tmp_path / "plain.md"
    plain.write_text("# Scoring\n\nNo tables here.\n", encoding="utf-8")
    assert run_scoring_table("--check", str(plain)) == 1
    assert "no generated block" in capsys.readouterr().err


def test_tokvera_scoring_table_check_exits_0_on_the_docs_and_1_on_a_tampered_copy(
        tmp_path, capsys):
    assert cli.main(["scoring-table", "--check", str(DOCS)]) == 0
    tampered = tmp_path / "scoring.md"
    tampered.write_text(DOCS.read_text(encoding="utf-8").replace("| A | 90 |", "| A | 85 |"),
                        encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["scoring-table", "--check", str(tampered)]) == 1
    message = capsys.readouterr().err
    assert "differs" in message
    assert len(message.strip().splitlines()) == 1


def test_tokvera_scoring_table_with_an_unreadable_file_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["scoring-table", "--check", str(tmp_path / "nope.md")]) == 2
    assert "cannot read" in capsys.readouterr().err
