"""The grader's public surface (scans/grader/__init__.py): every name the site imports from
``scans.grader`` resolves, and importing the package loads none of its modules until a name is
asked for (the `tokvera` command imports it before it knows which subcommand runs)."""

from __future__ import annotations

import subprocess
import sys

import scans.grader as grader
from tests.helpers.processes import ROOT


def test_every_public_name_resolves_from_the_module_it_names():
    assert sorted(grader.__all__) == sorted(grader._PUBLIC)
    for name in grader.__all__:
        module, attribute = grader._PUBLIC[name]
        assert getattr(grader, name) is getattr(sys.modules[f"scans.grader.{module}"], attribute)


def test_an_unknown_name_is_an_attribute_error():
    try:
        grader.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def _loaded_after(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", f"{code}; import sys; print(*sorted(sys.modules))"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, check=True)
    return set(done.stdout.split())


def test_importing_the_package_loads_none_of_its_modules():
    loaded = _loaded_after("import scans.grader")
    assert not {m for m in loaded if m.startswith("scans.grader.")}


def test_the_plan_and_the_workload_load_no_http_client():
    loaded = _loaded_after("import scans.grader.plan")
    assert "scans.grader.workload" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("httpx", "httpcore")}
