"""The grader's templates (scans/grader/templates/): one Jinja2 environment, autoescaped, for
report.html (``report``) and the SVG charts it shows (``headline``). No Django: the CLI renders
a report without the site.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

__all__ = ["TEMPLATES_DIR", "environment", "render"]

# Inside the package, so a non-editable install ships it (package data in pyproject.toml).
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"

_BETWEEN_TAGS = re.compile(r">\s+<")


def _pluralize(count: Any) -> str:
    """"s" unless `count` is exactly one (Django's ``pluralize``, which the template used)."""
    try:
        return "" if float(count) == 1 else "s"
    except (TypeError, ValueError):
        return ""


def _spaceless(markup: str) -> Markup:
    """Django's ``{% spaceless %}``: no whitespace between tags, none around. For markup whose
    template is laid out on lines (the SVG charts); a value in it is escaped, so it holds no
    ``<`` or ``>`` this could touch."""
    return Markup(_BETWEEN_TAGS.sub("><", str(markup)).strip())  # noqa: S704 - rendered, autoescaped


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=True,  # every figure and every server message is escaped
        undefined=jinja2.ChainableUndefined,  # a field missing from an old report renders empty
        keep_trailing_newline=True,
    )
    env.filters["pluralize"] = _pluralize
    env.filters["spaceless"] = _spaceless
    return env


def render(template: str, context: dict[str, Any]) -> str:
    """`template` (a path under scans/grader/templates/) rendered with `context`."""
    return environment().get_template(template).render(context)
