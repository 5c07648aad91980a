"""What a scan will do: the scan plan, its defaults and its validation."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from urllib.parse import urlsplit

from .apis import API_PATHS, APIS
from .capacity import DEFAULT_SEARCH_LEVELS, MAX_SEARCH_LEVELS
from .objective import Slo, SloError
from .openloop import OpenLoop, OpenLoopError
from .replicas import BALANCE_POLICIES
from .trace_file import TraceError, TraceReplay
from .workload import AGENT, Workload, WorkloadError

__all__ = [
    "DEFAULT_LEVELS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TIMEOUT_S",
    "PlanError",
    "ScanPlan",
    "builtin_prompt",
    "default_requests",
]

DEFAULT_LEVELS: tuple[int, ...] = (1, 4, 16)
DEFAULT_MAX_TOKENS = 128
DEFAULT_TIMEOUT_S = 60.0
MAX_LEVEL = 4096


#: What an API cannot carry (the workload option, why): chat carries everything. Short, so
#: the one-line refusal fits the terminal.
_UNCARRIED: dict[str, dict[str, str]] = {
    "completions": {"--tools": "it has no tools",
                    "--json-schema": "it has no response_format"},
    "messages": {"--json-schema": "it has no response_format"},
}


class PlanError(ValueError):
    """A plan that cannot be run; the message is one line meant for the user."""


def default_requests(level: int) -> int:
    """Requests per level when none are given: at least 20 (so p95 at concurrency 1 rests on
    20 samples), and four rounds of the level's concurrency above that."""
    return max(20, 4 * level)


_TOPICS = (
    "the water cycle", "how a compiler works", "the history of the printing press",
    "photosynthesis", "the rules of chess", "how vaccines train the immune system",
    "plate tectonics", "the causes of inflation", "how a hash table works", "the French Revolution",
    "black holes", "how bread rises", "the TCP handshake", "the life of honey bees",
    "how batteries store energy", "the Silk Road", "how radar works", "coral reefs",
)
_ASKS = (
    "Explain {topic} to a curious twelve-year-old.",
    "Write a short essay about {topic}.",
    "List the five most important facts about {topic}, with one sentence on each.",
    "Describe {topic} as if you were teaching a class, step by step.",
)


