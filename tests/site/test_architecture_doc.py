"""docs/architecture.md stays true: every module, file and dotted name it points at exists.

"Where is …" answers that name a moved or renamed module would send a newcomer to the wrong
place; this walks every path (`scans/history/grades.py`) and dotted name
(`scans.running.worker.store_report`) in the doc and finds each in the tree.
"""

import importlib.util
import re

import pytest

from tests.helpers.paths import ROOT

DOC = ROOT / "docs" / "architecture.md"
PACKAGES = "scans|benchmarks|accounts|common|tokvera_site"
PATH = re.compile(rf"(?<![\w./-])((?:{PACKAGES})/[\w/]+\.(?:py|md))\b")
DOTTED = re.compile(rf"(?<![\w./-])((?:{PACKAGES})(?:\.[A-Za-z_]\w*)+)")


def _module_prefix(parts: list[str]) -> int:
    """How many leading parts name a module or package of the checkout."""
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return i
    return 0


def _names() -> list[str]:
    text = DOC.read_text()
    return sorted(set(PATH.findall(text)) | set(DOTTED.findall(text)))


def test_the_doc_names_modules_at_all():
    assert len(_names()) > 50


@pytest.mark.parametrize("name", _names())
def test_each_name_in_the_architecture_doc_exists(name):
    if "/" in name:
        assert (ROOT / name).exists(), f"docs/architecture.md names {name}, which is not in the tree"
        return
    parts = name.split(".")
    known = _module_prefix(parts)
    assert known, f"docs/architecture.md names {name}: no such module"
    if known < len(parts):
        module = ".".join(parts[:known])
        spec = importlib.util.find_spec(module)
        assert spec and spec.origin
        source = open(spec.origin).read()
        attribute = parts[known]
        assert re.search(rf"^\s*(?:def|class|async def)? *{attribute}\b", source, re.M) or re.search(
            rf"\b{attribute}\b", source), f"docs/architecture.md names {name}: {module} has no {attribute}"
