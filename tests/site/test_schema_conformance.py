"""The OpenAPI schema is the API: Schemathesis runs every operation of
the schema the site serves against a real gunicorn on loopback, and every answer must be one
the schema documents, with the documented content type, headers and body, and never a 5xx.

Loopback only: the site listens on 127.0.0.1 and is the only thing Schemathesis talks to;
the site itself runs with OUTBOUND_ALLOW=loopback and a broker nobody consumes (a folder of
its own), so a scan triggered for a fuzzed URL is queued and never run.

A request generated as valid (positive) must not be refused with 400: what the API refuses,
the schema states (a pattern, an enum, a bound); what no schema can state (a catalog id the site
does not have, a URL the outbound guard refuses) is a documented 422.

Each operation gets a bounded number of generated requests, positive (valid by the schema)
and negative (invalid), half of those with the ids of real objects (an endpoint, a scan, the
team, a job) so that more than the 404 path is exercised; the whole module takes well under a
minute and a half on two cores. The figures (cases, seconds) are printed at the end.
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from benchmarks.network import hosts, services
from tests.conftest import build_world
from tests.helpers.factories import make_endpoint, make_scan
from tests.helpers.network import make_catalog
from tests.helpers.processes import gunicorn
from tests.helpers.workers import worker_env

pytestmark = [pytest.mark.django_db(transaction=True)]

# Cases per operation and mode (derandomized: every run sends the same cases). Time grows with
# cases x operations; 12/6 keeps this test from being one of the suite's slowest as the API grows.
EXAMPLES = {GenerationMode.POSITIVE: 12, GenerationMode.NEGATIVE: 6}


def schema_valid_request_accepted(ctx: schemathesis.CheckContext, response: schemathesis.Response,
                                   case: schemathesis.Case) -> bool | None:
    """Schemathesis's positive_data_acceptance: a request the schema calls valid is never
    refused with 400 (the schema states what is refused: a pattern, an enum, a bound). A
    documented 422 passes: the request is well formed but names what the site cannot use (a
    catalog id it does not have, a URL the guard refuses), which no schema can list; its body
    is checked against the documented one like any answer."""
    if response.status_code == 422 and "422" in case.operation.definition.raw.get("responses", {}):
        return None
    return positive_data_acceptance(ctx, response, case)


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance,
          schema_valid_request_accepted]


@contextmanager
def _site(tmp_path):
    env = worker_env(DJANGO_SETTINGS_MODULE="tokvera_site.settings", DEBUG="0",
                     ALLOWED_HOSTS="127.0.0.1", OUTBOUND_ALLOW="loopback",
                     TOKVERA_VAR_DIR=str(tmp_path / "var"), CELERY_BROKER_URL="filesystem://",
                     # A fuzzed lease may ask to wait 30 s for work that never comes: 1 s
                     # keeps the run short and its answers inside the client's timeout.
                     NETWORK_LEASE_WAIT_MAX_S="1")
    with gunicorn(env, threads=4, log=tmp_path / "gunicorn.log") as url:
        yield url


def _seed():
    """A team with a read-write token, an endpoint with a finished scan, a host and a job."""
    world = build_world()
    endpoint = make_endpoint(world.team)
    scan = make_scan(endpoint)
    make_catalog("tiny-q4")
    _, host_token = hosts.create_host(world.team, "rig-1", "software")
    services.heartbeat(host_token, ["tiny-q4"], {}, 2)  # online: a job can be submitted
    job = services.submit(world.team, "tiny-q4", [{"role": "user", "content": "hi"}], 8)
    real = {"slug": world.team.slug, "job_id": str(job.id)}
    return world.read_write_token, host_token, real, endpoint, scan


def _real_ids(operation, real: dict, endpoint, scan) -> dict:
    ids = {**real, "public_id": str(scan.public_id if operation.path.startswith("/api/v1/scans/")
                                    else endpoint.public_id)}
    names = {p.name for p in operation.path_parameters}
    return {name: ids[name] for name in names if name in ids}


def _run(operation, base_url: str, headers: dict, ids: dict, failures: list,
         statuses: Counter) -> int:
    calls = 0

    def one(case):
        nonlocal calls
        calls += 1
        try:
            response = case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS,
                                              timeout=30)
            statuses[response.status_code] += 1
        except (Exception, FailureGroup) as exc:  # noqa: BLE001 - collected and reported
            failures.append(f"{operation.label}: {type(exc).__name__}: {exc}"[:3000])
            raise

    for mode, examples in EXAMPLES.items():
        fuzzed = operation.as_strategy(generation_mode=mode)
        strategy = fuzzed
        # Real ids for half the cases (never for a DELETE: the seeded objects must last).
        if ids and operation.method.upper() != "DELETE":
            strategy = st.one_of(fuzzed, operation.as_strategy(generation_mode=mode,
                                                               path_parameters=ids))

        @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
        @given(case=strategy)
        def run(case):
            one(case)

        try:
            run()
        except (Exception, FailureGroup):  # noqa: BLE001, S110 - recorded by `one`
            pass
    return calls


def test_every_operation_answers_as_the_schema_says(tmp_path):
    read_write_token, host_token, real, endpoint, scan = _seed()
    started = time.monotonic()
    with _site(tmp_path) as base_url:
        raw = httpx.get(f"{base_url}/api/schema/", headers={"Accept": "application/json"},
                        timeout=30)
        assert raw.status_code == 200, raw.text
        schema = schemathesis.openapi.from_dict(raw.json())
        failures: list[str] = []
        statuses: Counter = Counter()
        cases = operations = 0
        for result in schema.get_all_operations():
            operation = result.ok()
            security = operation.definition.raw.get("security", [])
            token = host_token if any("hostToken" in s for s in security) else read_write_token
            headers = {"Authorization": f"Bearer {token}"}
            cases += _run(operation, base_url, headers, _real_ids(operation, real, endpoint, scan),
                          failures, statuses)
            operations += 1
    elapsed = time.monotonic() - started
    print(f"\nschemathesis: {operations} operations, {cases} cases in {elapsed:.1f} s; "
          f"conforming answers by status: {dict(sorted(statuses.items()))}")
    assert operations >= 20
    assert not failures, "\n\n".join(failures)
