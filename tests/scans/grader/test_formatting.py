"""One rounding rule per unit, honest beside a bound: the CLI, report.html and the
site all format through scans.grader.formatting."""

from __future__ import annotations

import pytest

from scans.grader import formatting as fmt
from scans.templatetags.tokvera_pages import check_value as site_check_value


@pytest.mark.parametrize(("value", "unit", "bounds", "shown"), [
    (0.9996, "share", (1, 0.5), "99.96 %"),       # not "100.0 %" beside "≥ 100 %"
    (0.0104, "share", (0.01, 0.05), "1.04 %"),    # not "1.0 %" beside "≤ 1 %"
    (800.04, "ms", (800, 2000), "800.04 ms"),     # not "800.0 ms" beside "≤ 800 ms"
    (0.01, "share", (0.01, 0.05), "1.0 %"),       # exactly on the bound stays short
    (812.345, "ms", (800, 2000), "812.3 ms"),
    (1.9999, "ratio", (2, 4), "1.9999×"),
    (True, "present", (), "present"),
    (None, "ms", (), "—"),
])
def test_a_value_shows_which_side_of_its_bound_it_is_on(value, unit, bounds, shown):
    assert fmt.check_value(value, unit, bounds) == shown


def test_bounds_read_as_people_write_them():
    assert fmt.bound_text(">=", 1, "share") == "≥ 100 %"
    assert fmt.bound_text("<=", 800, "ms") == "≤ 800 ms"
    assert fmt.bound_text("<=", 0.01, "share") == "≤ 1 %"
    assert fmt.bound_text("==", True, "present") == "present"


def test_the_site_uses_the_same_rule_as_the_report():
    assert site_check_value(0.9996, "share") == fmt.check_value(0.9996, "share")
    assert site_check_value(800.04, "ms") == fmt.check_value(800.04, "ms")
    assert site_check_value(None, "ms") == "not measured"
