"""Running the `tokvera` command as a user does, in an 80-column terminal: the command line,
a real `tokvera target` process on loopback, and the check that output reads at 80 columns."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TOKVERA = [sys.executable, "-m", "tokvera_site.cli"]
ENV = {**os.environ, "COLUMNS": "80"}
MODEL = "tokvera-target"


@contextmanager
def target_process(*flags: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """A real `tokvera target` process on a free loopback port; yields it and its base URL."""
    process = subprocess.Popen([*TOKVERA, "target", "--port", "0", *flags], env=ENV,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        match = re.search(r"http://127\.0\.0\.1:\d+/v1", process.stdout.readline())
        assert match, process.stderr.read() if process.stderr else ""
        yield process, match.group(0)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(10)


def tokvera(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOKVERA, *args], env=ENV, cwd=cwd, capture_output=True, text=True,
                          timeout=180)


def assert_readable_at_80(text: str) -> None:
    """Every line fits 80 columns (a path too long for any line stays whole), none shows
    Python's None, and a line never ends inside a word the next line continues."""
    lines = text.splitlines()
    assert [line for line in lines if len(line) > 80 and "/" not in line] == []
    assert not re.search(r"\bNone\b", text), text
    for line in lines:
        assert not line.endswith("-"), line


#: A `tokvera target` fast enough for a scan in a test.
FAST = ("--ttft-ms", "5", "--itl-ms", "1", "--tokens", "8")
