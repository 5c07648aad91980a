"""The configuration file: how it is read, its shape, and its secrets.

A file is one mapping: `team` (the team's slug), and the sections it manages, each a mapping
keyed by name (`endpoints`, `channels`, `maintenance_windows`) or the team's one
`status_page`. A section the file leaves out is not managed: nothing in it is changed, even
with --prune. Field names within an item are the REST API's; which fields exist is the site's
to say (its serializers), so this module checks only the shape.

A secret is never written in the file: a secret field says `{secret_env: NAME}`, and the
client reads the environment variable before sending (`resolve_secrets`); `export` writes
placeholders named by `secret_env_name`. The site refuses an unresolved `secret_env`.

YAML is read strictly: a key given twice is an error (YAML keeps the last one silently),
and times and dates stay text (`02:00` is not 120, `2026-12-05T02:00:00Z` not a datetime),
as the API reads them. Imports no Django: `tokvera apply` runs it before any request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["KEYED_SECTIONS", "SECRET_ENV", "SECTIONS", "STATUS_PAGE", "DocumentError", "Problem", "dump",
           "is_secret_ref", "load", "resolve_secrets", "secret_env_name", "shape_problems"]

KEYED_SECTIONS = ("channels", "endpoints", "maintenance_windows")  # also the order applied in
STATUS_PAGE = "status_page"
SECTIONS = (*KEYED_SECTIONS, STATUS_PAGE)
TOP_LEVEL = ("team", *SECTIONS)
MAX_NAME_CHARS = 100  # every name the site keeps (endpoints, channels, windows)
SECRET_ENV = "secret_env"  # noqa: S105 - the key that names a variable
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")


class DocumentError(Exception):
    """The file cannot be read as a configuration; one line, with its place where known."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the file: the item (`endpoints.chat`), the field, and why."""

    item: str
    field: str
    message: str

    def where(self) -> str:
        return ".".join(part for part in (self.item, self.field) if part) or "the file"

    def as_dict(self) -> dict[str, str]:
        return {"item": self.item, "field": self.field, "message": self.message}


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and reads times, dates and base-60 numbers as
    text (YAML 1.1 turns an unquoted 02:00 into 120)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) or key is None:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark,
                        f"{key!r} is given twice", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


_INT, _FLOAT, _TIMESTAMP = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
                            "tag:yaml.org,2002:timestamp")
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in (_INT, _FLOAT, _TIMESTAMP)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(_INT, re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$"),
                                    list("-+0123456789"))
