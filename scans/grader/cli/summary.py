"""What `tokvera scan` prints when a scan is done, laid out for the terminal's width.

The order is the order a reader needs: warnings that make the grade doubtful (a model the
server does not list), then the grade -- or, for an endpoint that never answered, the cause
and no letter -- then one line per cap and per failed check, the report's path, what was sent,
the notes, and the headline table. Every line fits `width` (the terminal's, ``COLUMNS``
honoured whether or not stdout is a terminal): text wraps between words, never inside a
number and its unit, and the table drops to several narrower tables (the concurrency column
repeated) or to one block per level rather than cutting a figure or a header.

Reads report.json dicts only (a report from before these fields existed prints too).
"""

from __future__ import annotations

import io
import re
import shutil
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from scans.grader import formatting as fmt
from scans.grader import headline, scoring
from scans.grader.report_text import (
    RATE_COLUMNS,
    cli_notes,
    describe_capacity,
    describe_open_loop,
    describe_slo,
    down_cause,
    goodput_text,
    is_down,
    rate_flag,
    rate_rows,
    workload_lines,
)

__all__ = ["PREFIX", "RATE_TITLE", "SEARCH_TITLE", "cap_lines", "closing_lines", "is_down",
           "open_loop_lines", "rate_table_lines", "slo_lines", "summary_lines", "table_lines",
           "terminal_width", "wrap"]

PREFIX = "tokvera scan: "
#: Below this the table is one block per level; wrapped text is never narrower than this.
MIN_WIDTH = 40
TABLE_TITLE = "Headline numbers (times in ms)"
SEARCH_TITLE = "Levels the capacity search added (not graded; times in ms)"
RATE_TITLE = "Open-loop rate levels (not graded; times in ms)"

_NBSP = "\u00a0"
# Spaces that must not become line breaks: a number and its unit ("5.1 ms", "0.0 %",
# "572.7 tokens/s"), a bound and its number ("≤ 128").
_KEEP_TOGETHER = re.compile(
    r"(?<=\d) (?=(?:ms|s|%|min|points|tokens/s|chunks/s|tokens|requests)\b|%)|(?<=[≤≥<>=×]) (?=\d)")


def terminal_width() -> int:
    """The terminal's width: ``COLUMNS`` when set, else the terminal's, else 80 (stdout is a
    file or a pipe and nothing says otherwise)."""
    return max(1, shutil.get_terminal_size((80, 24)).columns)


def wrap(text: str, width: int, prefix: str = PREFIX, indent: str = "  ") -> list[str]:
    """`text` as lines of at most `width` characters, each starting with `prefix` (the
    continuations indented): broken between words, never inside a word or between a number
    and its unit. A single word longer than the line (a long path) stays whole."""
    room = max(MIN_WIDTH // 2, width - len(prefix))
    protected = _KEEP_TOGETHER.sub(_NBSP, text)
    parts = textwrap.wrap(protected, room, subsequent_indent=indent, break_long_words=False,
                          break_on_hyphens=False) or [""]
    return [prefix + part.replace(_NBSP, " ") for part in parts]


# -- what the grade is, and why ------------------------------------------------------------------

def _down_cause(report: Mapping[str, Any]) -> str:
    return down_cause(report)


def _check_by_id(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("id")): c for c in report.get("checks") or [] if isinstance(c, Mapping)}


def _bounds(check: Mapping[str, Any]) -> list[float]:
    return [b["value"] for b in (check.get("pass"), check.get("warn"))
            if isinstance(b, Mapping) and isinstance(b.get("value"), int | float)
            and not isinstance(b.get("value"), bool)]


def _limit(check: Mapping[str, Any]) -> str:
    """The warn bound, the last value that is not a fail, without its sign: "4×", "2,000 ms"."""
    warn = check.get("warn")
    if not isinstance(warn, Mapping) or not isinstance(warn.get("value"), int | float):
        return fmt.MISSING
    return _bound_text(warn, str(check.get("unit")))[2:]


def _bound_text(bound: Mapping[str, Any], unit: str) -> str:
    value = bound.get("value")
    if not isinstance(value, int | float):
        return fmt.MISSING
    return fmt.bound_text(str(bound.get("op")), value, unit)


