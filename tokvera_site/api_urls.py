"""The REST API under /api/v1/: its root (what is here), team resources (accounts), endpoints
and scans (scans), and the team's Prometheus metrics."""

from django.urls import path, reverse
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from accounts import api
from audit.api import AuditViewSet
from scans.api.channels import ChannelViewSet
from scans.api.config import ConfigView
from scans.api.endpoints import EndpointViewSet
from scans.api.incidents import IncidentViewSet
from scans.api.maintenance import MaintenanceWindowViewSet
from scans.api.metrics import TeamMetricsView
from scans.api.scans import ScanViewSet
from scans.api.sla import SlaCsvView, SlaPdfView, SlaReportView
from scans.api.status_pages import StatusPageView

router = SimpleRouter(trailing_slash=True)
# Accept both /report.json and /report.json/ (and …/reports), as the API is documented.
router.trailing_slash = "/?"
router.register("teams", api.TeamViewSet, basename="api-team")
router.register("endpoints", EndpointViewSet, basename="api-endpoint")
router.register("scans", ScanViewSet, basename="api-scan")
router.register("channels", ChannelViewSet, basename="api-channel")
router.register("maintenance-windows", MaintenanceWindowViewSet, basename="api-maintenance-window")
router.register("incidents", IncidentViewSet, basename="api-incident")

# The API root's list: name → (URL name, what it is). Public: it names URLs, no team data.
RESOURCES = {
    "me": ("api-whoami", "who the caller is: user or team token, and its teams"),
    "teams": ("api-team-list", "the caller's teams; a team's audit log at "
                               "/api/v1/teams/<slug>/audit/ (owners and admins), its SLA "
                               "report at /api/v1/teams/<slug>/sla/ (and report.csv, "
                               "report.pdf), its status page at "
                               "/api/v1/teams/<slug>/status-page/, its whole configuration "
                               "(export, apply) at /api/v1/teams/<slug>/config/"),
    "endpoints": ("api-endpoint-list", "the teams' endpoints; per endpoint its scans, history, "
                                       "capacity and reports (a scan: /api/v1/scans/<id>/)"),
    "channels": ("api-channel-list", "the teams' notification channels; per channel a test "
                                     "message and its delivery history"),
    "maintenance-windows": ("api-maintenance-window-list",
                            "the teams' maintenance windows: alerts held, time left out of the SLO"),
    "incidents": ("api-incident-list", "the teams' incidents: problems grouped, their timeline; "
                                       "acknowledge, updates, postmortem, manual incidents"),
    "metrics": ("api-metrics", "Prometheus text: per-endpoint gauges of the token's team"),
    "schema": ("api-schema", "the OpenAPI 3 schema"),
    "docs": ("api-docs", "Swagger UI"),
    "redoc": ("api-redoc", "Redoc"),
}


@extend_schema(exclude=True)
@api_view(["GET"])
@permission_classes([AllowAny])
def api_root(request):
    """What the API holds, with absolute URLs (like GitHub's API root)."""
    return Response({
        name: {"url": request.build_absolute_uri(reverse(url_name)), "description": text}
        for name, (url_name, text) in RESOURCES.items()
    })


urlpatterns = [
    path("", api_root, name="api-root"),
    path("me/", api.whoami, name="api-whoami"),
    path("metrics", TeamMetricsView.as_view(), name="api-metrics"),
    path("teams/<slug:slug>/audit/", AuditViewSet.as_view({"get": "list"}), name="api-team-audit"),
    path("teams/<slug:slug>/sla/", SlaReportView.as_view(), name="api-sla"),
    path("teams/<slug:slug>/sla/report.csv", SlaCsvView.as_view(),
         name="api-sla-csv"),
    path("teams/<slug:slug>/sla/report.pdf", SlaPdfView.as_view(),
         name="api-sla-pdf"),
    path("teams/<slug:slug>/status-page/", StatusPageView.as_view(), name="api-status-page"),
    path("teams/<slug:slug>/config/", ConfigView.as_view(), name="api-team-config"),
    *router.urls,
]
