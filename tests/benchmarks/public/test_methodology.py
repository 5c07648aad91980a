"""The methodology page: docs/methodology.md rendered by the site, and the constants it states
are the ones the code uses."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from benchmarks.models import Host, Job
from benchmarks.network import ewma as folding
from benchmarks.public import cache as public_cache
from benchmarks.public import page as public_page
from benchmarks.public import snapshot
from common.periodic_tasks import all_periodic_tasks

DOC = public_page.METHODOLOGY_PATH.read_text(encoding="utf-8")


def _constants() -> dict[str, str]:
    """The 'numbers in one table' section, as {constant: value}."""
    section = DOC.split("## The numbers in one table", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in section.splitlines()
            if line.startswith("|") and not line.startswith("|---")]
    return {name.strip(): value.strip() for name, value in rows[1:]}


def _days(span) -> int:
    assert span.total_seconds() % 86400 == 0
    return int(span.total_seconds() // 86400)


def test_the_constants_table_states_what_the_code_uses():
    windows = [_days(span) for span in snapshot.WINDOWS.values()]
    refresh = [e for e in all_periodic_tasks() if e[1].endswith("refresh_public_benchmarks")][0][2]
    percentiles = " and ".join(f"p{p}" for p in snapshot.LATENCY_PERCENTILES)
    max_age = public_cache.PAGE_MAX_AGE_S

    assert _constants() == {
        "Success and latency windows": " and ".join(f"{d} days" for d in windows),
        "Online window": f"{snapshot.online_window_s()} s",
        "EWMA smoothing factor (α)": str(snapshot.EWMA_ALPHA),
        "Completion latency percentiles": percentiles,
        "TTFT percentiles": " and ".join(f"p{p}" for p in snapshot.TTFT_PERCENTILES),
        "Speed percentile": f"p{snapshot.TPS_PERCENTILE}",
        "Browser and shared cache":
            f"`Cache-Control: public, max-age={max_age}` ({max_age} s)",
        "Server-side page snapshot":
            f"kept {public_cache.PAGE_CACHE_S} s, rebuilt every {refresh} s",
        "Live JSON reuse": f"at most {public_cache.LIVE_CACHE_S} s",
        "Operators behind a published GPU name or tier cell": f"at least {snapshot.MIN_OPERATORS}",
        "Hosts behind a published tier cell": f"at least {snapshot.MIN_HOSTS_PER_CELL}",
    }
    assert list(snapshot.WINDOWS) == [f"{d}d" for d in windows] == ["7d", "30d"]
    assert (snapshot.online_window_s(), snapshot.EWMA_ALPHA, public_cache.PAGE_MAX_AGE_S) == (45, 0.3, 300)


def test_every_figure_the_prose_mentions_is_one_the_code_uses():
    alphas = set(re.findall(r"α = ([0-9.]+)", DOC))
    assert alphas == {str(snapshot.EWMA_ALPHA)}
    ages = {int(a) for a in re.findall(r"max-age=(\d+)", DOC)}
    assert ages == {public_cache.PAGE_MAX_AGE_S, public_cache.LIVE_MAX_AGE_S}
    seconds = {int(s) for s in re.findall(r"\b(\d+)\s?s\b", DOC)}
    assert seconds == {snapshot.online_window_s(), snapshot.online_window_s() + 1,  # 46 s: offline
                       public_cache.PAGE_CACHE_S, public_cache.REFRESH_EVERY_S, public_cache.LIVE_CACHE_S}
    days = {int(d) for d in re.findall(r"\b(\d+)[ -]days?\b", DOC)}
    assert days == {_days(span) for span in snapshot.WINDOWS.values()}
    assert "Not enough samples yet" in DOC and "[100, 300], p50 is 100 and p95 is 300" in DOC


def test_the_host_ewmas_are_folded_with_the_alpha_the_page_states():
    host = Host(ttft_ewma_ms=100.0, tps_ewma=10.0, reputation=0.5)
    folding.apply_completed(host, Job(ttft_ms=200.0, completion_tokens=40, elapsed_ms=1000.0))
    assert host.ttft_ewma_ms == pytest.approx(100 + snapshot.EWMA_ALPHA * 100)
    assert host.tps_ewma == pytest.approx(10 + snapshot.EWMA_ALPHA * 30)


@pytest.mark.django_db
def test_the_site_renders_the_markdown_with_linkable_sections():
    response = Client().get("/benchmarks/methodology")
    html = response.content.decode()

    assert response.status_code == 200
    assert '<h1 id="how-the-network-benchmarks-are-measured">' in html
    assert '<h2 id="cache-and-privacy">' in html
    assert html.count("<table>") == 2 and "<td>45 s</td>" in html
    assert "<code>Cache-Control: public, max-age=300</code>" in html
    assert 'aria-current="page">Methodology' in html


@pytest.mark.django_db
def test_the_benchmarks_page_links_to_the_methodology_and_states_the_same_alpha():
    html = Client().get("/benchmarks").content.decode()
    assert 'href="/benchmarks/methodology"' in html
    assert f"α = {snapshot.EWMA_ALPHA}" in html
