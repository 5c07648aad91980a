"""Redaction reads a report's strings once, joined, and walks it string by string only when a
secret or a credential pattern could be in them (scans/grader/redaction.py). These tests pin that
shortcut: whatever redaction masked before, it still masks, wherever in the report it stands,
and a report with nothing to mask comes back as it was."""

from __future__ import annotations

import copy
import re
import sys

import pytest

from scans.grader import redact_report
from scans.grader.redaction import FOLDED_INTO_ASCII, MASK
from tests.helpers.factories import make_report

KEY = "sk-live-4c1d2e3f4a5b6c7d8e9f"


def _with_failure(text: str, where: str = "value") -> dict:
    """A real report whose first level carries `text` as a failure example (or its key)."""
    report = make_report()
    example = {text: "HTTP 500"} if where == "key" else {"http_status_500": text}
    report["levels"][0]["failure_examples"] = example
    return report


def _example(report: dict) -> str:
    return " ".join(f"{k} {v}" for k, v in report["levels"][0]["failure_examples"].items())


def test_a_report_with_nothing_to_mask_comes_back_unchanged():
    report = make_report()
    assert redact_report(report, [KEY]) == copy.deepcopy(report)


@pytest.mark.parametrize("text", [
    f"upstream rejected key {KEY}",
    f"truncated body ... {KEY[:10]}",  # the key cut short at the end of an error body
    "Authorization: Basic dXNlcjpwYXNz",
    "AUTHORIZATION=token-abc123",
    "got bearer abcdef123456 from the proxy",
    "password=hunter22",
    "see https://example.test/invites/abcdefghijklmnopqrstu",
    "tkv_abcdefgh12345",
    "PAſSWORD=hunter22",  # a long s is an s to a case-insensitive pattern
    "line one\nAuthorization: Bearer abcdef123456",
], ids=["key", "key-cut-short", "basic", "upper-case", "bearer", "password", "invite-link",
        "api-token", "long-s", "after-a-newline"])
@pytest.mark.parametrize("where", ["value", "key"])
def test_every_credential_is_still_masked_wherever_it_stands(text, where):
    stored = _example(redact_report(_with_failure(text, where), [KEY]))
    assert MASK in stored
    assert KEY[:8] not in stored
    assert not re.search(r"hunter22|abcdef123456|dXNlcjpwYXNz|token-abc123|abcdefgh12345"
                         r"|abcdefghijklmnopqrstu", stored)


def test_a_key_with_quotes_and_a_newline_is_masked():
    key = 'k"ey\\with\nquotes-0123'
    stored = _example(redact_report(_with_failure(f"echoed {key} back"), [key]))
    assert key not in stored and MASK in stored


def test_only_the_listed_characters_outside_ascii_match_a_letter_case_insensitively():
    letter = re.compile(r"(?i)[a-z]")
    folded = [chr(c) for c in range(128, sys.maxunicode + 1) if letter.fullmatch(chr(c))]
    assert sorted(folded) == sorted(FOLDED_INTO_ASCII)
