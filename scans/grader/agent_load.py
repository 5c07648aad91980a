"""Agent-shaped load: tool calls (``--tools``, ``--tool-choice``) and structured output
(``--json-schema``), what their replies are judged by, and the per-level figures of them and
of conversations (``--turns``). No I/O but reading the user's files; no Django.

* **Tools** are OpenAI's ``tools`` list: each ``{"type": "function", "function": {"name",
  "parameters"}}`` whose parameters are a JSON Schema. A streamed tool call is its name and
  its ``arguments`` fragments joined; it *parses* when the joined arguments are a JSON object,
  is *named* when the name is one the request declared, and is *valid* when both hold and the
  arguments validate against that tool's schema.
* **Structured output** sends ``response_format`` ``{"type": "json_schema", ...}``; a reply
  *parses* when its content is JSON and is *valid* when that JSON validates against the schema.

Validation is the ``jsonschema`` library's, with the validator the schema's own ``$schema``
names (Draft 2020-12 when it names none); a schema it rejects is refused before any load.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scans.grader.figures import percentile, rounded

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

    from .measurement import AgentRecord, LevelResult

__all__ = [
    "BUILTIN",
    "CHAT_SESSION",
    "SESSION_KINDS",
    "STRUCTURED_SESSION",
    "TOOL_RESULT",
    "TOOL_SESSION",
    "AgentShapeError",
    "BUILTIN_SCHEMA",
    "BUILTIN_TOOLS",
    "RequestShape",
    "TOOL_CHOICES",
    "StructuredOutput",
    "ToolSet",
    "conversation_figures",
    "load_schema",
    "load_tools",
    "structured_output_figures",
    "tool_call_figures",
    "tool_history",
]

#: ``--tools builtin`` / ``--json-schema builtin``: the grader's own small set.
BUILTIN = "builtin"
TOOL_CHOICES = ("auto", "required")
#: The largest tools or schema file read (they are sent with every request).
MAX_SPEC_BYTES = 256 * 1024

BUILTIN_TOOLS: tuple[dict, ...] = (
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "minLength": 1},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search_documents",
        "description": "Search the document store and return the best matches.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "minLength": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20}},
            "required": ["query", "limit"], "additionalProperties": False}}},
)

BUILTIN_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "rating": {"type": "integer", "minimum": 1, "maximum": 5},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["title", "rating", "tags"],
    "additionalProperties": False,
}


#: The kinds of session a mix (``Workload.mix``, the agent preset's) cycles through, by
#: session index: one that declares the tools, one that asks for the JSON schema, a plain one.
TOOL_SESSION = "tools"
STRUCTURED_SESSION = "structured_output"
CHAT_SESSION = "chat"
SESSION_KINDS = (TOOL_SESSION, STRUCTURED_SESSION, CHAT_SESSION)
#: What a tool "returned", resent after each call of a conversation: the grader runs no tool,
#: and a small fixed result keeps every session's history the same length.
TOOL_RESULT = '{"status": "ok", "result": "done"}'


class AgentShapeError(ValueError):
    """Tools or a schema that cannot be sent; the message is one line meant for the user."""


def _validator(schema: Any, what: str) -> Validator:
    """The schema's validator; AgentShapeError (one line) for what is not a JSON Schema."""
    import jsonschema  # only a scan that sends tools or a schema pays for the import
    from jsonschema.exceptions import SchemaError

    if not isinstance(schema, dict):
        raise AgentShapeError(f"{what}: not a JSON Schema (expected an object)")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "the top level"
        raise AgentShapeError(f"{what}: not a JSON Schema ({exc.message} at {where})") from None
    return cls(schema)


