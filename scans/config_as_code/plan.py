"""The plan as people read it, from the site's answer, at 80 columns: one line per item with
`+` (create), `~` (change) or `-` (delete), and under a change each field as old → new, as
Terraform and `checkly deploy --preview` show theirs. A secret field says only that it is
set or changed: the site never sends its value, and this never prints one.

Imports no Django (the `tokvera` command prints it)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from scans.config_as_code.document import Problem

__all__ = ["render_plan", "render_problems", "summary"]

WIDTH = 80
SIGNS = {"create": "+", "change": "~", "delete": "-"}
ARROW = " → "
INDENT = "      "


def summary(changes: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    counts = {"create": 0, "change": 0, "delete": 0}
    for change in changes:
        counts[change["action"]] = counts.get(change["action"], 0) + 1
    return counts


def render_plan(answer: Mapping[str, Any]) -> str:
    """The site's plan (POST /api/v1/teams/<slug>/config/) as text."""
    changes = list(answer.get("changes", []))
    lines = [f"Plan for team {answer.get('team', '?')}:", ""]
    for change in changes:
        lines.append(f"  {SIGNS.get(change['action'], '?')} {change['kind']} "
                     f"{_quoted(change['name'])}")
        for field in change.get("fields", []):
            lines.extend(_field_lines(change["action"], field))
    if not changes:
        lines.append("  No changes: the site matches the file.")
    left = list(answer.get("left", []))
    if left:
        lines += ["", "Not in the file, left as they are (--prune deletes them):"]
        lines += [_fit(f"  {item['kind']} {_quoted(item['name'])}") for item in left]
    for warning in answer.get("warnings", []):
        lines += ["", *_wrapped(f"Note: {warning}", "  ")]
    counts = summary(changes)
    lines += ["", f"Plan: {counts['create']} to create, {counts['change']} to change, "
                  f"{counts['delete']} to delete."]
    if answer.get("dry_run"):
        lines.append("Dry run: nothing was changed.")
    elif changes:
        lines.append("Applied.")
    return "\n".join(lines) + "\n"


def render_problems(problems: Iterable[Problem | Mapping[str, str]], heading: str) -> str:
    """Every problem, one or more lines each: where (`endpoints.chat.base_url`), then why."""
    lines = [heading]
    for problem in problems:
        if not isinstance(problem, Problem):
            problem = Problem(problem.get("item", ""), problem.get("field", ""),
                              problem.get("message", ""))
        lines.extend(_wrapped(f"{problem.where()}: {problem.message}", "  ", "    "))
    return "\n".join(lines) + "\n"


def _field_lines(action: str, field: Mapping[str, Any]) -> list[str]:
    name = field["field"]
    if field.get("secret"):
        said = {"create": "(secret)", "delete": "(secret)"}.get(action) or f"(secret {field['new']})"
        return [_fit(f"{INDENT}{name}: {said}")]
    new = _value(field.get("new"))
    if action != "change":
        return [_fit(f"{INDENT}{name}: {new}")]
    old = _value(field.get("old"))
    line = f"{INDENT}{name}: {old}{ARROW}{new}"
    if len(line) <= WIDTH:
        return [line]
    return [f"{INDENT}{name}:", _fit(f"{INDENT}  was {old}"), _fit(f"{INDENT}  now {new}")]


def _value(value: Any) -> str:
    if value is None:
        return "(none)"
    return json.dumps(value, ensure_ascii=False)


def _quoted(name: str) -> str:
    return json.dumps(name, ensure_ascii=False)


def _fit(line: str) -> str:
    return line if len(line) <= WIDTH else line[:WIDTH - 1] + "…"


def _wrapped(text: str, first: str, rest: str | None = None) -> list[str]:
    import textwrap

    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest or first,
                         break_on_hyphens=False) or [first]