def builtin_prompt(index: int) -> str:
    """The built-in load prompt for request `index`: every request of a scan gets a different
    one (the index is part of the text), so a prompt cache cannot flatter the latency."""
    topic = _TOPICS[index % len(_TOPICS)]
    ask = _ASKS[(index // len(_TOPICS)) % len(_ASKS)]
    return f"{ask.format(topic=topic)} (Request {index + 1}.)"


@dataclass(frozen=True)
class ScanPlan:
    """Everything a scan needs. The API key is held in memory only: it is excluded from
    ``repr`` and from comparisons, and nothing in the grader writes it anywhere but the
    ``Authorization`` header of requests to ``base_url``."""

    base_url: str
    model: str
    levels: tuple[int, ...] = DEFAULT_LEVELS
    requests: int | tuple[int, ...] | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    timeout_s: float = DEFAULT_TIMEOUT_S
    api_key: str | None = field(default=None, repr=False, compare=False)
    prompts: tuple[str, ...] | None = None
    dcgm_url: str | None = None
    use_nvidia_smi: bool = True
    price_input_per_mtok: Decimal | None = None
    price_output_per_mtok: Decimal | None = None
    extra_headers: tuple[tuple[str, str], ...] = ()
    #: What the load sends: sized prompts, reply lengths, a shared prefix, a
    #: dataset, warm-up. The default is built-in prompts capped by max_tokens (with a nonce).
    workload: Workload = field(default_factory=Workload)
    #: A service-level objective: attainment and goodput per level, not graded.
    slo: Slo | None = None
    #: After the plan's levels, search for the largest concurrency that meets `slo`.
    find_capacity: bool = False
    #: At most this many levels the search adds.
    search_levels: int = DEFAULT_SEARCH_LEVELS
    #: The search never tries a concurrency above this (the site passes its own limit).
    search_max_level: int = MAX_LEVEL
    #: At most this many requests the searched levels send, warm-up included; None: the
    #: command line's bound only (MAX_SEARCH_REQUESTS measured requests). The site passes
    #: what its per-scan limits leave after the plan's levels.
    search_max_requests: int | None = None
    #: Open-loop rate levels (--rate), after the others: measured, not graded.
    open_loop: OpenLoop | None = None
    #: More URLs of the same model (replicas); the load is spread over base_url and these.
    replicas: tuple[str, ...] = ()
    #: How requests are spread over the URLs (scans.grader.replicas.BALANCE_POLICIES).
    balance: str = "round-robin"
    #: A closed-loop level stops early when the server falls behind (scans.grader.saturation).
    stop_on_saturation: bool = False
    #: A trace replayed at its own times (--trace), last of all: measured, not graded.
    trace: TraceReplay | None = None
    #: The API the load speaks (scans.grader.apis.APIS): chat completions by default.
    api: str = "chat"

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        object.__setattr__(self, "replicas", tuple(url.rstrip("/") for url in self.replicas))
        object.__setattr__(self, "levels", tuple(self.levels))
        if isinstance(self.requests, Sequence):
            object.__setattr__(self, "requests", tuple(self.requests))

    # -- derived -------------------------------------------------------------------------------
    def requests_at(self, level: int) -> int:
        """How many requests the level `level` sends."""
        if self.requests is None:
            return default_requests(level)
        if isinstance(self.requests, int):
            return self.requests
        return self.requests[self.levels.index(level)]

    @property
    def requests_per_level(self) -> list[int]:
        return [self.requests_at(level) for level in self.levels]

    @property
    def chat_url(self) -> str:
        return f"{self.base_url}/chat/completions"

    @property
    def urls(self) -> tuple[str, ...]:
        """Every URL the load goes to: the base URL first, then the replicas."""
        return (self.base_url, *self.replicas)

    @property
    def chat_urls(self) -> tuple[str, ...]:
        return tuple(f"{url}/chat/completions" for url in self.urls)

    @property
    def request_urls(self) -> tuple[str, ...]:
        """Where the load's requests go: the API's path under every URL."""
        path = API_PATHS.get(self.api, API_PATHS["chat"])
        return tuple(f"{url}/{path}" for url in self.urls)

    @property
    def origin(self) -> str:
        parts = urlsplit(self.base_url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).hostname or ""

    def prompt(self, index: int) -> str:
        if self.prompts:
            return self.prompts[index % len(self.prompts)]
        return builtin_prompt(index)

    # -- validation ----------------------------------------------------------------------------
    def validate(self) -> ScanPlan:
        """Raise PlanError (one line) when the plan cannot run; return self otherwise."""
        self._validate_target()
        self._validate_levels()
        self._validate_limits()
        self._validate_slo()
        if self.open_loop is not None:
            try:
                self.open_loop.validate()
            except OpenLoopError as exc:
                raise PlanError(str(exc)) from None
            if self.workload.turns > 1:
                raise PlanError(f"{self.workload.turns_flag} with --rate: conversations run at "
                                "a concurrency of sessions, not at an open-loop rate")
        try:
            self.workload.validate(self.max_tokens)
        except WorkloadError as exc:
            raise PlanError(str(exc)) from None
        self._validate_trace()
        self._validate_api()
        return self

    def _validate_api(self) -> None:
        """What an API cannot carry is refused before any request, naming the option, the API
        and why: embeddings take their input as it is; the completions API has no tools and
        no response_format, the Messages API no response_format (``_UNCARRIED``)."""
        if self.api not in APIS:
            raise PlanError(f"--api {self.api!r}: expected one of {', '.join(APIS)}")
        if self.api == "chat":
            return
        w = self.workload
        if self.api == "embeddings":
            refused = [name for name, given in (
                (f"--workload {w.preset}", w.preset is not None),
                ("--tools", w.tools is not None),
                ("--json-schema", w.structured_output is not None),
                ("--turns", w.turns > 1),
                ("--dataset", w.dataset is not None),
                ("--input-tokens", w.input_tokens is not None or w.input_spread is not None),
                ("--shared-prefix-tokens", w.shared_prefix_tokens is not None),
                ("--trace", self.trace is not None),
            ) if given]
            if refused:
                raise PlanError(f"{refused[0]} with --api embeddings: its inputs are sent as "
                                "given")
        uncarried = _UNCARRIED.get(self.api, {})
        for flag, given in (("--tools", w.tools is not None),
                            ("--json-schema", w.structured_output is not None)):
            if given and flag in uncarried:
                named = f"--workload {w.preset}" if w.preset == AGENT else flag
                raise PlanError(f"{named} with --api {self.api}: {uncarried[flag]}")
        if self.api != "embeddings":
            return
        if w.output_tokens is not None:
            raise PlanError("--output-tokens with --api embeddings: an embedding has no reply")
        # An embedding has no stream: nothing reads a first token or a gap between chunks.
        streamed = [name for name in ("ttft_p95_ms", "itl_p95_ms")
                    if self.slo is not None and self.slo.target(name) is not None]
        if streamed:
            raise PlanError(f"--slo {streamed[0]} with --api embeddings: an embedding has no "
                            "stream (use e2e_p95_ms or error_rate)")
        if self.stop_on_saturation:
            raise PlanError("--stop-on-saturation with --api embeddings: it watches time to "
                            "first token, which an embedding does not have")

    def _validate_trace(self) -> None:
        if self.trace is None:
            return
        try:
            self.trace.validate()
        except TraceError as exc:
            raise PlanError(str(exc)) from None
        if self.workload.turns > 1:
            raise PlanError(f"{self.workload.turns_flag} with --trace: a trace's requests are "
                            "single prompts sent at its times, not conversations")

    def _validate_target(self) -> None:
        # Every replica is an origin of its own: the same rules as the base URL.
        for url in self.urls:
            _validate_url(url)
        if len(set(self.urls)) != len(self.urls):
            raise PlanError("the base URL and the --replica URLs must all differ")
        if self.balance not in BALANCE_POLICIES:
            raise PlanError(f"--balance {self.balance!r}: expected one of "
                            f"{', '.join(BALANCE_POLICIES)}")
        if not self.model or not self.model.strip():
            raise PlanError("a model name is required")

    def _validate_levels(self) -> None:
        levels = self.levels
        if not levels:
            raise PlanError("at least one concurrency level is required")
        if any(not isinstance(lv, int) or lv < 1 or lv > MAX_LEVEL for lv in levels):
            raise PlanError(f"concurrency levels must be integers from 1 to {MAX_LEVEL}")
        if levels[0] != 1:
            raise PlanError("concurrency levels must start at 1")
        if any(b <= a for a, b in zip(levels, levels[1:], strict=False)):
            raise PlanError("concurrency levels must be strictly ascending")
        if isinstance(self.requests, tuple) and len(self.requests) != len(levels):
            raise PlanError("one request count per level is required")
        if any(n < 1 for n in self.requests_per_level):
            raise PlanError("requests per level must be at least 1")
        for level, count in zip(levels, self.requests_per_level, strict=True):
            if count < level:  # it would never have `level` requests in flight
                raise PlanError(f"concurrency {level} needs at least {level} requests per "
                                f"level (got {count}): with fewer it never reaches {level} "
                                "requests in flight")

    def _validate_slo(self) -> None:
        if self.slo is not None:
            try:
                self.slo.validate()
            except SloError as exc:
                raise PlanError(str(exc)) from None
        if self.find_capacity and self.slo is None:
            raise PlanError("--find-capacity needs an SLO to search against: give --slo")
        if not 1 <= self.search_levels <= MAX_SEARCH_LEVELS:
            raise PlanError(f"--search-levels must be from 1 to {MAX_SEARCH_LEVELS}")
        if not 1 <= self.search_max_level <= MAX_LEVEL:
            raise PlanError(f"the search's highest concurrency must be from 1 to {MAX_LEVEL}")
        if self.search_max_requests is not None and self.search_max_requests < 1:
            raise PlanError("the search's request budget must be at least 1")

    def _validate_limits(self) -> None:
        if not 1 <= self.max_tokens <= 1_000_000:
            raise PlanError("max tokens must be between 1 and 1000000")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise PlanError("the timeout must be a positive number of seconds")
        for name in ("price_input_per_mtok", "price_output_per_mtok"):
            price = getattr(self, name)
            if price is not None and (not price.is_finite() or price < 0):
                raise PlanError("prices must be non-negative numbers (USD per million tokens)")
        if self.dcgm_url is not None:
            dcgm = urlsplit(self.dcgm_url)
            if dcgm.scheme not in ("http", "https") or not dcgm.hostname:
                raise PlanError(f"bad --dcgm-url {self.dcgm_url!r}: expected http(s)://host...")

    def public_dict(self) -> dict:
        """The plan as report.json records it (never the key); ``slo``, ``find_capacity``,
        ``open_loop`` and ``trace`` only when given."""
        extra: dict = {}
        if self.slo is not None:
            extra["slo"] = self.slo.public_dict()
        if self.find_capacity:
            extra["find_capacity"] = {"max_levels": self.search_levels,
                                      "max_concurrency": self.search_max_level,
                                      "max_requests": self.search_max_requests}
        if self.open_loop is not None:
            extra["open_loop"] = self.open_loop.public_dict()
        if self.replicas:
            extra["urls"] = list(self.urls)
            extra["balance"] = self.balance
        if self.stop_on_saturation:
            extra["stop_on_saturation"] = True
        if self.trace is not None:
            extra["trace"] = self.trace.public_dict()
        return {
            "api": self.api,
            "levels": list(self.levels),
            "requests_per_level": self.requests_per_level,
            "max_tokens": self.max_tokens,
            "timeout_s": self.timeout_s,
            "prompts": "built-in" if not self.prompts else f"{len(self.prompts)} given",
            "dcgm_url": self.dcgm_url,
            "price_input_per_mtok": _price(self.price_input_per_mtok),
            "price_output_per_mtok": _price(self.price_output_per_mtok),
            "authenticated": bool(self.api_key),
            **extra,
        }


def _validate_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PlanError(f"bad URL {url!r}: expected http(s)://host[:port]/path")
    if parts.username or parts.password:
        raise PlanError("bad URL: credentials in the URL are not accepted; "
                        "pass the key with --api-key-env")
    if parts.query or parts.fragment:
        raise PlanError(f"bad URL {url!r}: no query or fragment expected")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise PlanError(f"bad URL {url!r}: {exc}") from exc


def _price(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


def api_key_from_env(var: str | None) -> str | None:
    """The key from environment variable `var` (None when unset or empty)."""
    if not var:
        return None
    value = os.environ.get(var)
    return value or None
