"""A network built by hand (tests/benchmarks/public/conftest.py: build_network) and every figure it must
give on /v1/slo, /v1/stats and /benchmarks at the same frozen coordinator clock.

Hosts at each tier, one offline by 46 s and one at exactly 45 s, a suspended, a revoked and a
never-seen host; completed, failed and unsettled jobs inside and outside each window (and on the
boundaries), a completed job with no tokens, jobs after the clock, and an inactive model.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest
import time_machine
from django.test import Client

from benchmarks.public import snapshot
from tests.helpers.network import T0

pytestmark = pytest.mark.django_db

NULL_LATENCY = {"p50_ms": None, "p95_ms": None}
EXPECTED_SLO = {
    "generated_at": "2030-01-07T12:00:00Z",
    "models": [
        {"id": "alpha-q4", "online_hosts": 4, "windows": {
            "7d": {"completed": 4, "failed": 1, "success_rate": 0.8,
                   "latency": {"p50_ms": 300, "p95_ms": 812}, "no_host": 0},
            "30d": {"completed": 6, "failed": 3, "success_rate": 0.666667,
                    "latency": {"p50_ms": 500, "p95_ms": 2000}, "no_host": 0},
        }},
        {"id": "beta-q8", "online_hosts": 2, "windows": {
            "7d": {"completed": 0, "failed": 0, "success_rate": None, "latency": NULL_LATENCY,
                   "no_host": 0},
            "30d": {"completed": 0, "failed": 1, "success_rate": 0.0, "latency": NULL_LATENCY,
                    "no_host": 0},
        }},
    ],
}
EXPECTED_STATS = {
    "generated_at": "2030-01-07T12:00:00Z",
    "online_hosts": 5,
    "models": [{"id": "alpha-q4", "providers": 4}, {"id": "beta-q8", "providers": 2}],
    # RTX 4090 is on hosts of two operators; A100 80GB and M2 Ultra are each one operator's:
    # published only as "other". Then the hosts that reported no GPU.
    "hardware": [{"gpu": "RTX 4090", "hosts": 2}, {"gpu": "other", "hosts": 2},
                 {"gpu": None, "hosts": 1}],
}
# data-tier, data-hosts, data-ttft-p50-ms, data-ttft-p95-ms, data-tps-p50, then the cells' text.
# A cell is published only when hosts of 2 operators give it a sample: alpha's none tier (ursula
# and vortex) is; one host's tier (alpha's software, beta's none) is a dash. TPS 40.25 rounds
# half up to 40.3, like every published figure.
EXPECTED_TIERS = {
    "alpha-q4": [
        ("none", "2", "200", "400", "40.3", ["None", "2", "200 ms", "400 ms", "40.3 tok/s"]),
        ("software", "1", "", "", "", ["Software", "1", "—", "—", "—"]),
        ("edr", "1", "", "", "", ["EDR", "1", "—", "—", "—"]),
        ("hardware", "0", "", "", "", ["Hardware", "0", "—", "—", "—"]),
    ],
    "beta-q8": [
        ("none", "1", "", "", "", ["None", "1", "—", "—", "—"]),
        ("software", "0", "", "", "", ["Software", "0", "—", "—", "—"]),
        ("edr", "1", "", "", "", ["EDR", "1", "—", "—", "—"]),
        ("hardware", "0", "", "", "", ["Hardware", "0", "—", "—", "—"]),
    ],
}
# data-window, data-completed, data-failed, data-success, p50, p95, then the cells' text.
EXPECTED_WINDOWS = {
    "alpha-q4": [
        ("7d", "4", "1", "0.8", "300", "812", ["7 days", "80.0 %", "4 of 5 (1 failed)", "300 ms", "812 ms"]),
        ("30d", "6", "3", "0.666667", "500", "2000",
         ["30 days", "66.7 %", "6 of 9 (3 failed)", "500 ms", "2,000 ms"]),
    ],
    "beta-q8": [
        ("7d", "0", "0", "", "", "", ["7 days", "—", "0 of 0", "—", "—"]),
        ("30d", "0", "1", "0.0", "", "", ["30 days", "0.0 %", "0 of 1 (1 failed)", "—", "—"]),
    ],
}


class Page(HTMLParser):
    """The page's machine-readable parts: root attributes, cards, their rows and cell texts."""

    def __init__(self, html: str):
        super().__init__()
        self.root: dict = {}
        self.cards: dict[str, dict] = {}
        self.hardware: list[dict] = []
        self.banner = False
        self._card = None
        self._row = None
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html":
            self.root = a
        elif tag == "article" and "data-model-id" in a:
            self._card = {"attrs": a, "windows": [], "tiers": [], "facts": {}}
            self.cards[a["data-model-id"]] = self._card
        elif tag == "tr" and ("data-tier" in a or "data-window" in a or "data-gpu" in a):
            self._row = {"attrs": a, "cells": []}
            if "data-gpu" in a:
                self.hardware.append(self._row)
            else:
                self._card["tiers" if "data-tier" in a else "windows"].append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "dd" and self._card is not None and "data-fact" in a:
            self._fact, self._cell = a["data-fact"], []
        elif "data-banner" in a:
            self.banner = True

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row["cells"].append(" ".join("".join(self._cell).replace("\u00a0", " ").split()))
            self._cell = None
        elif tag == "dd" and self._cell is not None:
            self._card["facts"][self._fact] = "".join(self._cell).strip()
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag == "article":
            self._card = None