def _ttft_p99(level: Mapping[str, Any]) -> float | None:
    figures = level.get("ttft_ms")
    value = figures.get("p99") if isinstance(figures, Mapping) else None
    return value if isinstance(value, int | float) else None


def _cap_reason(cap: scoring.Cap | None, cap_id: str, report: Mapping[str, Any]) -> str:
    """Why a cap applied, in numbers with their units."""
    checks = _check_by_id(report)
    check = checks.get(cap.check) if cap is not None and cap.check else None
    if cap is None or check is None:
        return cap.applies_when if cap is not None else cap_id.replace("_", " ")
    value = check.get("value")
    unit = str(check.get("unit"))
    if cap.id == "no_successful_request":
        return "not a single request of any level streamed a reply"
    if cap.limit is not None:  # error_rate over the cap's own limit
        limit = fmt.percent(cap.limit).replace(".0 %", " %")
        return (f"{fmt.check_value(value, unit, [cap.limit])} of all requests failed "
                f"(the cap applies over {limit})")
    if cap.check == "ttft_p99_load_ratio":
        levels = [lv for lv in report.get("levels") or [] if int(lv.get("succeeded") or 0) > 0]
        alone = next((lv for lv in levels if lv.get("concurrency") == 1), None)
        peak = max(levels, key=lambda lv: int(lv.get("concurrency") or 0)) if levels else None
        figures = ""
        if alone is not None and peak is not None:
            loaded_ms, alone_ms = _ttft_p99(peak), _ttft_p99(alone)
            if loaded_ms is not None and alone_ms is not None:
                figures = f"{fmt.ms(loaded_ms)} against {fmt.ms(alone_ms)}; "
        where = f" at concurrency {peak.get('concurrency')}" if peak is not None else " under load"
        return (f"TTFT p99{where} is {fmt.check_value(value, unit, _bounds(check))} one "
                f"request's ({figures}limit {_limit(check)})")
    if cap.check == "ttft_p95_at_concurrency_1":
        return (f"TTFT p95 with one request in flight is "
                f"{fmt.check_value(value, unit, _bounds(check))} (limit {_limit(check)})")
    label = scoring.CHECK_LABELS.get(cap.check, cap.check)
    return f"{label} is {fmt.check_value(value, unit, _bounds(check))} (limit {_limit(check)})"


def cap_lines(report: Mapping[str, Any]) -> list[str]:
    """One line per cap that applied and per failed check no cap already names."""
    score = report.get("score") or {}
    caps = {cap.id: cap for cap in scoring.CAPS}
    lines = []
    named: set[str] = set()
    grade = score.get("grade")
    uncapped = score.get("uncapped_grade")
    for applied in score.get("caps_applied") or []:
        cap_id = str(applied.get("id"))
        at_best = str(applied.get("grade_at_best"))
        cap = caps.get(cap_id)
        if cap is not None and cap.check:
            named.add(cap.check)
        binding = (grade == at_best and uncapped in scoring.GRADES
                   and scoring.GRADES.index(uncapped) < scoring.GRADES.index(at_best))
        lead = f"capped at {at_best}" if binding or uncapped not in scoring.GRADES else \
            f"also caps at {at_best} (the points alone give {uncapped})"
        lines.append(f"{lead}: {_cap_reason(cap, cap_id, report)}")
    for check in report.get("checks") or []:
        if check.get("status") != "fail" or check.get("id") in named:
            continue
        unit = str(check.get("unit"))
        label = scoring.CHECK_LABELS.get(str(check.get("id"))) or str(check.get("id"))
        passes = check.get("pass")
        need = _bound_text(passes, unit) if isinstance(passes, Mapping) else fmt.MISSING
        lines.append(f"failed check: {label} is "
                     f"{fmt.check_value(check.get('value'), unit, _bounds(check))} "
                     f"(a pass is {need}, limit {_limit(check)})")
    return lines


