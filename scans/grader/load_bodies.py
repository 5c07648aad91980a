"""The request bodies of one scan (``LoadBodies``): each prompt's text with its nonce, the
filler that pads a prompt to the length sized for it, and the JSON encoded once per prompt.

A nonce on every prompt, always: ``[SSSSSSSSSS-RRRRRR]`` (ten digits for the scan, six for the
request) starts each prompt's text, after the shared prefix when there is one (which the
Messages API sends as its ``system`` prompt: ``apis.prompt_messages``). A conversation
sends the shared prefix once, as its first (system) message, and each turn's user message
starts at its nonce (``turn_messages``). No scan is then
served from an earlier scan's prefix cache and no two requests of a scan share a prefix by
accident. Fixed-width digits keep its token count the same for every request (tokenizers
split digits into fixed groups).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .apis import prompt_messages, request_body, shape_fields
from .openai_chat import encode_body
from .workload import Dataset, InputSpread

__all__ = ["ASK", "LoadBodies", "filler", "filler_chars", "nonce_text"]

ASK = "Read the notes below, then summarize them.\n"
_FILLER = (
    " the", " river", " carried", " small", " stones", " past", " an", " old", " mill", " where",
    " people", " met", " each", " morning", " to", " trade", " bread", " and", " news", " about",
    " weather", " roads", " prices", " children", " plans", " for", " winter", " harvest",
    " markets", " songs", " boats", " bridges", " lamps", " letters", " gardens", " tools",
)
_MARK = "TOKVERA0NONCE0MARK"
#: Between anchors, word counts this far either side of the interpolated guess are weighed.
SPREAD_SEARCH = 8


def nonce_text(scan: int, request: int) -> str:
    return f"[{scan:010d}-{request % 1_000_000:06d}]"


def filler(words: int, offset: int = 0) -> str:
    n = len(_FILLER)
    return "".join(_FILLER[(offset + i) % n] for i in range(words))


_CYCLE_CHARS = sum(len(w) for w in _FILLER)
_PARTIAL_CHARS = [sum(len(w) for w in _FILLER[:i]) for i in range(len(_FILLER) + 1)]


def filler_chars(words: int) -> int:
    """len(filler(words)), without building it."""
    full, rest = divmod(words, len(_FILLER))
    return full * _CYCLE_CHARS + _PARTIAL_CHARS[rest]


# -- the bodies ----------------------------------------------------------------------------------

class LoadBodies:
    """The request bodies of one scan: ``body(n)`` is the n-th request's (the nonce carries
    n). Bodies whose only difference is the nonce are encoded once and spliced."""

    def __init__(self, model: str, max_tokens: int, scan_nonce: int, *,
                 params: Mapping[str, Any] | None = None, prefix: str = "",
                 text: str | None = None, dataset: Dataset | None = None,
                 prompts: tuple[str, ...] | None = None, builtin: Callable[[int], str],
                 spread: tuple[InputSpread, tuple[tuple[int, int], ...],
                               tuple[float, float, float] | None] | None = None,
                 extra: Mapping[str, Any] | None = None, api: str = "chat") -> None:
        self.model = model
        self.api = api  # which API's body (apis.request_body)
        self.max_tokens = max_tokens
        self.scan_nonce = scan_nonce
        self.params = dict(params or {})
        # tools / tool_choice / response_format: part of every body, sizing's probes included
        # (a server renders tools into the prompt it counts).
        self.extra = dict(extra or {})
        self.prefix = prefix
        self.text = text          # a sized prompt's text after the nonce (same for all)
        self.dataset = dataset
        self.prompts = prompts
        self.builtin = builtin
        # An input spread and its sized anchors, (tokens, filler words), ascending.
        self.spread = spread
        self._templates: dict[int, tuple[bytes, bytes] | None] = {}
        self._spread_templates: dict[int, tuple[bytes, bytes] | None] = {}
        self._unprefixed: LoadBodies | None = None

    def with_changes(self, **changes: Any) -> LoadBodies:
        fields: dict[str, Any] = {"params": self.params, "prefix": self.prefix,
                                  "text": self.text, "dataset": self.dataset,
                                  "prompts": self.prompts, "builtin": self.builtin,
                                  "max_tokens": self.max_tokens, "spread": self.spread,
                                  "extra": self.extra, "api": self.api}
        fields.update(changes)
        max_tokens = fields.pop("max_tokens")
        return LoadBodies(self.model, max_tokens, self.scan_nonce, **fields)

    def _own(self, request: int, index: int | None = None) -> str:
        """Request `request`'s text after the shared prefix: its nonce, then its prompt."""
        index = request if index is None else index
        nonce = nonce_text(self.scan_nonce, request)
        if self.spread is not None:
            return f"{nonce} {ASK}{filler(self.words_for(request))}"
        if self.text is not None:
            return f"{nonce} {self.text}"
        if self.prompts:
            return f"{nonce} {self.prompts[index % len(self.prompts)]}"
        return f"{nonce} {self.builtin(index)}"

    def _prompt(self, own: str) -> list[Mapping[str, Any]]:
        """A single prompt's messages: the shared prefix where the API keeps it, then `own`."""
        return list(prompt_messages(self.api, self.prefix, own))

    def _messages(self, marker: str, index: int) -> list[Mapping[str, Any]]:
        assert self.dataset is not None
        item = self.dataset.items[index % len(self.dataset.items)]
        first, rest = dict(item[0]), list(item[1:])
        *system, own = self._prompt(f"{marker} ")
        head = own["content"]
        content = first.get("content")
        if isinstance(content, list):
            first["content"] = [{"type": "text", "text": head}, *content]
        else:
            first["content"] = head + str(content)
        return [*system, first, *rest]

    def _body(self, messages: list[Mapping[str, Any]], conversation: bool = False) -> bytes:
        body = request_body(self.api, self.model, messages, self.max_tokens,
                            conversation=conversation)
        body.update(self.params)
        body.update(shape_fields(self.api, self.extra))
        return encode_body(body)

    def turn_body(self, history: list[Mapping[str, Any]],
                  messages: list[Mapping[str, Any]]) -> bytes:
        """A conversation's next request: the `history` so far, then `messages` (the turn's
        own prompt, ``messages(request)``). Encoded whole: the history differs per session."""
        return self._body([*history, *messages], conversation=True)

    def _template(self, key: int, messages: list[Mapping[str, Any]]) -> tuple[bytes, bytes] | None:
        if key not in self._templates:
            encoded = self._body(messages)
            parts = encoded.split(_MARK.encode())
            self._templates[key] = (parts[0], parts[1]) if len(parts) == 2 else None
        return self._templates[key]

    def words_for(self, request: int) -> int:
        """Filler words for request `request` under an input spread: a first guess between the
        two sized anchors around its drawn length, then the nearby word count the fitted
        length model (``sizing._fit_lengths``) says comes closest."""
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
        return min(window, key=lambda k: (abs(a + b * k + c * filler_chars(k) - target),
                                          abs(k - guess)))

    def body(self, request: int, index: int | None = None) -> bytes:
        index = request if index is None else index
        nonce = nonce_text(self.scan_nonce, request).encode()
        if self.spread is not None:
            words = self.words_for(request)
            if words not in self._spread_templates:
                encoded = self._body(self._prompt(f"{_MARK} {ASK}{filler(words)}"))
                parts = encoded.split(_MARK.encode())
                self._spread_templates[words] = (parts[0], parts[1]) if len(parts) == 2 else None
            template = self._spread_templates[words]
            if template is not None:
                return template[0] + nonce + template[1]
            return self._body(self._prompt(self._own(request, index)))
        if self.dataset is not None:
            key = index % len(self.dataset.items)
            template = self._template(key, self._messages(_MARK, key))
            if template is None:
                return self._body(self._messages(nonce.decode(), key))
            return template[0] + nonce + template[1]
        if self.text is not None:
            template = self._template(-1, self._prompt(f"{_MARK} {self.text}"))
            if template is not None:
                return template[0] + nonce + template[1]
        return self._body(self._prompt(self._own(request, index)))

    def messages(self, request: int) -> list[Mapping[str, Any]]:
        """The messages of request `request` (what /tokenize is asked about)."""
        if self.dataset is not None:
            return self._messages(nonce_text(self.scan_nonce, request), request)
        return self._prompt(self._own(request))

    def turn_messages(self, request: int, first: bool) -> list[Mapping[str, Any]]:
        """A conversation turn's own messages (request `request`): with a shared prefix, the
        session's `first` turn sends it once, as the system message, then its user message;
        a later turn only its user message (the history holds the system prompt). Each user
        message starts at its nonce, which keeps sessions apart behind the shared prompt."""
        if not self.prefix:
            return self.messages(request)
        if self._unprefixed is None:
            self._unprefixed = self.with_changes(prefix="")
        own = self._unprefixed.messages(request)
        if not first:
            return own
        return [{"role": "system", "content": self.prefix.rstrip("\n")}, *own]

