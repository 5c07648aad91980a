"""Team metrics for Prometheus: `GET /api/v1/metrics` with a team API token (read-only is
enough). One gauge per figure, one sample per endpoint of the caller's team(s), labelled by
endpoint name and id (and team slug); docs/metrics.md has a scrape config and an alert rule.

Plain metric families, rendered per request and never put in a process registry or the
multiprocess files: nothing is kept between scrapes, so one team's samples can never reach
another team's answer or the site's public /metrics, and a deleted endpoint disappears at once. A figure the
latest scan did not measure has no sample (absent, never a made-up 0).
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import F
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.views import APIView

from accounts.tenancy import Access, scoped_to_teams
from scans.grader import GRADES
from scans.history import state
from scans.models import CapacityOutcome, CheckResult, Endpoint, Scan, ScanStatus

__all__ = ["GRADE_NUMBERS", "TeamMetricsView", "render"]

# A grade as a number: higher is better (A=5 … F=1); 0 is no letter (insufficient evidence).
GRADE_NUMBERS = {letter: len(GRADES) - i for i, letter in enumerate(GRADES)}
TTFT_CHECK, ERROR_RATE_CHECK = "ttft_p95_at_concurrency_1", "error_rate"
LABELS = ("endpoint", "endpoint_id", "team")
# The classic text format generate_latest writes, which every Prometheus version reads.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Families(Collector):
    """The gauges of one answer as plain metric families.

    Not prometheus_client's Gauge: with PROMETHEUS_MULTIPROC_DIR set, every Gauge, whatever
    registry it is given, stores its samples in the shared multiprocess files, which the
    public /metrics then serves to anyone. A GaugeMetricFamily is only data, rendered once.
    """

    def __init__(self) -> None:
        self.families: dict[str, GaugeMetricFamily] = {}

    def add(self, name: str, doc: str) -> GaugeMetricFamily:
        self.families[name] = GaugeMetricFamily(name, doc, labels=LABELS)
        return self.families[name]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self.families.values()


def render(endpoints: list[Endpoint]) -> bytes:
    """The Prometheus text exposition of these endpoints' gauges (endpoints the caller may see)."""
    answer = _Families()
    points = answer.add("tokvera_endpoint_points", "Points (0-100) of the latest graded scan")
    grade = answer.add("tokvera_endpoint_grade",
                       "Grade of the latest graded scan: A=5 B=4 C=3 D=2 F=1, 0 no letter")
    current_state = answer.add("tokvera_endpoint_state",
                               "State: 0 up, 1 degraded, 2 below floor, 3 down, 4 errored on our "
                               "side, 5 not yet scanned")
    ttft = answer.add("tokvera_endpoint_ttft_p95_c1_seconds",
                      "Time to first token p95 at concurrency 1 (latest graded scan)")
    errors = answer.add("tokvera_endpoint_error_rate",
                        "Share of failed requests, all levels (latest graded scan)")
    speed = answer.add("tokvera_endpoint_tokens_per_second",
                       "Median output speed per stream at concurrency 1 (latest graded scan)")
    age = answer.add("tokvera_endpoint_seconds_since_last_scan",
                     "Seconds since the latest finished scan ended")
    capacity = answer.add("tokvera_endpoint_capacity_concurrency",
                          "Concurrent streams served within the SLO (latest scan that searched; "
                          "0 when no level met it)")
    capacity_bound = answer.add("tokvera_endpoint_capacity_at_search_bound",
                                "1 when the highest level the capacity search tried met the SLO "
                                "(the capacity may be higher), else 0")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(answer)
    if not endpoints:
        return generate_latest(registry)

    team_ids = {e.team_id for e in endpoints}
    # Down is a state, not a grade: a down scan gives tokvera_endpoint_state 3 and no grade or
    # points sample; the graded gauges read the latest scan that was graded.
    endpoint_ids = [e.pk for e in endpoints]
    graded = {r["endpoint_id"]: r for r in state.newest_per_endpoint(
        scoped_to_teams(Scan, team_ids).filter(status=ScanStatus.SUCCEEDED, down=False),
        team_ids, endpoint_ids).values("pk", "endpoint_id", "grade", "points",
                                       rate=F("tokens_per_s"))}
    checks: dict[tuple[int, str], float | None] = {
        (r["scan_id"], r["check_id"]): r["value"] for r in (
            scoped_to_teams(CheckResult, team_ids)
            .filter(scan_id__in=[r["pk"] for r in graded.values()],
                    check_id__in=[TTFT_CHECK, ERROR_RATE_CHECK])
            .values("scan_id", "check_id", "value"))}
    finished = dict(
        scoped_to_teams(Scan, team_ids)
        .filter(endpoint__in=endpoint_ids,
                status__in=[ScanStatus.SUCCEEDED, ScanStatus.ERRORED])
        .exclude(finished_at=None)
        .order_by("endpoint_id", "-finished_at").distinct("endpoint_id")
        .values_list("endpoint_id", F("finished_at")))
    # No sample for an endpoint whose scans never searched.
    searched = {r["endpoint_id"]: r for r in state.newest_per_endpoint(
        scoped_to_teams(Scan, team_ids).filter(status=ScanStatus.SUCCEEDED)
        .exclude(capacity_outcome=""), team_ids, endpoint_ids)
        .values("endpoint_id", "capacity_outcome", "capacity_concurrency")}
    states = state.states_for(endpoints)
    now = timezone.now()

    for endpoint in endpoints:
        labels = (endpoint.name, str(endpoint.public_id), endpoint.team.slug)
        current_state.add_metric(labels, states[endpoint.pk].number)
        if endpoint.pk in finished:
            age.add_metric(labels, round((now - finished[endpoint.pk]).total_seconds(), 3))
        if (found := searched.get(endpoint.pk)) is not None:
            capacity.add_metric(labels, float(found["capacity_concurrency"] or 0))
            capacity_bound.add_metric(
                labels, float(found["capacity_outcome"] == CapacityOutcome.MET_AT_HIGHEST))
        row = graded.get(endpoint.pk)
        if row is None:
            continue
        grade.add_metric(labels, GRADE_NUMBERS.get(row["grade"], 0))
        if row["points"] is not None:
            points.add_metric(labels, float(row["points"]))
        if (value := checks.get((row["pk"], TTFT_CHECK))) is not None:
            ttft.add_metric(labels, value / 1000.0)
        if (value := checks.get((row["pk"], ERROR_RATE_CHECK))) is not None:
            errors.add_metric(labels, value)
        if row["rate"] not in (None, ""):
            speed.add_metric(labels, float(row["rate"]))
    return generate_latest(registry)


class TeamMetricsView(APIView):
    """Prometheus text for the caller's team: a team token sees its own team only."""

    permission_classes = [IsAuthenticated]

    @extend_schema(responses={(200, "text/plain"): OpenApiTypes.STR},
                   description="Prometheus text exposition format 0.0.4 (docs/metrics.md).")
    def get(self, request: Request) -> HttpResponse:
        access = Access.for_request(request)
        endpoints = list(Endpoint.objects.visible_to(access).select_related("team")
                         .order_by("name", "pk"))
        return HttpResponse(render(endpoints), content_type=CONTENT_TYPE)
