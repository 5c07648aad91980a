"""The one table of an endpoint's scan-profile fields: what each is called, its bounds, the
site's maximum, its label and help, and the `tokvera scan` option the grader's messages name.

Everything about a field but its model column derives from its row: the site's check and the
words of its refusal (profile.validate_profile), the grader's messages in the site's words, the
form's labels, help, widget min/max and minimum validators, the profile errors shown at a field
(scans/pages/forms.py), the API's fields, minimums and schema bounds (scans/api/endpoints.py),
the workload fieldset of the form's template, the Workload a scan runs and what a report's plan
compares (profile.py). A new workload option is one row here, plus the model field and its
migration (and the grader's own option it names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from scans.endpoints.limits import (
    SITE_MAX_DATASET_BYTES,
    SITE_MAX_DATASET_PROMPTS,
    SITE_MAX_LEVEL,
    SITE_MAX_REQUESTS_PER_SCAN,
)
from scans.grader import AGENT_PRESET, APIS, DEFAULT_SEARCH_LEVELS, MAX_SEARCH_LEVELS

# How most site maxima are refused (profile.validate_profile): "input tokens can be at most
# 32,768 here".
AT_MOST = "{words} can be at most {maximum:,} here"


@dataclass(frozen=True)
class ProfileField:
    name: str  # the Endpoint field; the API and the form name it so too
    words: str  # how the site's messages name it, in the middle of a sentence
    label: str
    help: str = ""
    flag: str = ""  # the `tokvera scan` option whose name the grader's messages use
    group: str = "plan"  # "plan", "workload", "capacity" or "price"
    # or "switch" (a box to tick), "choice" (one of `choices`), "dataset" (a secret: JSONL text)
    kind: str = "number"
    choices: tuple[str, ...] = ()
    minimum: int | float | None = None
    above_minimum: bool = False  # the minimum itself is refused too (a timeout of 0 s)
    maximum: int | float | None = None  # the most any scan may have here
    # How the site refuses a value above `maximum`, when it checks it itself (blank: the
    # engine's own rules or another limit hold it there, e.g. the requests per scan).
    too_big: str = ""
    blank_is: int | None = None  # what the scan runs with when the field is left blank

    def too_high(self, value: float | None) -> bool:
        return value is not None and self.maximum is not None and value > self.maximum

    def out_of_bounds(self, value: float) -> bool:
        return ((self.minimum is not None and value < self.minimum)
                or (self.above_minimum and value == self.minimum) or self.too_high(value))

    def refusal(self) -> str:
        """The words of a value above the maximum (for rows with `too_big`)."""
        return self.too_big.format(words=self.words, minimum=self.minimum, maximum=self.maximum)

    def schema_bounds(self) -> dict:
        """The JSON schema keywords of its bounds (the API's request bodies)."""
        bounds: dict = {}
        if self.minimum is not None:
            bounds["exclusiveMinimum" if self.above_minimum else "minimum"] = self.minimum
        if self.maximum is not None:
            bounds["maximum"] = self.maximum
        return bounds

    def widget_bounds(self) -> dict:
        """The form input's min and max attributes (an exclusive minimum has none)."""
        bounds: dict = {}
        if self.minimum is not None and not self.above_minimum:
            bounds["min"] = self.minimum
        if self.maximum is not None:
            bounds["max"] = self.maximum
        return bounds


# The agent workload's help: the grader's preset, in the site's words.
_PRESET = AGENT_PRESET
AGENT_HELP = (
    f"Load shaped like an agent's: conversations of {_PRESET.turns} turns, "
    f"{_PRESET.think_time_ms:,.0f} ms apart, that resend their history over one "
    f"{_PRESET.system_prompt_tokens:,}-token system prompt; each session calls tools, answers in "
    "JSON to a schema or chats. The page shows how many tool calls and JSON replies were valid "
    "at each level (measured, not graded). Prompt and reply lengths left blank take the "
    f"preset's ({_PRESET.input_tokens:,} tokens for the first turn, {_PRESET.output_tokens:,} "
    "per reply). Chat completions, the Responses API or Anthropic Messages (which has no JSON "
    "schema: its sessions call tools or chat).")

# Table order is the order the site checks its maxima in, the workload fieldset's order, and
# the order a profile error's field is looked up in (the capacity search before its levels:
# "the capacity search's levels …" is shown at the search's box).
FIELDS = (
    ProfileField(
        "api", "the API", "API the load speaks", flag="--api", group="workload", kind="choice",
        choices=APIS,
        help="Default chat completions (/chat/completions); or /completions, OpenAI's "
             "/responses, Anthropic's /messages, or /embeddings (latency and throughput: an "
             "embedding has no first token). Another API is another load: the charts start a "
             "new line."),
    ProfileField(
        "agent_workload", "the agent workload", "Agent workload", flag="--workload agent",
        group="workload", kind="switch", help=AGENT_HELP),
    ProfileField(
        "requests_per_level", "requests per level", "Requests per level",
        help="Blank: at least 20, and four rounds of each level.",
        flag="--requests", minimum=1, maximum=SITE_MAX_REQUESTS_PER_SCAN),
    ProfileField(
        "timeout_s", "the timeout", "Timeout per request (s)", flag="--timeout",
        minimum=0, above_minimum=True, maximum=300.0,
        help="Default 60 s: a request that has not finished by then counts as failed. Raise it "
             "for long replies on a slow server, up to {maximum:g} s.",
        too_big="{words} can be at most {maximum:g} s here"),
    ProfileField(
        "max_tokens", "max tokens", "Max tokens", flag="--max-tokens", minimum=1,
        maximum=4096,
        help="A ceiling on each reply (default 128: a chat answer's length, enough to measure "
             "the generation rate); replies end where the model stops.",
        too_big="{words} can be at most {maximum} here"),
    ProfileField(
        "input_tokens", "input tokens", "Prompt length (tokens)", flag="--input-tokens",
        group="workload", minimum=1, maximum=32_768, too_big=AT_MOST,
        help="Each prompt is this long as the server counts it (at most {maximum:,}). Blank: "
             "built-in prompts or the dataset's."),
    ProfileField(
        "output_tokens", "output tokens", "Reply length (tokens)", flag="--output-tokens",
        group="workload", minimum=1, maximum=4096, too_big=AT_MOST,  # max tokens' own maximum
        help="Every reply this long (at most {maximum:,}), where the server accepts ignore_eos "
             "or min_tokens; it replaces max tokens. Blank: replies end where the model stops."),
    ProfileField(
        "shared_prefix_tokens", "shared prefix tokens", "Shared prefix (tokens)",
        flag="--shared-prefix-tokens", group="workload", minimum=1,
        maximum=32_768,  # below the prompt length, which the site holds to its own maximum
        help="The first tokens of every prompt are the same (a system prompt); below the prompt "
             "length. Blank: none."),
    ProfileField(
        "warmup", "warm-up", "Warm-up requests per level", flag="--warmup", group="workload",
        minimum=0, maximum=100, blank_is=0,
        too_big="{words} can be at most {maximum} requests per level here",
        help="Requests sent before each level, not counted (at most {maximum}). Blank: none."),
    ProfileField(
        "load_dataset", "a dataset", "Load dataset", flag="--dataset", group="workload",
        kind="dataset",
        help="Prompts the load sends instead of built-in ones, as tokvera scan --dataset reads "
             'them: JSONL, one {{"prompt": "..."}} or {{"messages": [...]}} per line (UTF-8, at '
             f"most {SITE_MAX_DATASET_BYTES // (1024 * 1024)} MB, {SITE_MAX_DATASET_PROMPTS:,} "
             "prompts). Stored encrypted, never shown again."),
    ProfileField(
        "capacity_search", "the capacity search", "Find the capacity within the SLO",
        group="capacity", kind="switch",
        help="After the levels, each scan searches for the most concurrent streams that meet "
             "the TTFT and error-rate targets above (95% of requests within them). Not graded. "
             "The search's requests count against the site's per-scan limits."),
    ProfileField(
        "capacity_search_levels", "the capacity search's levels",
        "Capacity search: at most this many extra levels", flag="--search-levels",
        group="capacity", minimum=1, maximum=MAX_SEARCH_LEVELS,
        help=f"From {{minimum}} to {{maximum}} (default {DEFAULT_SEARCH_LEVELS}); at most "
             f"{SITE_MAX_LEVEL} streams."),
    ProfileField(
        "capacity_alert_below", "a capacity alert", "Alert when the capacity drops below (streams)",
        group="capacity", minimum=1, maximum=SITE_MAX_LEVEL,
        too_big="{words} threshold is from {minimum} to {maximum} streams",
        help="One alert when a scan finds fewer, one when it recovers. Blank: no capacity alert."),
    ProfileField("price_input_per_mtok", "prices", "Price per million input tokens (USD)",
                 group="price", minimum=0,
                 help="Blank: no cost figures (with both prices, the report gives the cost of "
                      "1,000 requests)."),
    ProfileField("price_output_per_mtok", "prices", "Price per million output tokens (USD)",
                 group="price", minimum=0, help="Blank: no cost figures."),
)

BY_NAME = {field.name: field for field in FIELDS}


def maximum_of(name: str) -> int | float:
    """The site's maximum of a field that has one."""
    maximum = BY_NAME[name].maximum
    if maximum is None:
        raise LookupError(f"{name} has no maximum")
    return maximum


def group(name: str, kind: str | None = None) -> tuple[ProfileField, ...]:
    """The rows of a group (of one kind only, when given), in table order."""
    return tuple(field for field in FIELDS
                 if field.group == name and (kind is None or field.kind == kind))


def names(group_name: str, kind: str | None = None) -> tuple[str, ...]:
    return tuple(field.name for field in group(group_name, kind))


def help_text(field: ProfileField) -> str:
    return field.help.format(minimum=field.minimum, maximum=field.maximum)


def in_site_words(message: str) -> str:
    """A grader message (which names the command line's options) in the site's words."""
    for field in FIELDS:
        if field.flag:  # a whole option: --api, not the start of --api-key-env
            message = re.sub(re.escape(field.flag) + r"(?![\w-])", field.words, message)
    return message


def field_named_by(message: str, candidates: tuple[ProfileField, ...]) -> str | None:
    """The field of `candidates` a one-line profile error is about: the first whose words
    begin it (articles aside), else None."""
    subject = _without_article(message.lower())
    for field in candidates:
        if subject.startswith(_without_article(field.words)):
            return field.name
    return None


def _without_article(words: str) -> str:
    for article in ("a ", "the "):
        if words.startswith(article):
            return words[len(article):]
    return words