def _grade_line(report: Mapping[str, Any]) -> str:
    score = report.get("score") or {}
    failed = sum(sum((level.get("failed") or {}).values()) for level in report.get("levels") or [])
    total = sum(int(level.get("requests") or 0) for level in report.get("levels") or [])
    counts = f"{failed} of {total} requests failed"
    if is_down(report):
        recorded = (f" (report.json records {score['grade']} under the no_successful_request "
                    "cap)" if score.get("grade") in scoring.GRADES else "")
        return f"no quality grade: the endpoint did not answer{recorded}; {counts}"
    if score.get("grade") in scoring.GRADES:
        version = (f"{'provisional ' if score.get('provisional') else ''}scoring "
                   f"{score.get('scoring_version')}")
        return (f"grade {score['grade']} ({fmt.number(score.get('points'), 'rate')} points, "
                f"{version}); {counts}")
    return f"no grade: {score.get('reason')}; {counts}"


def summary_lines(report: Mapping[str, Any], html_path: str, width: int) -> list[str]:
    """Everything before the table, wrapped to `width`: the details behind the verdict (the
    verdict itself, headline and grade, comes last: closing_lines)."""
    down = is_down(report)
    texts: list[str] = []
    preflight = report.get("preflight") or {}
    for warning in preflight.get("warnings") or []:
        texts.append(f"warning: {warning.get('message')}")
    if not down:
        texts.extend(cap_lines(report))
        cause = report.get("failure_summary")
        if cause:
            example = f" (e.g. {cause['example']})" if cause.get("example") else ""
            texts.append(f"what failed: {cause['sentence']}{example}")
    texts.append(f"report: {html_path}")
    sent = workload_lines(report)  # "A at 1/4/16 × 20, 4,000 → 256 tokens" is the headline
    if _capacity_headline(report) is not None and sent:  # the capacity is, then this is detail
        texts.append("sent: " + sent[0][sent[0].find(" at ") + 4:])
    texts.extend(sent[1:])
    texts.extend(cli_notes(report))  # which TTFT was graded; thinking and the budget hint
    if not down:
        texts.extend(open_loop_lines(report))
        texts.extend(slo_lines(report))
    return [line for text in texts for line in wrap(text, width)]


def _capacity_headline(report: Mapping[str, Any]) -> str | None:
    """With --find-capacity: the answer in one short line (its goodput and the levels tried
    are in the SLO lines above it)."""
    found = report.get("capacity")
    if not isinstance(found, Mapping) or is_down(report):
        return None
    if found.get("concurrency") is None:
        return "capacity: no level tried meets the SLO"
    bound = " or more (the search's bound)" if found.get("bound_reached") else ""
    return f"capacity: {found['concurrency']}{bound} concurrent requests within the SLO"


def closing_lines(report: Mapping[str, Any], width: int) -> list[str]:
    """The verdict, printed last so that it is what stays on screen: the headline (the cause
    of a down endpoint, the capacity when searched, else what was sent at which grade), then
    the grade line. All that `--quiet` prints."""
    headline_text = _capacity_headline(report)
    if is_down(report):
        headline_text = f"down: {_down_cause(report)}"
    elif headline_text is None:
        sent = workload_lines(report)
        headline_text = sent[0] if sent else None
    texts = [headline_text] if headline_text else []
    texts.append(_grade_line(report))
    return [line for text in texts for line in wrap(text, width)]


def open_loop_lines(report: Mapping[str, Any]) -> list[str]:
    """With --rate: how the rate levels were sent, and a line for each whose figures are the
    grader's more than the server's (a rate it could not hold, a lagging event loop)."""
    spec = (report.get("plan") or {}).get("open_loop")
    if not isinstance(spec, Mapping):
        return []
    lines = [f"open loop (not graded): {describe_open_loop(spec)}; latency also from each "
             "request's scheduled time"]
    lines.extend(flag for lv in report.get("rate_levels") or [] if (flag := rate_flag(lv)))
    return lines


# -- the SLO and the capacity ---------------------------------------------------------

