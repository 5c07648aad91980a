"""What the load sends (issue 21): the prompts and reply lengths users really send.

* **A nonce on every prompt**, always: ``[SSSSSSSSSS-RRRRRR]`` (ten digits for the scan, six for
  the request) starts each prompt's text, after the shared prefix when there is one. No scan
  is then served from an earlier scan's prefix cache and no two requests of a scan share a
  prefix by accident. Fixed-width digits keep its token count the same for every request
  (tokenizers split digits into fixed groups).
* **Reply length** (``output_tokens``): ``max_tokens`` M, plus ``ignore_eos`` and ``min_tokens``
  M where the server accepts them. A probe before the load finds out (outside the preflight's
  stop rule: a 400 for an unknown parameter is not a dead endpoint); what it refuses is never
  sent, so no request of the load fails because of it, and the report says whether the length
  was enforced.
* **Prompt length** (``input_tokens``): each prompt is N tokens as the server counts them,
  chat template included, within ``tolerance(N)``. Counted, preferred first, by the server's
  ``/tokenize`` (vLLM: ``messages``, template included; llama.cpp: ``content``, plus the template
  overhead measured once with a probe), else by probes (``max_tokens`` 1, ``usage.prompt_tokens``):
  two counts give the tokens per filler word and the fixed part, then corrections until within
  tolerance. A server with neither usage nor ``/tokenize`` is refused: a guess would be reported
  as a length it is not (DECISIONS.md, 2026-12-01).
* **Shared prefix** (``shared_prefix_tokens``): the first P tokens are the same for every
  request of the scan; the nonce follows them.
* **Dataset** (``--dataset FILE``): JSONL prompts sent as the load, cycled, nonce prepended to
  the first message. Never sized: ``--input-tokens`` with a dataset is refused (DECISIONS.md).
* **A spread of prompt lengths** (``--input-tokens N±SD`` or ``MIN-MAX``): each request draws its
  own length (seeded by its index, normal within ±3 SD or uniform); five anchor lengths are
  sized as above, and each request's filler is chosen by a model fitted to every sizing count
  (tokens = a + b·words + c·characters), near the anchors' interpolation.
* **Presets** (``--workload chat|rag|long``): input and output lengths after Artificial
  Analysis's shapes (``PRESETS``), written out in the report.

Sizing results are kept per plan (``_SIZING_CACHE``) and checked with one count on reuse.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import secrets
import statistics
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .openai_chat import chat_request_body, encode_body
from .sse import SSEDecoder
from .stream import StreamParser, StreamTally

__all__ = [
    "MAX_DATASET_BYTES",
    "MAX_DATASET_LINES",
    "PRESETS",
    "Dataset",
    "DatasetError",
    "InputSpread",
    "LoadBodies",
    "PreparedWorkload",
    "Workload",
    "WorkloadError",
    "load_dataset",
    "nonce_text",
    "parse_input_tokens",
    "prepare_workload",
    "tolerance",
]

MAX_DATASET_BYTES = 64 * 1024 * 1024
MAX_DATASET_LINES = 100_000
MAX_INPUT_TOKENS = 10_000_000
MAX_WARMUP = 10_000
#: Output-length probe: at most this many tokens (enough to see a length held).
OUTPUT_PROBE_TOKENS = 16
#: Corrections after the first two counts before sizing gives up.
SIZING_ROUNDS = 8
ASK = "Read the notes below, then summarize them.\n"
_FILLER = (
    " the", " river", " carried", " small", " stones", " past", " an", " old", " mill", " where",
    " people", " met", " each", " morning", " to", " trade", " bread", " and", " news", " about",
    " weather", " roads", " prices", " children", " plans", " for", " winter", " harvest",
    " markets", " songs", " boats", " bridges", " lamps", " letters", " gardens", " tools",
)
_MARK = "TOKVERA0NONCE0MARK"
_SIZING_CACHE: dict[tuple, tuple[int, int]] = {}
_SIZING_CACHE_MAX = 256


class WorkloadError(ValueError):
    """The workload cannot be sent as asked; the message is one line meant for the user."""


class DatasetError(WorkloadError):
    """A --dataset file that cannot be used (the message names the file and the line)."""


def tolerance(tokens: int) -> int:
    """How far a sized prompt may be from the length asked: max(2, 1 %)."""
    return max(2, math.ceil(tokens * 0.01))


def nonce_text(scan: int, request: int) -> str:
    return f"[{scan:010d}-{request % 1_000_000:06d}]"


def _filler(words: int, offset: int = 0) -> str:
    n = len(_FILLER)
    return "".join(_FILLER[(offset + i) % n] for i in range(words))


_CYCLE_CHARS = sum(len(w) for w in _FILLER)
_PARTIAL_CHARS = [sum(len(w) for w in _FILLER[:i]) for i in range(len(_FILLER) + 1)]


def _filler_chars(words: int) -> int:
    """len(_filler(words)), without building it."""
    full, rest = divmod(words, len(_FILLER))
    return full * _CYCLE_CHARS + _PARTIAL_CHARS[rest]


def _fit_lengths(points: list[tuple[int, int]]) -> tuple[float, float, float] | None:
    """Least squares of counted tokens = a + b·words + c·characters over the sizing counts
    (filler words differ in length, and a server may count by either), or None when the
    counts cannot fix three numbers."""
    rows = [(1.0, float(k), float(_filler_chars(k)), float(t)) for k, t in set(points)]
    if len(rows) < 4:
        return None
    m = [[sum(r[i] * r[j] for r in rows) for j in range(3)] + [sum(r[i] * r[3] for r in rows)]
         for i in range(3)]
    for col in range(3):  # Gaussian elimination with partial pivoting
        pivot = max(range(col, 3), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-9:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(3):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return m[0][3] / m[0][0], m[1][3] / m[1][1], m[2][3] / m[2][2]


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
PRESETS: dict[str, tuple[int, int, str]] = {
    "chat": (100, 300, "a chat turn (Artificial Analysis's 100 → 300)"),
    "rag": (4_000, 256, "a retrieved context and a short answer (4,000 → 256)"),
    "long": (10_000, 1_500, "a long document (Artificial Analysis's 10,000 → 1,500)"),
}
#: A spread is sized exactly at this many anchor lengths; the lengths between are interpolated.
SPREAD_ANCHORS = 5
#: Between anchors, word counts this far either side of the interpolated guess are weighed.
SPREAD_SEARCH = 8


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
                raise WorkloadError(f"--shared-prefix-tokens {self.shared_prefix_tokens} must be "
                                    f"below --input-tokens {shortest}{least}")
        if self.input_tokens is not None and self.dataset is not None:
            what = f"--workload {self.preset}" if self.preset else "--input-tokens"
            raise WorkloadError(f"{what} and --dataset exclude each other: a dataset's prompts "
                                "are sent as they are, never padded or cut (the report gives "
                                "their lengths as the server counted them)")
        if not 0 <= self.warmup <= MAX_WARMUP:
            raise WorkloadError(f"--warmup must be between 0 and {MAX_WARMUP}")

    @property
    def sized(self) -> bool:
        return self.input_tokens is not None or self.shared_prefix_tokens is not None


# -- the bodies ----------------------------------------------------------------------------------

class LoadBodies:
    """The request bodies of one scan: ``body(n)`` is the n-th request's (the nonce carries
    n). Bodies whose only difference is the nonce are encoded once and spliced."""

    def __init__(self, model: str, max_tokens: int, scan_nonce: int, *,
                 params: Mapping[str, Any] | None = None, prefix: str = "",
                 text: str | None = None, dataset: Dataset | None = None,
                 prompts: tuple[str, ...] | None = None, builtin: Callable[[int], str],
                 spread: tuple[InputSpread, tuple[tuple[int, int], ...],
                               tuple[float, float, float] | None] | None = None) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.scan_nonce = scan_nonce
        self.params = dict(params or {})
        self.prefix = prefix
        self.text = text          # a sized prompt's text after the nonce (same for all)
        self.dataset = dataset
        self.prompts = prompts
        self.builtin = builtin
        # An input spread and its sized anchors, (tokens, filler words), ascending.
        self.spread = spread
        self._templates: dict[int, tuple[bytes, bytes] | None] = {}
        self._spread_templates: dict[int, tuple[bytes, bytes] | None] = {}

    def with_changes(self, **changes: Any) -> LoadBodies:
        fields: dict[str, Any] = {"params": self.params, "prefix": self.prefix,
                                  "text": self.text, "dataset": self.dataset,
                                  "prompts": self.prompts, "builtin": self.builtin,
                                  "max_tokens": self.max_tokens, "spread": self.spread}
        fields.update(changes)
        max_tokens = fields.pop("max_tokens")
        return LoadBodies(self.model, max_tokens, self.scan_nonce, **fields)

    def content(self, request: int, index: int | None = None) -> str:
        """The first message's text of request `request` (prompt `index`, default the same)."""
        index = request if index is None else index
        nonce = nonce_text(self.scan_nonce, request)
        if self.spread is not None:
            return f"{self.prefix}{nonce} {ASK}{_filler(self.words_for(request))}"
        if self.text is not None:
            return f"{self.prefix}{nonce} {self.text}"
        if self.prompts:
            return f"{self.prefix}{nonce} {self.prompts[index % len(self.prompts)]}"
        return f"{self.prefix}{nonce} {self.builtin(index)}"

    def _messages(self, marker: str, index: int) -> list[Mapping[str, Any]]:
        assert self.dataset is not None
        item = self.dataset.items[index % len(self.dataset.items)]
        first, rest = dict(item[0]), list(item[1:])
        head = f"{self.prefix}{marker} "
        content = first.get("content")
        if isinstance(content, list):
            first["content"] = [{"type": "text", "text": head}, *content]
        else:
            first["content"] = head + str(content)
        return [first, *rest]

    def _body(self, messages: list[Mapping[str, Any]]) -> bytes:
        body = chat_request_body(self.model, messages, self.max_tokens)
        body.update(self.params)
        return encode_body(body)

    def _template(self, key: int, messages: list[Mapping[str, Any]]) -> tuple[bytes, bytes] | None:
        if key not in self._templates:
            encoded = self._body(messages)
            parts = encoded.split(_MARK.encode())
            self._templates[key] = (parts[0], parts[1]) if len(parts) == 2 else None
        return self._templates[key]

    def words_for(self, request: int) -> int:
        """Filler words for request `request` under an input spread: a first guess between the
        two sized anchors around its drawn length, then the nearby word count the fitted
        length model (``_fit_lengths``) says comes closest."""
        assert self.spread is not None
        spread, anchors, model = self.spread
        target = spread.target(request)
        below = [a for a in anchors if a[0] <= target] or [anchors[0]]
        above = [a for a in anchors if a[0] >= target] or [anchors[-1]]
        (t0, k0), (t1, k1) = below[-1], above[0]
        guess = k0 if t1 == t0 else max(0, round(k0 + (target - t0) * (k1 - k0) / (t1 - t0)))
        if model is None:
            return guess
        a, b, c = model
        window = range(max(0, guess - SPREAD_SEARCH), guess + SPREAD_SEARCH + 1)
        return min(window, key=lambda k: (abs(a + b * k + c * _filler_chars(k) - target),
                                          abs(k - guess)))

    def body(self, request: int, index: int | None = None) -> bytes:
        index = request if index is None else index
        nonce = nonce_text(self.scan_nonce, request).encode()
        if self.spread is not None:
            words = self.words_for(request)
            if words not in self._spread_templates:
                encoded = self._body([{"role": "user", "content":
                                       f"{self.prefix}{_MARK} {ASK}{_filler(words)}"}])
                parts = encoded.split(_MARK.encode())
                self._spread_templates[words] = (parts[0], parts[1]) if len(parts) == 2 else None
            template = self._spread_templates[words]
            if template is not None:
                return template[0] + nonce + template[1]
            return self._body([{"role": "user", "content": self.content(request, index)}])
        if self.dataset is not None:
            key = index % len(self.dataset.items)
            template = self._template(key, self._messages(_MARK, key))
            if template is None:
                return self._body(self._messages(nonce.decode(), key))
            return template[0] + nonce + template[1]
        if self.text is not None:
            template = self._template(-1, [{"role": "user",
                                            "content": f"{self.prefix}{_MARK} {self.text}"}])
            if template is not None:
                return template[0] + nonce + template[1]
        return self._body([{"role": "user", "content": self.content(request, index)}])

    def messages(self, request: int) -> list[Mapping[str, Any]]:
        """The messages of request `request` (what /tokenize is asked about)."""
        if self.dataset is not None:
            return self._messages(nonce_text(self.scan_nonce, request), request)
        return [{"role": "user", "content": self.content(request)}]


