"""The user's prompt sample (``--prompts FILE``): loading and the repeat-prompt share.

The sample is read locally and never sent anywhere: it only feeds ``repeat_prompt_share``.
A file whose every non-empty line is JSON is JSONL (each line a string, ``{"prompt": ...}`` or
``{"messages": [...]}``); any other file is plain text, one prompt per non-empty line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "PromptSample",
    "PromptsFileError",
    "load_prompts_file",
    "parse_prompts_text",
    "normalize_prompt",
    "repeat_prompt_share",
]

_WHITESPACE = re.compile(r"\s+")
MAX_PROMPTS_FILE_BYTES = 512 * 1024 * 1024

#: A normalized prompt: a string, or a conversation as ((role, text), ...).
Prompt = str | tuple[tuple[str, str], ...]


class PromptsFileError(ValueError):
    """The prompts file cannot be used; the message is one line meant for the user."""


@dataclass(frozen=True)
class PromptSample:
    path: str
    format: str      # "jsonl" or "text"
    prompts: tuple[Prompt, ...]


def _squash(text: str) -> str:
    return _WHITESPACE.sub(" ", text.strip())


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: keep the text parts, in order
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return " ".join(parts)
    return "" if content is None else json.dumps(content, sort_keys=True)


def normalize_prompt(prompt: object) -> Prompt:
    """Whitespace-normalize a prompt: strip, collapse every run of whitespace to one space.
    A conversation (``{"messages": [...]}`` or a list of messages) is compared role by role."""
    if isinstance(prompt, str):
        return _squash(prompt)
    if isinstance(prompt, dict) and "messages" in prompt:
        prompt = prompt["messages"]
    if isinstance(prompt, dict) and isinstance(prompt.get("prompt"), str):
        return _squash(prompt["prompt"])
    if isinstance(prompt, list):
        turns = []
        for message in prompt:
            if not isinstance(message, dict):
                raise PromptsFileError("a message must be an object with a role and content")
            turns.append((_squash(str(message.get("role", ""))),
                          _squash(_content_text(message.get("content")))))
        return tuple(turns)
    raise PromptsFileError('expected a string, {"prompt": ...} or {"messages": [...]}')


def repeat_prompt_share(prompts: Sequence[object]) -> float | None:
    """Share of prompts that equal an earlier one after normalization; None for no prompts."""
    if not prompts:
        return None
    seen: set = set()
    repeats = 0
    for prompt in prompts:
        key = normalize_prompt(prompt) if not isinstance(prompt, str | tuple) else (
            _squash(prompt) if isinstance(prompt, str) else prompt)
        if key in seen:
            repeats += 1
        else:
            seen.add(key)
    return repeats / len(prompts)


def load_prompts_file(path: str | Path) -> PromptSample:
    """Read and normalize a prompts file. Raises PromptsFileError with one clear line for a
    missing or unreadable file, a file that is not UTF-8, an empty one or a bad JSONL line."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_PROMPTS_FILE_BYTES:
            raise PromptsFileError(f"prompts file {path} is larger than 512 MiB")
        raw = path.read_bytes()
    except PromptsFileError:
        raise
    except OSError as exc:
        raise PromptsFileError(
            f"cannot read prompts file {path}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise PromptsFileError(
            f"prompts file {path} is not UTF-8 text (invalid byte at line {line}); "
            "save it as UTF-8") from None
    return parse_prompts_text(text, source=f"prompts file {path}", path=str(path))


def parse_prompts_text(text: str, source: str = "the prompt sample",
                       path: str | None = None) -> PromptSample:
    """Parse a prompt sample already in memory (JSONL or plain text, as for a file).
    Raises PromptsFileError naming `source` when it has no prompt or a bad JSONL line."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise PromptsFileError(f"{source} has no prompts")
    parsed: list[object] = []
    for _, line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            break
    where = path or source
    if len(parsed) == len(lines):
        prompts = []
        for (number, _), item in zip(lines, parsed, strict=True):
            if not isinstance(item, str | dict) or (
                    isinstance(item, dict) and not isinstance(item.get("prompt"), str)
                    and not isinstance(item.get("messages"), list)):
                raise PromptsFileError(
                    f'{source}, line {number}: expected a string, '
                    '{"prompt": ...} or {"messages": [...]}')
            try:
                prompts.append(normalize_prompt(item))
            except PromptsFileError as exc:
                raise PromptsFileError(f"{source}, line {number}: {exc}") from None
        return PromptSample(where, "jsonl", tuple(prompts))
    return PromptSample(where, "text", tuple(_squash(line) for _, line in lines))
