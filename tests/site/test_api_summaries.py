"""Every operation in the API schema has a summary in words, so Redoc's menu and Swagger's list
say "List endpoints", not the operation id "api_v1_endpoints_list"."""

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


def test_operations_are_grouped_by_what_they_act_on_and_have_unique_ids():
    """Redoc's and Swagger's groups are the resources ("endpoints", "jobs"), not the path's
    first words ("api", "v1") for everything."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = [(path, operation) for path, ops in schema["paths"].items()
                  for operation in ops.values()]
    tags = {path: operation["tags"] for path, operation in operations}
    assert tags["/api/v1/endpoints/"] == ["endpoints"]
    assert tags["/api/v1/channels/"] == ["channels"]
    assert tags["/v1/jobs"] == ["jobs"]
    assert not {"api", "v1"} & {tag for group in tags.values() for tag in group}
    ids = [operation["operationId"] for _, operation in operations]
    assert len(ids) == len(set(ids)) and not any(re.search(r"_\d+$", i) for i in ids)
