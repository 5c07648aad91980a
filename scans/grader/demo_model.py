"""The demo server's toy model (demo_server.py): its tokenizer, its chat template and its
automatic prefix cache. Deterministic and cheap, and unlike one token per word, so prompt
sizing is tested against a count it cannot guess.
"""

from __future__ import annotations

import collections
import json
import re

__all__ = ["PrefixCache", "count_tokens", "render_chat", "tokenize", "tool_call_text"]


_TOKEN = re.compile(r"<\|[a-z_]+\|>| ?[A-Za-z]{1,4}|\d{1,3}|\s|[^\sA-Za-z\d]")


def tokenize(text: str) -> list[str]:
    """The target's tokenizer: special tokens, a leading space with up to four letters, digits
    in threes, every other character alone. Deterministic, and not one token per word."""
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def tool_call_text(name: str, arguments: str) -> str:
    """How the template renders one tool call of an assistant message (and how a reply that
    made it is cached): its name and its arguments as sent, as Hermes-style templates do."""
    return f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {arguments}}}</tool_call>'


def _message_text(message: object) -> tuple[str, str]:
    """(role, text) of one message: its content, then any tool calls it made (a ``tool``
    message is its result, rendered like any content)."""
    if not isinstance(message, dict):
        return "user", ""
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    text = content if isinstance(content, str) else ""
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            text += tool_call_text(str(function.get("name") or ""),
                                   str(function.get("arguments") or ""))
    return str(message.get("role") or "user"), text


def render_chat(messages: object, add_generation_prompt: bool = True) -> str:
    """The target's chat template, applied to `messages` (what its tokenizer counts)."""
    parts = []
    if isinstance(messages, list):
        for message in messages:
            role, content = _message_text(message)
            parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


class PrefixCache:
    """Blocks of `block` tokens, each keyed by the hash of all tokens up to its end (a chain,
    as vLLM's automatic prefix caching does), least recently used dropped past `max_blocks`."""

    def __init__(self, block: int, max_blocks: int) -> None:
        self.block = max(1, block)
        self.max_blocks = max_blocks
        self._blocks: collections.OrderedDict[int, None] = collections.OrderedDict()

    def lookup_and_insert(self, tokens: list[str]) -> int:
        """How many leading tokens were cached (never the last one: it is always computed);
        then every full block of `tokens` is cached."""
        block, blocks = self.block, self._blocks
        cached = 0
        chain = 0
        hit = True
        for start in range(0, len(tokens) - block + 1, block):
            chain = hash((chain, *tokens[start:start + block]))
            if hit and chain in blocks:
                blocks.move_to_end(chain)
                cached = start + block
            else:
                hit = False
                blocks[chain] = None
        while len(blocks) > self.max_blocks:
            blocks.popitem(last=False)
        return min(cached, max(0, len(tokens) - 1))
