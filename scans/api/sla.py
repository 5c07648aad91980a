"""`GET /api/v1/teams/<slug>/sla/`: the team's SLA report (scans/sla.py) as JSON, and as CSV
or PDF at `report.csv` and `report.pdf`: a month (`month=2026-11`, the last whole month by
default) or a range of UTC days (`since`, `until`, both included). Any role of the team reads
it; outsiders get 404."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import Team
from accounts.tenancy import Access
from common.errors import Unprocessable
from scans import sla
from scans.models import Endpoint

PARAMETERS = [
    OpenApiParameter("month", {"type": "string", "pattern": r"^[0-9]{4}-(0[1-9]|1[0-2])$"},
                     description="YYYY-MM (default: the last whole month)"),
    OpenApiParameter("since", OpenApiTypes.DATE, description="first day (with until)"),
    OpenApiParameter("until", OpenApiTypes.DATE, description="last day, included (with since)"),
]
#: A well-formed range the report cannot cover (no schema states it): a 422.
UNREPORTABLE = OpenApiResponse(description=(
    'A range that cannot be reported, nothing else wrong: a month with since or until, an '
    'end before the start, more than 367 days, a start in the future (`{"range": ["…"]}`).'))


def _team(request: Request, slug: str) -> Team:
    team = Team.objects.visible_to(Access.for_request(request)).filter(slug=slug).first()
    if team is None:
        raise exceptions.NotFound("No such team.")
    return team


def _report(request: Request, slug: str) -> tuple[Team, sla.SlaReport, str]:
    team = _team(request, slug)
    now = timezone.now()
    params = request.query_params
    try:
        start, end = sla.parse_range(params.get("month"), params.get("since"),
                                     params.get("until"), now.date())
    except sla.MalformedRange as exc:
        raise exceptions.ValidationError({"range": [str(exc)]}) from None
    except sla.RangeError as exc:
        raise Unprocessable({"range": [str(exc)]}) from None
    endpoints = Endpoint.objects.for_team(team.pk).order_by("name", "pk")
    name = f"sla-{team.slug}-{start:%Y-%m-%d}-to-{end - timedelta(days=1):%Y-%m-%d}"
    return team, sla.sla_report(endpoints, start, end, now), name


def _line(line: sla.EndpointSla, endpoint: bool = True) -> dict[str, Any]:
    return {
        **({"endpoint": line.endpoint.public_id, "name": line.endpoint.name} if endpoint else {}),
        "availability": line.availability, "down_s": line.down_s, "covered_s": line.covered_s,
        "uncovered_s": line.uncovered_s, "maintenance_s": line.maintenance_s,
        "slo_objective": line.objective, "slo_attainment": line.attainment,
        "slo_met": line.met, "error_budget_s": line.budget_s,
        "error_budget_spent": line.budget_spent, "grades": line.grades,
        "down_scans": line.down_scans,
        "incidents": [{"started_at": i.started_at, "ended_at": i.ended_at,
                       "duration_s": i.duration_s(line.until)} for i in line.incidents],
    }


class SlaReportView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(parameters=PARAMETERS, responses={200: OpenApiTypes.OBJECT,
                                                     422: UNREPORTABLE},
                   description="The team's SLA report: per endpoint and for the team, "
                               "availability of the covered time, SLO attainment and error "
                               "budget spent, time uncovered, maintenance left out, grades and "
                               "incidents (docs/api.md, \"SLA reports\").")
    def get(self, request: Request, slug: str) -> Response:
        team, report, _ = _report(request, slug)
        total = report.team
        return Response({
            "team": team.slug, "from": report.start, "to": report.end - timedelta(days=1),
            "until": report.until, "partial": report.partial,
            "endpoints": [_line(line) for line in report.endpoints],
            "team_totals": _line(total, endpoint=False) if total else None,
        })


class _SlaFileView(APIView):
    permission_classes = [IsAuthenticated]
    kind = ""

    def get(self, request: Request, slug: str) -> HttpResponse:
        team, report, name = _report(request, slug)
        if self.kind == "pdf":
            response = HttpResponse(sla.report_pdf(report, team.name),
                                    content_type="application/pdf")
        else:
            response = HttpResponse(sla.report_csv(report, team.name),
                                    content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}.{self.kind}"'
        return response


class SlaCsvView(_SlaFileView):
    kind = "csv"

    @extend_schema(parameters=PARAMETERS, responses={(200, "text/csv"): OpenApiTypes.STR,
                                                     422: UNREPORTABLE},
                   description="The report as CSV: one row per endpoint and the team's totals; "
                               "times in seconds, shares as fractions.")
    def get(self, request: Request, slug: str) -> HttpResponse:
        return super().get(request, slug)


class SlaPdfView(_SlaFileView):
    kind = "pdf"

    @extend_schema(parameters=PARAMETERS,
                   responses={(200, "application/pdf"): OpenApiTypes.BINARY,
                              422: UNREPORTABLE},
                   description="The report as a PDF.")
    def get(self, request: Request, slug: str) -> HttpResponse:
        return super().get(request, slug)