def slo_lines(report: Mapping[str, Any]) -> list[str]:
    """With an --slo: the objective, one line per level (met or missed, the share of good
    requests, goodput), and the capacity when it was searched. Nothing without an SLO."""
    slo = (report.get("plan") or {}).get("slo")
    if not isinstance(slo, Mapping):
        return []
    lines = [f"SLO (not graded): {describe_slo(slo)}"]
    for lv in [*(report.get("levels") or []), *(report.get("search_levels") or []),
               *(report.get("rate_levels") or [])]:
        figures = lv.get("slo")
        if not isinstance(figures, Mapping):
            continue
        attainment = figures.get("attainment")
        share = fmt.percent(attainment if isinstance(attainment, int | float) else None)
        verdict = "met" if figures.get("met") else "missed"
        searched = " (searched)" if lv.get("searched") else ""
        where = (f"rate {fmt.number(lv['rate_per_s'], 'rate')}/s (from schedule)"
                 if isinstance(lv.get("rate_per_s"), int | float) else lv.get("concurrency"))
        lines.append(f"SLO at {where}{searched}: {verdict}, {share} good "
                     f"({figures.get('good')}/{figures.get('requests')}); goodput "
                     + goodput_text(figures.get("goodput_requests_per_s"),
                                    figures.get("goodput_output_per_s"),
                                    figures.get("goodput_unit")))
    found = report.get("capacity")
    if isinstance(found, Mapping):
        lines.append(f"capacity search: {describe_capacity(found)}")
    return lines


# -- the headline table --------------------------------------------------------------------------

def _render(tables: Sequence[Any], width: int) -> list[str]:
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, no_color=True, color_system=None,
                      force_terminal=False, force_jupyter=False, soft_wrap=False,
                      legacy_windows=False)
    for table in tables:
        console.print(table)
    return [line.rstrip() for line in buffer.getvalue().splitlines()]


def _table(columns: Sequence[tuple[str, str, str]], rows: Sequence[Mapping[str, str]],
           title: str | None) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", expand=False)
    for _key, name, _unit in columns:
        table.add_column(name, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*(row[key] for key, _, _ in columns))
    return table


def _fits(columns: Sequence[tuple[str, str, str]], rows: Sequence[Mapping[str, str]],
          width: int) -> bool:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=10_000)
    return console.measure(_table(columns, rows, None)).maximum <= width


def _stacked(rows: Sequence[Mapping[str, str]], title: str = TABLE_TITLE,
             columns: Sequence[tuple[str, str, str]] = headline.COLUMNS) -> list[str]:
    """One block per level: "concurrency 4" (or "Rate/s 8") then one figure a line."""
    lines = [title]
    first = columns[0]
    for row in rows:
        lines.append(f"concurrency {row['concurrency']}" if first[0] == "concurrency"
                     else f"{first[1]} {row[first[0]]}")
        for key, name, unit in columns[1:]:
            value = row[key]
            shown = f"{value} {unit}" if unit and value != fmt.MISSING else value
            lines.append(f"  {name}: {shown}")
    return lines


def table_lines(levels: Sequence[Mapping[str, Any]], width: int,
                title: str = TABLE_TITLE) -> list[str]:
    """The headline numbers, one row per level, in as many tables as the width needs (each
    repeats the concurrency column); one block per level when even two columns do not fit."""
    return _tables(headline.COLUMNS, headline.headline_rows(levels), width, title)


def rate_table_lines(levels: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    """The open-loop rate levels, laid out like the headline numbers (the rate repeated)."""
    return _tables(RATE_COLUMNS, rate_rows(levels), width, RATE_TITLE)


def _tables(columns: Sequence[tuple[str, str, str]], rows: Sequence[Mapping[str, str]],
            width: int, title: str) -> list[str]:
    first, *rest = columns
    if _fits(columns, rows, width):
        return _render([_table(columns, rows, title)], width)
    groups: list[list[tuple[str, str, str]]] = []
    current: list[tuple[str, str, str]] = []
    for column in rest:
        if _fits([first, *current, column], rows, width):
            current.append(column)
            continue
        if not current:  # not even the concurrency and this one column
            return _stacked(rows, title, columns)
        groups.append(current)
        current = [column]
    if current:
        groups.append(current)
    tables = [_table([first, *group], rows, title if i == 0 else None)
              for i, group in enumerate(groups)]
    return _render(tables, width)
