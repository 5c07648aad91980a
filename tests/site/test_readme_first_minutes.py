"""The README's first commands work as written: the model it scans the reference target with
is the one the target lists, so the first report a newcomer sees carries no "model not
listed" warning."""

import re

from scans.grader import ScanPlan, run_scan
from scans.grader.demo_server import running_target
from tests.helpers.paths import ROOT

README = ROOT / "README.md"


def _readme_scan_model() -> str:
    found = re.search(r"tokvera scan http://127\.0\.0\.1:8080/v1 --model (\S+)",
                      README.read_text(encoding="utf-8"))
    assert found, "the README's scan example is gone"
    return found.group(1)


def test_the_readme_scan_example_names_a_model_the_target_lists():
    model = _readme_scan_model()
    with running_target() as (host, port):
        measurement = run_scan(ScanPlan(base_url=f"http://{host}:{port}/v1", model=model,
                                        levels=(1,), requests=2, timeout_s=10.0,
                                        max_tokens=16))
    assert measurement.preflight is not None
    assert measurement.preflight.models.model_listed is True