# -- preparing it against the server -------------------------------------------------------------

@dataclass
class PreparedWorkload:
    """What a scan will send, once the server was asked (``prepare_workload``)."""

    workload: Workload
    max_tokens: int
    scan_nonce: int
    sizing: str = "builtin"
    sizing_detail: str | None = None
    sent: list[str] = field(default_factory=lambda: ["max_tokens"])
    enforced: bool | None = None
    output_note: str = "max_tokens is a ceiling: each reply ends where the model stops"
    max_model_len: int | None = None
    sizing_requests: int = 0
    prompt_tokens_expected: int | None = None
    #: An input spread's sized anchors: (tokens asked, filler words).
    input_anchors: list[tuple[int, int]] = field(default_factory=list)

    def public_dict(self) -> dict:
        w = self.workload
        extra: dict[str, Any] = {}
        if w.preset is not None:
            tokens_in, tokens_out, what = PRESETS[w.preset]
            extra["preset"] = {"name": w.preset, "input_tokens": tokens_in,
                               "output_tokens": tokens_out, "what": what}
        if w.input_spread is not None:
            extra["input_distribution"] = {
                **w.input_spread.public_dict(),
                "sized_at": [tokens for tokens, _ in self.input_anchors],
                "note": "each request draws its own length; sized_at are lengths sized "
                        "against the server (as it counted them), those between interpolated"}
        return {
            "input_tokens": w.input_tokens,
            "output_tokens": w.output_tokens,
            "shared_prefix_tokens": w.shared_prefix_tokens,
            "max_tokens": self.max_tokens,
            "dataset": w.dataset.public_dict() if w.dataset is not None else None,
            "warmup": w.warmup,
            "nonce": {"scan": f"{self.scan_nonce:010d}",
                      "format": "[scan-request] at the start of every prompt's text, after "
                                "the shared prefix"},
            "sizing": self.sizing,
            "sizing_detail": self.sizing_detail,
            "sizing_requests": self.sizing_requests,
            "max_model_len": self.max_model_len,
            "output_length": {"enforced": self.enforced, "sent": list(self.sent),
                              "note": self.output_note},
            **extra,
        }