def _read_json(path_text: str, flag: str) -> Any:
    path = Path(path_text)
    try:
        if path.stat().st_size > MAX_SPEC_BYTES:
            raise AgentShapeError(f"{flag} {path}: larger than {MAX_SPEC_BYTES // 1024} KiB")
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise AgentShapeError(f"{flag} {path}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise AgentShapeError(f"{flag} {path}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise AgentShapeError(f"{flag} {path}: not JSON ({exc})") from None


# -- tools ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolSet:
    """The declared tools and ``tool_choice`` every request sends."""

    source: str
    tools: tuple[dict, ...]
    choice: str = "auto"
    validators: Mapping[str, Validator] = field(default_factory=dict, repr=False, compare=False)

    def body(self) -> dict:
        return {"tools": list(self.tools), "tool_choice": self.choice}

    def public_dict(self) -> dict:
        return {"source": self.source, "names": list(self.validators), "tool_choice": self.choice}

    def judge(self, calls: Sequence[tuple[str, str]]) -> tuple[int, int, int]:
        """(parsed, named, valid) among `calls`, each (name, joined arguments)."""
        parsed = named = valid = 0
        for name, arguments in calls:
            try:
                args = json.loads(arguments)
            except ValueError:
                args = None
            is_parsed = isinstance(args, dict)
            validator = self.validators.get(name)
            parsed += is_parsed
            named += validator is not None
            valid += bool(is_parsed and validator is not None and validator.is_valid(args))
        return parsed, named, valid


def load_tools(spec: str, choice: str = "auto") -> ToolSet:
    """``--tools builtin`` or ``--tools FILE`` (a JSON list of OpenAI tools)."""
    if choice not in TOOL_CHOICES:
        raise AgentShapeError(f"--tool-choice {choice!r}: expected one of {', '.join(TOOL_CHOICES)}")
    flag = f"--tools {spec}"
    tools = list(BUILTIN_TOOLS) if spec == BUILTIN else _read_json(spec, "--tools")
    if not isinstance(tools, list) or not tools:
        raise AgentShapeError(f"{flag}: expected a non-empty JSON list of "
                            '{"type": "function", "function": {"name": ..., "parameters": ...}}')
    validators: dict[str, Validator] = {}
    for number, tool in enumerate(tools, start=1):
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if (not isinstance(tool, dict) or tool.get("type") != "function"
                or not isinstance(name, str) or not name):
            raise AgentShapeError(f"{flag}: tool {number} is not "
                                '{"type": "function", "function": {"name": ..., ...}}')
        if name in validators:
            raise AgentShapeError(f"{flag}: tool {number} repeats the name {name!r}")
        assert isinstance(function, dict)
        schema = function.get("parameters", {"type": "object", "properties": {}})
        validators[name] = _validator(schema, f"{flag}: tool {name!r}'s parameters")
    return ToolSet(BUILTIN if spec == BUILTIN else Path(spec).name, tuple(tools), choice,
                   validators)


# -- structured output ---------------------------------------------------------------------------

@dataclass(frozen=True)
class StructuredOutput:
    """The JSON Schema every request asks its reply to follow (``response_format``)."""

    source: str
    schema: Any
    validator: Validator = field(repr=False, compare=False)

    def body(self) -> dict:
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": "tokvera_reply", "schema": self.schema, "strict": True}}}

    def public_dict(self) -> dict:
        return {"source": self.source}

    def judge(self, text: str) -> tuple[bool, bool]:
        """(parsed, valid) for one reply's content."""
        try:
            value = json.loads(text)
        except ValueError:
            return False, False
        return True, bool(self.validator.is_valid(value))


def load_schema(spec: str) -> StructuredOutput:
    """``--json-schema builtin`` or ``--json-schema FILE`` (a JSON Schema)."""
    schema = BUILTIN_SCHEMA if spec == BUILTIN else _read_json(spec, "--json-schema")
    validator = _validator(schema, f"--json-schema {spec}")
    return StructuredOutput(BUILTIN if spec == BUILTIN else Path(spec).name, schema, validator)


# -- one request's shape and a conversation's tool turns --------------------------------------

@dataclass(frozen=True)
class RequestShape:
    """What one request declares besides its messages: the tools, the schema, both (every
    request of a scan given --tools and --json-schema) or neither (a plain request)."""

    tools: ToolSet | None = None
    structured_output: StructuredOutput | None = None

    def body(self) -> dict:
        extra: dict = {}
        if self.tools is not None:
            extra.update(self.tools.body())
        if self.structured_output is not None:
            extra.update(self.structured_output.body())
        return extra

    @property
    def shaped(self) -> bool:
        return self.tools is not None or self.structured_output is not None


def tool_history(text: str, calls: Sequence[tuple[str, str, str]]) -> list[dict]:
    """What an agent's client resends after a reply that called tools: the assistant message
    with its calls as received (`calls`: id, name, arguments), then one ``tool`` message per
    call carrying ``TOOL_RESULT``."""
    assistant = {"role": "assistant", "content": text or None, "tool_calls": [
        {"id": ident, "type": "function", "function": {"name": name, "arguments": arguments}}
        for ident, name, arguments in calls]}
    return [assistant, *({"role": "tool", "tool_call_id": ident, "content": TOOL_RESULT}
                         for ident, _, _ in calls)]


# -- per-level figures ---------------------------------------------------------------------------

def _agent_records(level: LevelResult) -> list[AgentRecord]:
    from .measurement import AgentRecord

    return [r for r in level.requests if isinstance(r, AgentRecord)]


def _share(part: int, whole: int) -> float | None:
    return rounded(part / whole, 4) if whole else None


def conversation_figures(level: LevelResult) -> list[dict] | None:
    """Per turn of a conversation level: requests, TTFT of those that succeeded, and the share
    of their prompt tokens the server said were cached (None where none said)."""
    by_turn: dict[int, list] = {}
    for record in _agent_records(level):
        if record.turn is not None:
            by_turn.setdefault(record.turn, []).append(record)
    if not by_turn:
        return None
    figures = []
    for turn, records in sorted(by_turn.items()):
        ok = [r for r in records if r.failure is None]
        ttft = [t for r in ok if (t := r.ttft_ms) is not None]
        cached = [(r.cached_tokens, r.prompt_tokens) for r in ok
                  if r.cached_tokens is not None and r.prompt_tokens]
        prompt_total = sum(p for _, p in cached)
        figures.append({
            "turn": turn,
            "requests": len(records),
            "succeeded": len(ok),
            "ttft_ms": {"p50": rounded(percentile(ttft, 50)),
                        "p95": rounded(percentile(ttft, 95))},
            "cached_share": _share(sum(c for c, _ in cached), prompt_total),
        })
    return figures


def tool_call_figures(level: LevelResult) -> dict | None:
    """Among the tool calls the successful replies made: the shares that parsed, named a
    declared tool and were valid for its schema."""
    sent = [r for r in _agent_records(level) if r.tool_calls is not None]
    if not sent:
        return None
    ok = [r for r in sent if r.failure is None]
    called = sum(r.tool_calls or 0 for r in ok)
    return {
        "requests": len(ok),
        "replies_with_calls": sum(1 for r in ok if r.tool_calls),
        "called": called,
        "parsed_share": _share(sum(r.tool_calls_parsed for r in ok), called),
        "valid_share": _share(sum(r.tool_calls_valid for r in ok), called),
        "named_share": _share(sum(r.tool_calls_named for r in ok), called),
    }


def structured_output_figures(level: LevelResult) -> dict | None:
    """Among the successful replies to a structured-output request: the shares whose content
    parsed as JSON and validated against the schema."""
    sent = [r for r in _agent_records(level) if r.structured is not None]
    if not sent:
        return None
    ok = [r for r in sent if r.failure is None]
    return {
        "requests": len(ok),
        "parsed_share": _share(sum(1 for r in ok if r.structured in ("valid", "invalid")),
                               len(ok)),
        "valid_share": _share(sum(1 for r in ok if r.structured == "valid"), len(ok)),
    }
