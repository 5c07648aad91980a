"""Every operation in the API schema has a summary in words, so Redoc's menu and Swagger's list
say "List endpoints", not the operation id "api_v1_endpoints_list" (issue 23)."""

from __future__ import annotations

import re

from drf_spectacular.generators import SchemaGenerator


def test_every_operation_has_a_summary_in_words():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    summaries = {}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            summary = operation.get("summary") or ""
            assert summary, f"{method.upper()} {path} has no summary"
            assert not re.fullmatch(r"[a-z0-9_.]+", summary), f"{summary!r} reads as an id"
            assert "(issue" not in summary and len(summary) <= 80
            summaries[(method, path)] = summary
    assert summaries[("get", "/api/v1/endpoints/")] == "List endpoints"
    assert summaries[("post", "/api/v1/endpoints/")] == "Create an endpoint"
    assert summaries[("get", "/api/v1/scans/{public_id}/")] == "Read a scan"
