"""report.html is rendered by the grader alone (Jinja2, autoescaped): no Django is imported,
whatever a server wrote is shown as text, and counts read as English."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from scans.grader.report_html import render_html
from tests.helpers.processes import ROOT
from tests.scans.grader.test_report_schema import minimal_report


def test_rendering_report_html_imports_no_django_and_needs_no_settings(tmp_path):
    (tmp_path / "report.json").write_text(json.dumps(minimal_report()))
    code = ("import json, sys; from scans.grader.report_html import render_html; "
            "html = render_html(json.load(open('report.json'))); "
            "print(json.dumps([html.startswith('<!DOCTYPE html>'), "
            "sorted(m for m in sys.modules if m.split('.')[0] in "
            "('django', 'accounts', 'benchmarks', 'tokvera_site'))]))")
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == [True, []]


def test_what_a_server_wrote_is_shown_as_text_never_as_markup():
    report = minimal_report()
    hostile = '<script>alert("x")</script>'
    report["target"]["model"] = hostile
    report["levels"][1]["failure_examples"] = {"http_500": hostile}
    html = render_html(report)
    assert "<script" not in html
    assert "&lt;script&gt;alert(" in html


def test_sample_counts_read_as_english():
    report = minimal_report()
    report["levels"][0]["ttft_samples_ms"] = [201.0]
    report["levels"][1]["ttft_samples_ms"] = []
    report["levels"].append({**report["levels"][0], "concurrency": 8,
                             "ttft_samples_ms": [200.0, 202.0]})
    html = render_html(report)
    assert "(1 sample)" in html and "(2 samples)" in html and "(0 samples)" in html
