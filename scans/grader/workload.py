"""What the load sends, as a plan asks for it: the workload's specification (no I/O here;
sizing.py asks the server, load_bodies.py builds the requests).

* **A nonce on every prompt**, always (load_bodies.py): no scan is served from an earlier
  scan's prefix cache and no two requests of a scan share a prefix by accident.
* **Reply length** (``output_tokens``): ``max_tokens`` M, plus ``ignore_eos`` and ``min_tokens``
  M where the server accepts them (sizing.py finds out; what it refuses is never sent).
* **Prompt length** (``input_tokens``): each prompt is N tokens as the server counts them,
  chat template included, within ``sizing.tolerance(N)``.
* **Shared prefix** (``shared_prefix_tokens``): the first P tokens are the same for every
  request of the scan; the nonce follows them.
* **Dataset** (``--dataset FILE``): JSONL prompts sent as the load, cycled, nonce prepended to
  the first message. Never sized: ``--input-tokens`` with a dataset is refused (DECISIONS.md).
* **A spread of prompt lengths** (``--input-tokens N±SD`` or ``MIN-MAX``): each request draws its
  own length (seeded by its index, normal within ±3 SD or uniform); ``SPREAD_ANCHORS`` lengths
  are sized exactly, those between are interpolated.
* **Presets** (``--workload chat|rag|long``): input and output lengths after Artificial
  Analysis's shapes (``PRESETS``), written out in the report. ``--workload agent`` is an
  agent's sessions (``AGENT_PRESET``); ``apply_workload_preset`` is the one place a preset's
  values are filled in, for the CLI and the site alike.
* **Conversations** (``--turns N``, ``--think-time-ms T``): sessions of N requests, each
  resending the history so far (the system prompt once, its user messages, the replies
  actually received and, after a tool call, the call and its result), T ms apart; a level's
  concurrency counts sessions in flight.
* **Tool calls and structured output** (``--tools``, ``--tool-choice``, ``--json-schema``):
  ``tools`` / ``tool_choice`` and ``response_format`` in every body (agent_load.py), or with a
  ``mix`` each in its own kind of session.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .agent_load import (
    CHAT_SESSION,
    SESSION_KINDS,
    STRUCTURED_SESSION,
    TOOL_SESSION,
    RequestShape,
)
from .apis import STRUCTURED_OUTPUT_APIS

if TYPE_CHECKING:
    from .agent_load import StructuredOutput, ToolSet

__all__ = [
    "AGENT",
    "AGENT_PRESET",
    "MAX_DATASET_BYTES",
    "MAX_DATASET_LINES",
    "PRESETS",
    "WORKLOAD_PRESETS",
    "AgentPreset",
    "Dataset",
    "DatasetError",
    "InputSpread",
    "Workload",
    "WorkloadError",
    "apply_workload_preset",
    "load_dataset",
    "parse_input_tokens",
]

MAX_DATASET_BYTES = 64 * 1024 * 1024
MAX_DATASET_LINES = 100_000
MAX_INPUT_TOKENS = 10_000_000
MAX_WARMUP = 10_000
MAX_TURNS = 1_000
MAX_THINK_TIME_MS = 600_000


class WorkloadError(ValueError):
    """The workload cannot be sent as asked; the message is one line meant for the user."""


class DatasetError(WorkloadError):
    """A --dataset file that cannot be used (the message names the file and the line)."""



# -- the dataset ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Dataset:
    path: str
    lines: int
    sha256: str
    #: Each prompt as a list of chat messages.
    items: tuple[tuple[Mapping[str, Any], ...], ...] = field(repr=False, compare=False)

    def public_dict(self) -> dict:
        return {"name": Path(self.path).name, "lines": self.lines, "sha256": self.sha256}


def _message_ok(message: object) -> bool:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        return False
    content = message.get("content")
    return isinstance(content, str) or (isinstance(content, list) and all(
        isinstance(p, dict) for p in content))


def load_dataset(path: str | Path) -> Dataset:
    """Read a JSONL dataset: one ``{"prompt": "..."}`` or ``{"messages": [...]}`` per non-empty
    line. Raises DatasetError (one line, naming the file and the line) otherwise."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_DATASET_BYTES:
            raise DatasetError(f"dataset {path} is larger than "
                               f"{MAX_DATASET_BYTES // (1024 * 1024)} MiB")
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad_line = raw[:exc.start].count(b"\n") + 1
        raise DatasetError(f"dataset {path}, line {bad_line}: not UTF-8 text") from None
    items: list[tuple[Mapping[str, Any], ...]] = []
    shape = '{"prompt": "..."} or {"messages": [{"role": ..., "content": ...}]}'
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(items) >= MAX_DATASET_LINES:
            raise DatasetError(f"dataset {path}, line {number}: more than "
                               f"{MAX_DATASET_LINES:,} prompts")
        try:
            obj = json.loads(line)
        except ValueError:
            raise DatasetError(f"dataset {path}, line {number}: not JSON (a dataset is JSONL, "
                               f"one {shape} per line)") from None
        if isinstance(obj, dict) and isinstance(obj.get("prompt"), str) and obj["prompt"]:
            items.append(({"role": "user", "content": obj["prompt"]},))
        elif (isinstance(obj, dict) and isinstance(obj.get("messages"), list) and obj["messages"]
              and all(_message_ok(m) for m in obj["messages"])):
            items.append(tuple({"role": m["role"], "content": m["content"]}
                               for m in obj["messages"]))
        else:
            raise DatasetError(f"dataset {path}, line {number}: expected {shape}")
    if not items:
        raise DatasetError(f"dataset {path} has no prompts")
    return Dataset(str(path), len(items), hashlib.sha256(raw).hexdigest()[:16], tuple(items))


