"""Endpoints, scans and badges (views in scans/views_endpoints.py)."""

from django.urls import path, re_path

from scans import views_endpoints

urlpatterns = [
    path("teams/<slug:slug>/", views_endpoints.team_dashboard, name="team-dashboard"),
    # endpoints, scans and badges (scans/views_endpoints.py)
    path("teams/<slug:slug>/compare", views_endpoints.endpoints_compare,
         name="endpoints-compare"),
    path("teams/<slug:slug>/endpoints/new", views_endpoints.endpoint_create,
         name="endpoint-create"),
    path("endpoints/<uuid:public_id>/", views_endpoints.endpoint_detail, name="endpoint-detail"),
    path("endpoints/<uuid:public_id>/edit", views_endpoints.endpoint_edit, name="endpoint-edit"),
    path("endpoints/<uuid:public_id>/delete", views_endpoints.endpoint_delete,
         name="endpoint-delete"),
    path("endpoints/<uuid:public_id>/scan", views_endpoints.endpoint_scan_now,
         name="endpoint-scan-now"),
    path("endpoints/<uuid:public_id>/prompt-sample/delete",
         views_endpoints.endpoint_prompt_sample_delete, name="endpoint-prompt-sample-delete"),
    path("endpoints/<uuid:public_id>/badge/rotate", views_endpoints.endpoint_badge_rotate,
         name="endpoint-badge-rotate"),
    path("scans/<uuid:public_id>/", views_endpoints.scan_detail, name="scan-detail"),
    path("scans/<uuid:public_id>/report.html", views_endpoints.scan_report_html,
         name="scan-report-html"),
    path("scans/<uuid:public_id>/status.json", views_endpoints.scan_status, name="scan-status"),
    path("scans/<uuid:public_id>/compare", views_endpoints.scan_compare, name="scan-compare"),
    re_path(r"^badge/(?P<key>[A-Za-z0-9_-]{8,40})\.svg$", views_endpoints.badge_svg,
            name="badge-svg"),
    re_path(r"^badge/(?P<key>[A-Za-z0-9_-]{8,40})\.json$", views_endpoints.badge_json,
            name="badge-json"),
]
