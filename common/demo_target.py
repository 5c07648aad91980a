"""Where the run command's `tokvera target` listens: on loopback, at DEMO_TARGET_PORT (the
Makefile derives it from PORT; Procfile.dev starts the target there). Read from the
environment at each call, since each `make run` may give another port."""

from __future__ import annotations

import os

__all__ = ["demo_target_url"]


def demo_target_url() -> str:
    """The demo target's API base, or "" where the run command started none."""
    raw = os.environ.get("DEMO_TARGET_PORT", "").strip()
    return f"http://127.0.0.1:{int(raw)}/v1" if raw.isdigit() and int(raw) > 0 else ""