# -- presets and spreads -------------------------------------------------------------------------

#: ``--workload NAME``: (input tokens, output tokens, what it stands for). Chat and long are
#: Artificial Analysis's 100 → 300 and 10,000 → 1,500; rag is a retrieved context with a short
#: answer (4,000 → 256) rather than their 1,000 → 1,000 (DECISIONS.md).
AGENT = "agent"


@dataclass(frozen=True)
class AgentPreset:
    """``--workload agent``: an agent's sessions. Each session sends the system prompt once,
    as its first message, then a user message of its own per turn; the sessions cycle, by
    index, through the kinds of ``mix`` (agent_load.SESSION_KINDS): one declaring the built-in
    tools (tool_choice auto), one asking for the built-in JSON schema, a plain chat."""

    turns: int = 4
    think_time_ms: float = 500.0
    system_prompt_tokens: int = 1_000
    user_message_tokens: int = 200
    output_tokens: int = 128
    tool_choice: str = "auto"
    mix: tuple[str, ...] = (TOOL_SESSION, STRUCTURED_SESSION, CHAT_SESSION)

    @property
    def input_tokens(self) -> int:
        """The first turn's prompt, as sized: the system prompt and the first user message."""
        return self.system_prompt_tokens + self.user_message_tokens

    def text(self) -> str:
        return (f"{self.turns} turns {self.think_time_ms:,.0f} ms apart, a "
                f"{self.system_prompt_tokens:,}-token system prompt, "
                f"{self.user_message_tokens:,}-token user turns, {self.output_tokens:,}-token "
                f"replies; sessions mix {', '.join(self.mix)}")


AGENT_PRESET = AgentPreset()

PRESETS: dict[str, tuple[int, int, str]] = {
    "chat": (100, 300, "a chat turn (Artificial Analysis's 100 → 300)"),
    "rag": (4_000, 256, "a retrieved context and a short answer (4,000 → 256)"),
    "long": (10_000, 1_500, "a long document (Artificial Analysis's 10,000 → 1,500)"),
    AGENT: (AGENT_PRESET.input_tokens, AGENT_PRESET.output_tokens,
            f"an agent's sessions: {AGENT_PRESET.text()}"),
}
#: The names ``--workload`` and ``apply_workload_preset`` take.
WORKLOAD_PRESETS = tuple(PRESETS)
#: A spread is sized exactly at this many anchor lengths; the lengths between are interpolated.
SPREAD_ANCHORS = 5


@dataclass(frozen=True)
class InputSpread:
    """Prompt lengths that differ per request: ``normal`` (mean, sd; cut at ±3 SD) or
    ``uniform`` (low..high), drawn from the request's index and the seed (the same lengths
    every scan of the same plan)."""

    kind: str
    low: int
    high: int
    mean: float | None = None
    sd: float | None = None
    seed: int = 0

    @property
    def center(self) -> int:
        return round(self.mean) if self.mean is not None else (self.low + self.high) // 2

    def target(self, request: int) -> int:
        digest = hashlib.blake2b(f"tokvera-input/{self.seed}/{request}".encode(),
                                 digest_size=8).digest()
        u = (int.from_bytes(digest, "big") + 0.5) / 2**64
        if self.kind == "uniform":
            return min(self.high, self.low + int(u * (self.high - self.low + 1)))
        assert self.mean is not None and self.sd is not None
        drawn = round(statistics.NormalDist(self.mean, self.sd).inv_cdf(u))
        return max(self.low, min(self.high, drawn))

    def anchors(self) -> list[int]:
        step = (self.high - self.low) / (SPREAD_ANCHORS - 1)
        return sorted({round(self.low + i * step) for i in range(SPREAD_ANCHORS)})

    def text(self) -> str:
        if self.kind == "uniform":
            return f"{self.low:,}–{self.high:,}"
        return f"{self.mean:,.0f}±{self.sd:,.0f}"

    def public_dict(self) -> dict:
        return {"kind": self.kind, "min": self.low, "max": self.high, "mean": self.mean,
                "sd": self.sd, "seed": self.seed}


