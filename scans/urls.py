"""The team pages of endpoints and scans, and the public badges (views in scans/pages/)."""

from django.urls import path, re_path

from scans.pages import badges, channels, compare, connection, dashboard, endpoint, scan, status_page

urlpatterns = [
    path("teams/<slug:slug>/", dashboard.team_dashboard, name="team-dashboard"),
    path("teams/<slug:slug>/compare", compare.endpoints_compare, name="endpoints-compare"),
    path("teams/<slug:slug>/endpoints/new", endpoint.endpoint_create, name="endpoint-create"),
    path("teams/<slug:slug>/endpoints/test-connection", connection.test_connection_new,
         name="endpoint-test-connection-new"),
    path("teams/<slug:slug>/channels/", channels.channel_list, name="team-channels"),
    path("teams/<slug:slug>/channels/new", channels.channel_create, name="channel-create"),
    path("channels/<uuid:public_id>/edit", channels.channel_edit, name="channel-edit"),
    path("channels/<uuid:public_id>/delete", channels.channel_delete, name="channel-delete"),
    path("channels/<uuid:public_id>/test", channels.channel_test, name="channel-test"),
    path("endpoints/<uuid:public_id>/", endpoint.endpoint_detail, name="endpoint-detail"),
    path("endpoints/<uuid:public_id>/edit", endpoint.endpoint_edit, name="endpoint-edit"),
    path("endpoints/<uuid:public_id>/test-connection", connection.test_connection,
         name="endpoint-test-connection"),
    path("endpoints/<uuid:public_id>/delete", endpoint.endpoint_delete, name="endpoint-delete"),
    path("endpoints/<uuid:public_id>/scan", endpoint.endpoint_scan_now, name="endpoint-scan-now"),
    path("endpoints/<uuid:public_id>/prompt-sample/delete",
         endpoint.endpoint_prompt_sample_delete, name="endpoint-prompt-sample-delete"),
    path("endpoints/<uuid:public_id>/badge/rotate", endpoint.endpoint_badge_rotate,
         name="endpoint-badge-rotate"),
    path("scans/<uuid:public_id>/", scan.scan_detail, name="scan-detail"),
    path("scans/<uuid:public_id>/report.html", scan.scan_report_html, name="scan-report-html"),
    path("scans/<uuid:public_id>/status.json", scan.scan_status, name="scan-status"),
    path("scans/<uuid:public_id>/cancel", scan.scan_cancel, name="scan-cancel"),
    path("scans/<uuid:public_id>/compare", compare.scan_compare, name="scan-compare"),
    path("teams/<slug:slug>/status-page/", status_page.status_page_settings,
         name="status-page-settings"),
    # A team's public status page (no login): the slug is the whole address.
    re_path(r"^status/(?P<slug>[a-z0-9-]{3,50})/$", status_page.public_status_page,
            name="status-page"),
    re_path(r"^badge/(?P<key>[A-Za-z0-9_-]{8,40})\.svg$", badges.badge_svg, name="badge-svg"),
    re_path(r"^badge/(?P<key>[A-Za-z0-9_-]{8,40})\.json$", badges.badge_json, name="badge-json"),
]
