"""The report's SVG charts (scans.grader.headline) are rendered from templates
(scans/grader/templates/report/line_chart.svg and ttft_histogram.svg) and come out byte for
byte as the digests below say: taken from the f-strings that built them before issue 20, then
from the round ticks, the marked axis break and the marker rows of issue 23 (scans/grader/
ticks.py, headline._markers). A deliberate change to a chart changes them."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from scans.grader import headline


def _level(concurrency, samples, *, tokens=True, ttft=None, per_s=None, chunks=None) -> dict:
    level = {"concurrency": concurrency, "ttft_samples_ms": samples,
             "output_throughput": {"basis": "tokens" if tokens else "chunks", "per_s": per_s,
                                   "chunks_per_s": chunks}}
    if ttft is not None:
        level["ttft_ms"] = ttft
    return level


def _cases() -> dict[str, list[dict]]:
    rng = random.Random(7)
    return {
        "empty": [],
        "one": [_level(1, [12.5, 13.0, 40.2], ttft={"p50": 13.0, "p95": 38.0, "p99": 40.0},
                       per_s=55.5, chunks=60.1)],
        "many": [_level(c, [rng.uniform(5, 900) * (1 + c / 8) for _ in range(40 * c)],
                        ttft={"p50": 100.0 * c, "p95": 300.0 * c, "p99": 900.0 * c + 0.4},
                        per_s=120.0 * c + 0.333, chunks=130.0 * c) for c in (1, 2, 4, 8, 16)],
        "chunks": [_level(1, [0.3, 0.4], tokens=False, ttft={"p50": 0.35, "p95": 0.4, "p99": 0.4},
                          chunks=0.75),
                   _level(4, [], tokens=False)],
        "nothing": [_level(1, []), _level(2, [])],
        "equal": [_level(1, [50.0] * 5, ttft={"p50": 50.0, "p95": 50.0, "p99": 50.0},
                         per_s=0.0, chunks=0.0)],
        "gaps": [_level(1, [1.0, 2.0], ttft={"p50": 1.0, "p95": None, "p99": 2.0}, per_s=5.0,
                        chunks=5),
                 _level(None, [3000.0], ttft={"p50": 3000.0, "p95": 3000.0, "p99": 3000.0},
                        chunks=2),
                 _level(8, [2999.0], ttft={"p50": 2999.0}, per_s=1e6, chunks=1e6)],
    }


#: sha256 (first 16 hex digits) of json.dumps({"hist", "throughput", "ttft"}, sort_keys=True)
#: as the charts of issue 23 render each case (round ticks: 0/20/40/60, not quarters of 100;
#: a left margin that holds the widest y label beside the axis title at the phone's text size,
#: marker rows 20 units apart so their labels' boxes do not touch on a phone).
DIGESTS = {
    "chunks": "1cbbf17dbb42be5e",
    "empty": "b4624c105ff5e34e",
    "equal": "582d265e64de27b0",
    "gaps": "0da2eee08d368b73",
    "many": "0ed99a1b3da1587b",
    "nothing": "15bb35e613f69db4",
    "one": "3bd733352aa84f83",
}

ONE_LEVEL_THROUGHPUT = (
    '<svg class="chart-throughput" viewBox="0 0 520 230" role="img" aria-label="Throughput '
    '(output tokens/s) against concurrency"><title>Throughput (output tokens/s) against '
    'concurrency</title><rect x="64" y="30" width="440" height="156" fill="#fff" '
    'stroke="#dde2ea"/><line class="grid" x1="64" x2="504" y1="186.0" y2="186.0" '
    'stroke="#eef1f5"/><text class="tick" x="58" y="190.0" text-anchor="end">0</text><line '
    'class="grid" x1="64" x2="504" y1="134.0" y2="134.0" stroke="#eef1f5"/><text class="tick" '
    'x="58" y="138.0" text-anchor="end">20</text><line class="grid" x1="64" x2="504" '
    'y1="82.0" y2="82.0" stroke="#eef1f5"/><text class="tick" x="58" y="86.0" '
    'text-anchor="end">40</text><line class="grid" x1="64" x2="504" y1="30.0" y2="30.0" '
    'stroke="#eef1f5"/><text class="tick" x="58" y="34.0" text-anchor="end">60</text>'
    '<text class="tick" x="284.0" y="202" '
    'text-anchor="middle">1</text><text class="axis-title" x="284.0" y="224" '
    'text-anchor="middle">concurrency (requests in flight)</text><text class="axis-title" '
    'x="14" y="108.0" text-anchor="middle" transform="rotate(-90 14 108.0)">output tokens/s'
    '</text><circle cx="284.0" cy="41.7" r="3.5" fill="#1f7a3d"><title>throughput at '
    'concurrency 1: 55.5 output tokens/s</title></circle><line x1="72" x2="94" y1="14" '
    'y2="14" stroke="#1f7a3d" stroke-width="2"/><text class="legend" x="98" y="18">'
    'throughput</text></svg>')


def _charts(levels: list[dict]) -> dict:
    return {"throughput": headline.throughput_chart(levels), "ttft": headline.ttft_chart(levels),
            "hist": headline.ttft_histograms(levels)}


def test_a_one_level_throughput_chart_is_exactly_what_it_was():
    assert headline.throughput_chart(_cases()["one"]) == ONE_LEVEL_THROUGHPUT


@pytest.mark.parametrize("case", sorted(DIGESTS))
def test_every_chart_is_byte_for_byte_what_the_f_strings_drew(case):
    charts = _charts(_cases()[case])
    digest = hashlib.sha256(json.dumps(charts, sort_keys=True).encode()).hexdigest()[:16]
    assert digest == DIGESTS[case]
    for svg in [charts["throughput"], charts["ttft"], *(h["svg"] for h in charts["hist"])]:
        assert svg.startswith("<svg ") and svg.endswith("</svg>") and "\n" not in svg


def test_a_concurrency_that_is_not_a_number_is_shown_as_text_in_every_chart():
    hostile = '<script>alert("x")</script>'
    levels = [_level(hostile, [5.0, 6.0], ttft={"p50": 5.0, "p95": 6.0, "p99": 6.0}, per_s=3.0)]
    charts = _charts(levels)
    for svg in [charts["throughput"], charts["ttft"], charts["hist"][0]["svg"]]:
        assert "<script" not in svg
        assert "&lt;script&gt;alert(" in svg