def parse_input_tokens(text: str) -> tuple[int, InputSpread | None]:
    """``"1000"`` → (1000, None); ``"1000±200"`` (or ``1000+-200``) → a normal spread;
    ``"500-1500"`` → a uniform one. WorkloadError (one line) otherwise."""
    raw = text.strip().replace(",", "").replace("_", "")
    hint = "expected N, N±SD (or N+-SD) or MIN-MAX, e.g. 1000, 1000±200, 500-1500"
    try:
        for sep in ("±", "+-", "+/-"):
            if sep in raw:
                mean_text, _, sd_text = raw.partition(sep)
                mean, sd = float(mean_text), float(sd_text)
                if not (math.isfinite(mean) and math.isfinite(sd) and mean >= 1 and sd > 0):
                    raise WorkloadError(f"--input-tokens {text!r}: the mean must be at least 1 "
                                        "and the SD above 0")
                spread = InputSpread("normal", max(1, round(mean - 3 * sd)),
                                     round(mean + 3 * sd), mean, sd)
                return spread.center, spread
        if "-" in raw[1:]:
            low_text, _, high_text = raw.partition("-")
            low, high = int(low_text), int(high_text)
            if not 1 <= low < high:
                raise WorkloadError(f"--input-tokens {text!r}: MIN-MAX needs 1 <= MIN < MAX")
            spread = InputSpread("uniform", low, high)
            return spread.center, spread
        return int(raw), None
    except WorkloadError:
        raise
    except ValueError:
        raise WorkloadError(f"--input-tokens {text!r}: {hint}") from None


# -- what was asked ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """The workload a plan asks for; all None/0 is today's default (built-in prompts, replies
    capped by max_tokens), nonce included."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    shared_prefix_tokens: int | None = None
    warmup: int = 0
    dataset: Dataset | None = None
    #: Each request's own prompt length (``input_tokens`` is then its center).
    input_spread: InputSpread | None = None
    #: The --workload preset the lengths came from (``PRESETS``), when one was named.
    preset: str | None = None
    #: Requests per conversation (1: no history is resent) and the pause between them.
    turns: int = 1
    think_time_ms: float = 0.0
    #: ``tools`` / ``tool_choice`` and ``response_format``: sent with every request, or with
    #: a `mix` only by the sessions of their kind.
    tools: ToolSet | None = None
    structured_output: StructuredOutput | None = None
    #: The kinds of session (agent_load.SESSION_KINDS) cycled through by session index (by
    #: request index for single requests); None: every request is shaped alike.
    mix: tuple[str, ...] | None = None

    def request_shape(self, session: int) -> RequestShape:
        """What session `session`'s requests declare besides their messages."""
        if not self.mix:
            return RequestShape(self.tools, self.structured_output)
        kind = self.mix[session % len(self.mix)]
        if kind == TOOL_SESSION:
            return RequestShape(tools=self.tools)
        if kind == STRUCTURED_SESSION:
            return RequestShape(structured_output=self.structured_output)
        assert kind == CHAT_SESSION
        return RequestShape()

    def agent_body(self) -> dict:
        """What every request body carries besides the messages (nothing with a mix: each kind
        of session adds its own, ``request_shape``)."""
        return self.request_shape(0).body() if not self.mix else {}

    def agent_dict(self) -> dict | None:
        """report.json's ``plan.workload.agent``: None for plain single-turn requests."""
        if (self.turns == 1 and self.tools is None and self.structured_output is None
                and not self.mix):
            return None
        return {"turns": self.turns, "think_time_ms": self.think_time_ms,
                "tools": self.tools.public_dict() if self.tools else None,
                "structured_output": (self.structured_output.public_dict()
                                      if self.structured_output else None),
                "mix": list(self.mix) if self.mix else None}

    @property
    def longest_input(self) -> int | None:
        return self.input_spread.high if self.input_spread is not None else self.input_tokens

    @property
    def shortest_input(self) -> int | None:
        return self.input_spread.low if self.input_spread is not None else self.input_tokens

    def validate(self, max_tokens: int) -> None:
        if self.preset is not None and self.preset not in PRESETS:
            raise WorkloadError(f"--workload {self.preset!r}: expected one of "
                                + ", ".join(PRESETS))
        if self.input_spread is not None and self.input_tokens is None:
            raise WorkloadError("an input-length spread needs its center as input_tokens")
        longest = self.longest_input
        if self.input_tokens is not None and not (
                1 <= (self.shortest_input or 0) and (longest or 0) <= MAX_INPUT_TOKENS):
            raise WorkloadError(f"--input-tokens must be between 1 and {MAX_INPUT_TOKENS}")
        if self.output_tokens is not None:
            if not 1 <= self.output_tokens <= 1_000_000:
                raise WorkloadError("--output-tokens must be between 1 and 1000000")
            if self.output_tokens != max_tokens:
                raise WorkloadError(f"--output-tokens {self.output_tokens} and --max-tokens "
                                    f"{max_tokens} disagree: give one of them")
        if self.shared_prefix_tokens is not None:
            if self.shared_prefix_tokens < 1:
                raise WorkloadError("--shared-prefix-tokens must be at least 1")
            shortest = self.shortest_input
            if shortest is not None and self.shared_prefix_tokens >= shortest:
                least = " (the shortest of the spread)" if self.input_spread else ""
                what = (" (the agent preset's system prompt, unless given)"
                        if self.preset == AGENT else "")
                raise WorkloadError(f"--shared-prefix-tokens {self.shared_prefix_tokens}{what} "
                                    f"must be below --input-tokens {shortest}{least}")
        if self.input_tokens is not None and self.dataset is not None:
            what = f"--workload {self.preset}" if self.preset else "--input-tokens"
            raise WorkloadError(f"{what} and --dataset exclude each other: a dataset's prompts "
                                "are sent as they are, never padded or cut (the report gives "
                                "their lengths as the server counted them)")
        self._validate_agent()
        if not 0 <= self.warmup <= MAX_WARMUP:
            raise WorkloadError(f"--warmup must be between 0 and {MAX_WARMUP}")

    def _validate_agent(self) -> None:
        if not 1 <= self.turns <= MAX_TURNS:
            raise WorkloadError(f"--turns must be between 1 and {MAX_TURNS}")
        if not 0 <= self.think_time_ms <= MAX_THINK_TIME_MS:  # NaN fails it too
            raise WorkloadError(f"--think-time-ms must be between 0 and {MAX_THINK_TIME_MS}")
        if self.think_time_ms and self.turns == 1:
            raise WorkloadError("--think-time-ms needs --turns above 1 (the pause is between "
                                "a conversation's turns)")
        if self.mix is not None:
            if not self.mix or any(kind not in SESSION_KINDS for kind in self.mix):
                raise WorkloadError("a session mix lists kinds among "
                                    + ", ".join(SESSION_KINDS))
            if TOOL_SESSION in self.mix and self.tools is None:
                raise WorkloadError("a mix with tool sessions needs tools")
            if STRUCTURED_SESSION in self.mix and self.structured_output is None:
                raise WorkloadError("a mix with structured-output sessions needs a schema")

    @property
    def sized(self) -> bool:
        return self.input_tokens is not None or self.shared_prefix_tokens is not None

    @property
    def turns_flag(self) -> str:
        """The option a refusal of conversations names: the preset's, when it set them."""
        return f"--workload {AGENT}" if self.preset == AGENT else "--turns"


