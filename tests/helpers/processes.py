"""Helpers for tests that run the site's real processes (gunicorn, Celery workers, `tokvera
target`, host agents) on loopback: wait for a condition, see whether a port accepts, and run a
process for the length of a `with` block."""

from __future__ import annotations

import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def wait_for(predicate, seconds: float, what: str, every: float = 0.2):
    """The first truthy value of `predicate()`, polled every `every` s; fails after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def accepts(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:`port`."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


@contextmanager
def running(args, env: dict, log: Path | None = None, cwd: Path = ROOT):
    """`args` as a process (its output in `log`, if given) until the block ends, then
    terminated (killed if it has not exited 30 s later)."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()