def surfaces(client: Client) -> tuple[dict, dict, Page, str]:
    slo = client.get("/v1/slo")
    stats = client.get("/v1/stats")
    page = client.get("/benchmarks")
    assert slo.status_code == stats.status_code == page.status_code == 200
    return slo.json(), stats.json(), Page(page.content.decode()), slo.content.decode()


def test_every_figure_of_the_hand_built_network_on_all_three_surfaces(network):
    with time_machine.travel(T0, tick=False):
        slo, stats, page, slo_text = surfaces(Client())

    assert slo == EXPECTED_SLO
    assert stats == EXPECTED_STATS
    assert page.root["data-generated-at"] == "2030-01-07T12:00:00Z"
    assert not page.banner
    assert list(page.cards) == ["alpha-q4", "beta-q8"]  # the inactive model is not published
    for model in EXPECTED_SLO["models"]:
        card = page.cards[model["id"]]
        success = model["windows"]["7d"]["success_rate"]
        assert card["attrs"]["data-model-success-7d"] == ("" if success is None else json.dumps(success))
        assert card["attrs"]["data-online-hosts"] == str(model["online_hosts"])
        assert card["facts"]["online-hosts"] == str(model["online_hosts"])
        tiers = [(r["attrs"]["data-tier"], r["attrs"]["data-hosts"], r["attrs"]["data-ttft-p50-ms"],
                  r["attrs"]["data-ttft-p95-ms"], r["attrs"]["data-tps-p50"], r["cells"])
                 for r in card["tiers"]]
        assert tiers == [(*row[:5], row[5]) for row in EXPECTED_TIERS[model["id"]]]
        windows = [(r["attrs"]["data-window"], r["attrs"]["data-completed"], r["attrs"]["data-failed"],
                    r["attrs"]["data-success"], r["attrs"]["data-latency-p50-ms"],
                    r["attrs"]["data-latency-p95-ms"], r["cells"]) for r in card["windows"]]
        assert windows == EXPECTED_WINDOWS[model["id"]]
    assert page.cards["alpha-q4"]["facts"] == {"quant": "Q4_K_M", "context": "8,192 tokens",
                                               "online-hosts": "4"}
    assert page.cards["beta-q8"]["facts"]["quant"] == "Q8_0"
    assert [(r["attrs"]["data-gpu"], r["attrs"]["data-hosts"]) for r in page.hardware] == [
        ("RTX 4090", "2"), ("other", "2"), ("", "1")]
    # The attribute is written exactly as the JSON writes the number.
    assert '"success_rate": 0.8,' in slo_text and '"success_rate": 0.666667,' in slo_text


def test_percentile_disc_in_postgresql_gives_the_hand_built_figures(network):
    built = snapshot.build_snapshot(T0)
    assert snapshot.slo_payload(built) == EXPECTED_SLO
    assert snapshot.stats_payload(built) == EXPECTED_STATS


def test_a_host_last_seen_45_seconds_ago_is_online_and_46_is_not(network):
    built = snapshot.build_snapshot(T0)
    assert snapshot.online_window_s() == 45
    # none-b was seen 45 s ago and counts; soft-old, 46 s ago, does not (software tier = soft-a only).
    alpha = built["models"][0]
    assert [t["hosts"] for t in alpha["tiers"]] == [2, 1, 1, 0]
    one_second_later = snapshot.build_snapshot(T0.replace(second=1))
    assert [t["hosts"] for t in one_second_later["models"][0]["tiers"]] == [1, 1, 1, 0]
    assert one_second_later["online_hosts"] == 4