def apply_workload_preset(workload: Workload, name: str, *, api: str = "chat") -> Workload:
    """`workload` with preset `name`'s values wherever it leaves them unset (None; for turns
    and think time, their defaults 1 and 0): the lengths of chat, rag and long; for agent also
    the system prompt (``shared_prefix_tokens``), the turns, the think time, the built-in tools
    and schema, and the mix. What is set stays: an option given overrides the preset. Over an
    `api` with no ``response_format`` (``apis.STRUCTURED_OUTPUT_APIS``) the agent's mix has no
    structured-output sessions and no schema is sent, unless one was given.
    WorkloadError (one line) for a name not in ``WORKLOAD_PRESETS``."""
    if name not in PRESETS:
        raise WorkloadError(f"--workload {name!r}: expected one of {', '.join(PRESETS)}")
    tokens_in, tokens_out, _ = PRESETS[name]
    changes: dict[str, Any] = {"preset": name}
    if workload.input_tokens is None:
        changes["input_tokens"] = tokens_in
    if workload.output_tokens is None:
        changes["output_tokens"] = tokens_out
    if name == AGENT:
        from .agent_load import BUILTIN, load_schema, load_tools

        preset = AGENT_PRESET
        if workload.shared_prefix_tokens is None:
            changes["shared_prefix_tokens"] = preset.system_prompt_tokens
        if workload.turns == 1:
            changes["turns"] = preset.turns
        if not workload.think_time_ms:
            changes["think_time_ms"] = preset.think_time_ms
        if workload.tools is None:
            changes["tools"] = load_tools(BUILTIN, preset.tool_choice)
        schema = api in STRUCTURED_OUTPUT_APIS or workload.structured_output is not None
        if workload.structured_output is None and schema:
            changes["structured_output"] = load_schema(BUILTIN)
        if workload.mix is None:
            changes["mix"] = (preset.mix if schema else
                              tuple(kind for kind in preset.mix if kind != STRUCTURED_SESSION))
    return replace(workload, **changes)