def initial_workload(workload: Workload, max_tokens: int, *,
                     scan_nonce: int | None = None) -> PreparedWorkload:
    prepared = PreparedWorkload(workload, max_tokens,
                                secrets.randbelow(10**10) if scan_nonce is None else scan_nonce)
    if workload.dataset is not None:
        prepared.sizing = "dataset"
    return prepared


def _root(base_url: str) -> str:
    return base_url[:-3] if base_url.endswith("/v1") else base_url


async def _post(client: httpx.AsyncClient, url: str, content: bytes,
                timeout: float) -> tuple[int | None, bytes]:
    """POST `content`; (status or None on no answer, body up to 1 MiB). Never raises."""
    try:
        async with asyncio.timeout(timeout):
            async with client.stream("POST", url, content=content, headers={
                    "content-type": "application/json"}) as response:
                body = bytearray()
                async for piece in response.aiter_bytes():
                    body += piece
                    if len(body) > 1024 * 1024:
                        break
                return response.status_code, bytes(body)
    except (TimeoutError, httpx.HTTPError):
        return None, b""


def _usage_of(body: bytes) -> StreamTally:
    decoder = SSEDecoder()
    parser = StreamParser()
    parser.feed(decoder.feed(body), 0.0)
    parser.feed(decoder.flush(), 0.0)
    return parser.tally


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


