"""The REST API under /api/v1/: team resources (accounts) and endpoints and scans (scans)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from accounts import api
from scans import api_endpoints

router = SimpleRouter(trailing_slash=True)
# Accept both /report.json and /report.json/ (and …/reports), as the API is documented.
router.trailing_slash = "/?"
router.register("teams", api.TeamViewSet, basename="api-team")
router.register("endpoints", api_endpoints.EndpointViewSet, basename="api-endpoint")
router.register("scans", api_endpoints.ScanViewSet, basename="api-scan")

urlpatterns = [path("me/", api.whoami, name="api-whoami"), *router.urls]