_StrictLoader.add_implicit_resolver(
    _FLOAT, re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*)?\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
                       r"|[-+]?[0-9][0-9_]*\.?(?:[eE][-+]?[0-9]+)"
                       r"|[-+]?[0-9][0-9_]*\."
                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def load(text: str, source: str = "the file") -> dict[str, Any]:
    """The file as a mapping; DocumentError names the line of what YAML could not read."""
    try:
        document = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}, line {mark.line + 1}, column {mark.column + 1}" if mark else source
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        raise DocumentError(f"{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise DocumentError(f"{source}: not YAML: {exc}") from None
    if not isinstance(document, dict):
        raise DocumentError(f"{source}: expected a mapping with `team:` and the sections "
                            f"({', '.join(SECTIONS)})")
    return document


def dump(config: Mapping[str, Any], header: str = "") -> str:
    """YAML as `export` writes it: the sections in order, short lists on one line."""
    body = yaml.safe_dump(dict(config), sort_keys=False, allow_unicode=True,
                          default_flow_style=None, width=78)
    return header + body


def is_secret_ref(value: Any) -> bool:
    return isinstance(value, dict) and list(value) == [SECRET_ENV]


def secret_env_name(section: str, name: str, field: str) -> str:
    """The environment variable `export` names for a secret: TOKVERA_CHANNEL_OPS_HOOK for a
    channel's URL, TOKVERA_CHANNEL_OPS_HOOK_SECRET for its signing secret,
    TOKVERA_ENDPOINT_CHAT_API_KEY for an endpoint's key."""
    kind = {"channels": "CHANNEL", "endpoints": "ENDPOINT"}.get(section, section.upper())
    stem = re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_") or "UNNAMED"
    suffix = "" if (section, field) == ("channels", "url") else f"_{field.upper()}"
    return f"TOKVERA_{kind}_{stem}{suffix}"


def shape_problems(document: Mapping[str, Any]) -> list[Problem]:
    """What is wrong with the file's shape (the site checks each field's value): unknown
    top-level keys, a missing team, sections that are not mappings of named items, secret
    references that are not `{secret_env: NAME}`."""
    problems = [Problem("", str(key), f"unknown key; expected one of {', '.join(TOP_LEVEL)}")
                for key in document if key not in TOP_LEVEL]
    team = document.get("team")
    if not isinstance(team, str) or not team.strip():
        problems.append(Problem("", "team", "give the team's slug, e.g. `team: acme`"))
    for section in KEYED_SECTIONS:
        items = document.get(section)
        if items is None:
            continue
        if not isinstance(items, dict):
            problems.append(Problem(section, "", "expected a mapping of names to items"))
            continue
        for name, item in items.items():
            problems.extend(_item_problems(section, name, item))
    page = document.get(STATUS_PAGE)
    if page is not None:
        if isinstance(page, dict):
            problems.extend(_secret_ref_problems(STATUS_PAGE, page))
        else:
            problems.append(Problem(STATUS_PAGE, "", "expected a mapping of its settings"))
    return problems


def _item_problems(section: str, name: Any, item: Any) -> list[Problem]:
    if not isinstance(name, str) or not name.strip():
        return [Problem(section, str(name), "a name must be text: quote it")]
    if len(name) > MAX_NAME_CHARS:
        return [Problem(f"{section}.{name[:40]}…", "", f"at most {MAX_NAME_CHARS} characters")]
    where = f"{section}.{name}"
    if item is None:
        item = {}
    if not isinstance(item, dict):
        return [Problem(where, "", "expected a mapping of fields")]
    problems = [Problem(where, str(field), "a field name must be text")
                for field in item if not isinstance(field, str)]
    if "name" in item:
        problems.append(Problem(where, "name", "the key is the name: leave out `name:`"))
    return problems + _secret_ref_problems(where, item)


def _secret_ref_problems(where: str, item: Mapping[Any, Any]) -> list[Problem]:
    problems = []
    for field, value in item.items():
        if isinstance(value, dict) and SECRET_ENV in value:
            env = value.get(SECRET_ENV)
            if len(value) != 1 or not isinstance(env, str) or not ENV_NAME.match(env):
                problems.append(Problem(where, str(field), "expected `{secret_env: NAME}`, "
                                        "NAME an environment variable's name"))
    return problems


def resolve_secrets(document: Mapping[str, Any],
                    environ: Mapping[str, str]) -> tuple[dict[str, Any], list[Problem]]:
    """The document with each `{secret_env: NAME}` replaced by that variable's value, and a
    Problem for each variable that is not set (its value is never in a message)."""
    resolved: dict[str, Any] = dict(document)
    problems: list[Problem] = []
    for section in KEYED_SECTIONS:
        items = document.get(section)
        if not isinstance(items, dict):
            continue
        resolved[section] = {}
        for name, item in items.items():
            if not isinstance(item, dict):
                resolved[section][name] = item
                continue
            fields = dict(item)
            for field, value in item.items():
                if is_secret_ref(value):
                    env = value[SECRET_ENV]
                    if environ.get(env):
                        fields[field] = environ[env]
                    else:
                        problems.append(Problem(f"{section}.{name}", str(field),
                                                f"the environment variable {env} is not set"))
            resolved[section][name] = fields
    return resolved, problems