class _Sizer:
    """Counts prompt tokens as the server does, by /tokenize or by probes."""

    def __init__(self, plan_base: str, model: str, client: httpx.AsyncClient, timeout: float,
                 bodies: LoadBodies, chat_url: str) -> None:
        self.root = _root(plan_base)
        self.model = model
        self.client = client
        self.timeout = timeout
        self.bodies = bodies.with_changes(max_tokens=1, params={})
        self.chat_url = chat_url
        self.method: str | None = None
        self.flavour = "probe"   # or "vllm" (messages) or "llamacpp" (content)
        self.detail = ""
        self.overhead = 0
        self.requests = 0
        self.max_model_len: int | None = None

    def _probe_body(self, content: str) -> bytes:
        return encode_body(chat_request_body(self.model, [{"role": "user", "content": content}],
                                             1))

    async def probe_count(self, content: str) -> int | None:
        self.requests += 1
        status, body = await _post(self.client, self.chat_url, self._probe_body(content),
                                   self.timeout)
        if status is None or not 200 <= status < 300:
            return None
        return _usage_of(body).prompt_tokens

    async def _tokenize(self, payload: dict) -> Any:
        self.requests += 1
        status, body = await _post(self.client, f"{self.root}/tokenize",
                                   json.dumps(payload).encode(), self.timeout)
        return _json(body) if status is not None and 200 <= status < 300 else None

    async def detect(self, sample: str) -> None:
        """Choose the counting method: vLLM /tokenize, llama.cpp /tokenize, probes."""
        answer = await self._tokenize({"model": self.model, "add_generation_prompt": True,
                                       "messages": [{"role": "user", "content": sample}]})
        if isinstance(answer, dict) and type(answer.get("count")) is int:
            self.method, self.flavour = "tokenize", "vllm"
            limit = answer.get("max_model_len")
            self.max_model_len = limit if type(limit) is int and limit > 0 else None
            self.detail = "the server's /tokenize (messages, chat template included)"
            return
        answer = await self._tokenize({"content": sample})
        if isinstance(answer, dict) and isinstance(answer.get("tokens"), list):
            raw = len(answer["tokens"])
            counted = await self.probe_count(sample)
            self.method, self.flavour = "tokenize", "llamacpp"
            if counted is not None:
                self.overhead = counted - raw
                self.detail = (f"the server's /tokenize (content) plus the chat template's "
                               f"{self.overhead} tokens, measured once")
            else:
                self.detail = ("the server's /tokenize (content); the chat template's overhead "
                               "could not be measured (no usage reported)")
            return
        if await self.probe_count(sample) is not None:
            self.method = "probe"
            self.detail = "probes with max_tokens 1, read from usage.prompt_tokens"
            return
        raise WorkloadError("cannot size prompts: the server reports no token usage and has "
                            "no /tokenize endpoint; drop --input-tokens and "
                            "--shared-prefix-tokens (tokvera needs the server's count)")

    async def count(self, content: str) -> int:
        if self.method == "tokenize":
            if self.flavour == "llamacpp":
                answer = await self._tokenize({"content": content})
                tokens = answer.get("tokens") if isinstance(answer, dict) else None
                if isinstance(tokens, list):
                    return len(tokens) + self.overhead
            else:
                answer = await self._tokenize({"model": self.model, "add_generation_prompt": True,
                                               "messages": [{"role": "user",
                                                             "content": content}]})
                if isinstance(answer, dict) and type(answer.get("count")) is int:
                    return answer["count"]
            raise WorkloadError(f"prompt sizing stopped: {self.root}/tokenize stopped answering")
        counted = await self.probe_count(content)
        if counted is None:
            raise WorkloadError("prompt sizing stopped: a probe request (max_tokens 1) failed "
                                "or reported no usage")
        return counted


