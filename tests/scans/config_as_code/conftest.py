"""A live site (pytest-django's live_server: the real site on loopback, real PostgreSQL) and
`tokvera apply` / `tokvera export` run as the console script runs them (tokvera_site.cli.main)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tokvera_site.cli import main

FILE = """\
team: {team}
channels:
  ops hook:
    kind: webhook
    url: {{secret_env: HOOK_URL}}
    secret: {{secret_env: HOOK_SECRET}}
endpoints:
  chat:
    base_url: http://127.0.0.1:9/v1
    model: tiny
    api_key: {{secret_env: CHAT_KEY}}
    levels: [1, 2]
    requests_per_level: 4
    timeout_s: 30
    interval_minutes: 30
    slo_ttft_p95_ms: 800
    price_input_per_mtok: 0.5
    all_channels: false
    channels: [ops hook]
maintenance_windows:
  nightly:
    endpoint: chat
    kind: weekly
    weekdays: [0, 3]
    start_time: 02:00
    duration_minutes: 60
    timezone: Europe/Berlin
status_page:
  enabled: true
  slug: {team}-status
  title: Acme status
  endpoints: [chat]
"""
SECRETS = {"HOOK_URL": "http://127.0.0.1:9/hook-path-secret", "HOOK_SECRET": "hush-hook-signing",
           "CHAT_KEY": "sk-chat-key-never-shown"}


@dataclass
class Cli:
    site: str
    tmp: Path
    capsys: pytest.CaptureFixture

    def write(self, text: str, name: str = "tokvera.yaml") -> Path:
        path = self.tmp / name
        path.write_text(text, encoding="utf-8")
        return path

    def apply(self, path: Path, *flags: str) -> tuple[int, str, str]:
        code = main(["apply", str(path), "--site", self.site, *flags])
        out = self.capsys.readouterr()
        return code, out.out, out.err

    def export(self, *flags: str) -> tuple[int, str, str]:
        code = main(["export", "--site", self.site, *flags])
        out = self.capsys.readouterr()
        return code, out.out, out.err


@pytest.fixture
def cli(world, live_server, settings, monkeypatch, tmp_path, capsys) -> Cli:
    settings.OUTBOUND_ALLOW = ["loopback"]  # the webhook's address, judged by the guard
    monkeypatch.setenv("TOKVERA_TOKEN", world.read_write_token)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return Cli(live_server.url, tmp_path, capsys)