async def _solve(count: Callable[[int], Awaitable[int]], target: int, what: str,
                 flag: str, below: Callable[[int], str] | None = None) -> tuple[int, int]:
    """The number of filler words k such that count(k) is within tolerance(target)."""
    tol = tolerance(target)
    base = await count(0)
    if target < base - tol:
        raise WorkloadError(below(base) if below else
                            f"{flag} {target} is below the prompt's fixed part: {base} tokens")
    if abs(base - target) <= tol:
        return 0, base
    k = max(1, target - base)  # first guess: one token per word
    counted = await count(k)
    for _ in range(SIZING_ROUNDS):
        if abs(counted - target) <= tol:
            return k, counted
        rate = (counted - base) / k if k else 0
        if rate <= 0:
            break
        k = max(0, k + round((target - counted) / rate))
        counted = await count(k)
    if abs(counted - target) <= tol:
        return k, counted
    raise WorkloadError(f"prompt sizing did not converge: {what} came to {counted} tokens for "
                        f"{target} asked (tolerance ±{tol}); the scan stops before the load")


async def _context_from_models(client: httpx.AsyncClient, base_url: str, model: str,
                               timeout: float) -> int | None:
    try:
        async with asyncio.timeout(timeout):
            response = await client.get(f"{base_url}/models")
    except (TimeoutError, httpx.HTTPError):
        return None
    data = _json(response.content) if response.status_code == 200 else None
    entries = data.get("data") if isinstance(data, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("id") == model:
            for key in ("max_model_len", "context_length", "context_window"):
                value = entry.get(key)
                if type(value) is int and value > 0:
                    return value
    return None


async def _output_length(prepared: PreparedWorkload, bodies: LoadBodies,
                         client: httpx.AsyncClient, url: str, timeout: float) -> dict:
    """Which of ignore_eos / min_tokens the server accepts, by a short probe per choice."""
    m = prepared.workload.output_tokens
    assert m is not None
    probe_m = min(m, OUTPUT_PROBE_TOKENS)
    tried: list[str] = []
    for params in ({"ignore_eos": True, "min_tokens": probe_m}, {"ignore_eos": True},
                   {"min_tokens": probe_m}):
        probe = bodies.with_changes(max_tokens=probe_m, params=params)
        prepared.sizing_requests += 1
        status, body = await _post(client, url, probe.body(990_000 + prepared.sizing_requests),
                                   timeout)
        if status is not None and 200 <= status < 300:
            tally = _usage_of(body)
            load_params = {k: (m if k == "min_tokens" else v) for k, v in params.items()}
            prepared.sent = ["max_tokens", *params]
            got = tally.completion_tokens
            if got is not None and got < probe_m and tally.finish_reason != "length":
                prepared.enforced = False
                prepared.output_note = (f"not enforced: the server accepted {' and '.join(params)}"
                                        f" but a {probe_m}-token probe stopped at {got}")
            else:
                prepared.enforced = True
                prepared.output_note = f"enforced with {' and '.join(params)} (max_tokens {m})"
            return load_params
        if status is None or status >= 500:
            prepared.enforced = False
            prepared.output_note = ("not enforced: the probe for ignore_eos and min_tokens got "
                                    f"{'no answer' if status is None else f'HTTP {status}'}; "
                                    "max_tokens alone is sent")
            return {}
        tried.append(f"HTTP {status}")
    prepared.enforced = False
    prepared.sent = ["max_tokens"]
    prepared.output_note = ("not enforced: the server refused ignore_eos and min_tokens "
                            f"({', '.join(sorted(set(tried)))}); max_tokens alone is sent, so "
                            "replies may end early")
    return {}


def _check_context(prepared: PreparedWorkload, limit: int | None) -> None:
    """Refuse prompts (the longest of a spread) that with max_tokens exceed the context."""
    prepared.max_model_len = limit
    longest = prepared.workload.longest_input
    if limit is not None and longest is not None and longest + prepared.max_tokens > limit:
        raise WorkloadError(f"--input-tokens {longest} plus max_tokens "
                            f"{prepared.max_tokens} exceed the model's context of {limit:,} "
                            "tokens")


async def _size_spread(prepared: PreparedWorkload, bodies: LoadBodies, sizer: _Sizer,
                       prompt: Callable[[int, int], str]) -> LoadBodies:
    """Size an input spread: the shared prefix, then each anchor length exactly (not cached
    between scans: a handful of counts)."""
    w = prepared.workload
    spread = w.input_spread
    assert spread is not None
    prefix_words = 0
    if w.shared_prefix_tokens is not None:
        async def count_prefix(k: int) -> int:
            return await sizer.count(_filler(k, 7))
        prefix_words, _ = await _solve(count_prefix, w.shared_prefix_tokens,
                                       "the shared prefix", "--shared-prefix-tokens")

    points: list[tuple[int, int]] = []  # every (filler words, tokens counted): the fit's data

    async def count_prompt(k: int) -> int:
        counted = await sizer.count(prompt(prefix_words, k))
        points.append((k, counted))
        return counted

    def below(base: int) -> str:
        return (f"--input-tokens {spread.text()} reaches down to {spread.low}, below the "
                f"prompt's fixed part ({base} tokens: chat template, shared prefix, nonce and "
                "instruction)")

    anchors = []  # (tokens the server counted, filler words): interpolated between
    for tokens in spread.anchors():  # ascending: only the first can be below the fixed part
        words, counted = await _solve(count_prompt, tokens, f"the {tokens}-token prompt",
                                      "--input-tokens", below=below)
        anchors.append((counted, words))
    prepared.input_anchors = anchors
    prepared.prompt_tokens_expected = spread.center
    prepared.sizing = sizer.method or "probe"
    prepared.sizing_detail = sizer.detail
    prepared.sizing_requests += sizer.requests
    prefix = _filler(prefix_words, 7) + "\n" if prefix_words else ""
    return bodies.with_changes(prefix=prefix, text=None,
                               spread=(spread, tuple(anchors), _fit_lengths(points)))


async def prepare_workload(prepared: PreparedWorkload, bodies: LoadBodies, *,
                           client: httpx.AsyncClient, base_url: str, chat_url: str, model: str,
                           timeout: float) -> LoadBodies:
    """Ask the server what it needs to know (output-length parameters, prompt sizes, context)
    and return the load's bodies; raise WorkloadError (one line) before any load otherwise."""
    w = prepared.workload
    params: dict = {}
    if w.output_tokens is not None:
        params = await _output_length(prepared, bodies, client, chat_url, timeout)
    bodies = bodies.with_changes(params=params)
    if not w.sized:
        return bodies
    sizer = _Sizer(base_url, model, client, timeout, bodies, chat_url)
    sample = f"{nonce_text(prepared.scan_nonce, 0)} {ASK}"
    await sizer.detect(sample)
    limit = sizer.max_model_len or await _context_from_models(client, base_url, model,
                                                              min(timeout, 10.0))
    _check_context(prepared, limit)
    key = (base_url, model, w.input_tokens, w.shared_prefix_tokens, sizer.method)
    prefix = ""
    text = None
    cached = _SIZING_CACHE.get(key)
    sizing_nonce = nonce_text(prepared.scan_nonce, 0)

    def prompt(prefix_words: int, words: int) -> str:
        pre = _filler(prefix_words, 7) + "\n" if prefix_words else ""
        return f"{pre}{sizing_nonce} {ASK}{_filler(words)}"

    if w.input_spread is not None:
        return await _size_spread(prepared, bodies, sizer, prompt)

    if cached is not None and w.input_tokens is not None:
        counted = await sizer.count(prompt(*cached))
        if abs(counted - w.input_tokens) > tolerance(w.input_tokens):
            cached = None
    if cached is None:
        prefix_words = 0
        if w.shared_prefix_tokens is not None:
            async def count_prefix(k: int) -> int:
                return await sizer.count(_filler(k, 7))
            prefix_words, _ = await _solve(count_prefix, w.shared_prefix_tokens,
                                           "the shared prefix", "--shared-prefix-tokens")
        words = 0
        if w.input_tokens is not None:
            async def count_prompt(k: int) -> int:
                return await sizer.count(prompt(prefix_words, k))
            n = w.input_tokens
            words, _ = await _solve(
                count_prompt, n, "the prompt", "--input-tokens",
                below=lambda base: (f"--input-tokens {n} is below the prompt's fixed part "
                                    f"({base} tokens: chat template, shared prefix, nonce and "
                                    "instruction)"))
        cached = (prefix_words, words)
        if len(_SIZING_CACHE) >= _SIZING_CACHE_MAX:
            _SIZING_CACHE.pop(next(iter(_SIZING_CACHE)))
        _SIZING_CACHE[key] = cached
    prefix_words, words = cached
    if prefix_words:
        prefix = _filler(prefix_words, 7) + "\n"
    if w.input_tokens is not None:
        text = f"{ASK}{_filler(words)}"
        prepared.prompt_tokens_expected = w.input_tokens
    prepared.sizing = sizer.method or "probe"
    prepared.sizing_detail = sizer.detail
    prepared.sizing_requests += sizer.requests
    return bodies.with_changes(prefix=prefix, text=text)
