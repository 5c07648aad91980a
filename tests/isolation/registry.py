"""Every URL of the site, classified. A URL that is not listed here fails the isolation suite.

- PUBLIC: no login needed, no team data (tested in their own modules).
- ACCOUNT: login needed, but not owned by one team (home, whoami).
- HOST_TOKEN: called by network hosts with a host token (tested with the network).
- TEAM: team-owned; walked by test_every_team_url for every kind of caller.
Admin URLs (namespace `admin`) are staff-only and checked in test_admin_is_staff_only.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from django.utils import timezone

from accounts.models import ApiToken, Invitation, Membership, Role, Team
from scans.models import Endpoint, Scan
from tests.helpers.factories import make_endpoint, make_scan, measured_report

PUBLIC = {"healthz", "site-metrics", "api-schema", "api-docs", "invite-accept",
          "api-root", "api-redoc"}
ACCOUNT = {"home", "api-whoami"}

# Signing in (django-allauth): pages for callers not logged in yet, or in the middle of it
# (the two-factor step of a login). tests/accounts covers their flows.
PUBLIC |= {"account_login", "account_logout", "account_inactive", "account_signup",
           "account_email_verification_sent", "account_reset_password",
           "account_reset_password_done", "account_reset_password_from_key",
           "account_reset_password_from_key_done", "account_confirm_login_code", "mfa_authenticate"}
# One user's own account: login required, nothing of a team, nothing of another user
# (tests/isolation/test_account_urls.py walks them).
ACCOUNT |= {"profile", "team-create", "account_email", "account_change_password",
            "account_set_password", "account_reauthenticate", "account_request_reauthentication_code",
            "account_confirm_reauthentication_code", "mfa_index", "mfa_reauthenticate",
            "mfa_activate_totp", "mfa_deactivate_totp", "mfa_view_recovery_codes",
            "mfa_generate_recovery_codes", "mfa_download_recovery_codes", "mfa_list_webauthn",
            "mfa_add_webauthn", "mfa_reauthenticate_webauthn", "mfa_remove_webauthn",
            "mfa_edit_webauthn"}
# Single sign-on (django-allauth's socialaccount): the sign-in flow, and one user's own linked
# sign-ins (tests/accounts/test_single_sign_on.py covers the flow).
PUBLIC |= {"openid_connect_login", "openid_connect_callback", "socialaccount_login_cancelled",
           "socialaccount_login_error", "socialaccount_signup"}
ACCOUNT |= {"socialaccount_connections"}
HOST_TOKEN: set[str] = {"host-heartbeat", "host-lease", "job-start", "job-complete",
                        "job-complete-many", "job-fail"}


@dataclass(frozen=True)
class Case:
    kind: str  # "page" or "api"
    method: str
    needs: str  # "read", "write" or "manage"
    kwargs: Callable = lambda w: {"slug": w.team.slug}
    data: Callable = lambda w: None
    ok: frozenset = field(default_factory=lambda: frozenset({200}))
    # For writes: did the request take effect? Asserted true for allowed callers, false otherwise.
    effect: Callable | None = None
    listing: bool = False  # a list: outsiders get 200 without the team's rows, not 404
    query: str = ""  # appended to the URL (e.g. required query parameters)


def _membership(w, user) -> Membership:
    return Membership.dangerously_unscoped.get(team=w.team, user=user)


def _endpoint(w) -> Endpoint:
    existing = Endpoint.dangerously_unscoped.filter(team=w.team).first()
    return existing or make_endpoint(w.team)


def _endpoint_id(w) -> dict:
    return {"public_id": _endpoint(w).public_id}


def _pushed_endpoint_id(w) -> dict:
    """The team's endpoint, taking pushed reports (a scheduled one refuses them by default)."""
    endpoint = _endpoint(w)
    Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(accepts_pushes=True)
    return {"public_id": endpoint.public_id}


def _scan_id(w) -> dict:
    scan = Scan.dangerously_unscoped.filter(endpoint__team=w.team).first()
    return {"public_id": (scan or make_scan(_endpoint(w))).public_id}


def _running_manual_scan_id(w) -> dict:
    """A manual scan of the team's endpoint that a worker is running (the cancel button's)."""
    from django.utils import timezone

    from scans.models import ScanStatus, ScanTrigger

    scan = Scan.dangerously_unscoped.create(endpoint=_endpoint(w), trigger=ScanTrigger.MANUAL,
                                            status=ScanStatus.RUNNING, started_at=timezone.now())
    return {"public_id": scan.public_id}


def _manual_scan_cancelled(w) -> bool:
    return Scan.dangerously_unscoped.filter(endpoint__team=w.team, trigger="manual",
                                            status="cancelled").exists()


def _endpoint_with_scan_id(w) -> dict:
    _scan_id(w)
    return _endpoint_id(w)


def _endpoint_with_capacity_id(w) -> dict:
    """The team's endpoint with a scan that searched for its capacity."""
    scan_id = _scan_id(w)["public_id"]
    Scan.dangerously_unscoped.filter(public_id=scan_id).update(
        capacity_outcome="met", capacity_concurrency=6, capacity_requests_per_s=12.5)
    return _endpoint_id(w)


def _network_job(w):
    from benchmarks.models import CatalogModel, Job

    model, _ = CatalogModel.objects.get_or_create(
        id="isolation-model", defaults={"display_name": "Isolation", "quant": "q4", "context_len": 4096})
    return Job.dangerously_unscoped.create(
        team=w.team, model=model, max_tokens=8, request_json={"messages": [], "max_tokens": 8})


def _network_submission(w) -> dict:
    from benchmarks.models import CatalogModel
    from benchmarks.network import hosts

    CatalogModel.objects.get_or_create(
        id="isolation-model", defaults={"display_name": "Isolation", "quant": "q4", "context_len": 4096})
    # An online host serves it (another team's: routing matches across teams), or the
    # submission is refused with 503 before any team rule is tried.
    _, token = hosts.create_host(w.other_team, f"isolation-host-{uuid.uuid4().hex[:8]}")
    hosts.heartbeat(token, ["isolation-model"], {}, 1)
    return {"team": w.team.slug, "model": "isolation-model", "max_tokens": 8,
            "messages": [{"role": "user", "content": "hello"}]}


def _network_batch_submission(w) -> dict:
    one = _network_submission(w)
    team = one.pop("team")
    return {"team": team, "jobs": [one, one]}


def _network_job_submitted(w) -> bool:
    from benchmarks.models import Job

    return Job.dangerously_unscoped.filter(team=w.team).exists()


def _invitation(w) -> Invitation:
    """An open invitation of the team, its link hash known (so a resend shows as a new hash)."""
    existing = Invitation.dangerously_unscoped.filter(team=w.team, email="invited@example.test").first()
    return existing or Invitation.dangerously_unscoped.create(
        team=w.team, email="invited@example.test", role=Role.MEMBER,
        secret_hash=f"isolation-{w.team.slug}", expires_at=timezone.now() + timedelta(hours=1))


def _invitation_id(w) -> dict:
    return {"slug": w.team.slug, "public_id": _invitation(w).public_id}


def _spare_token(w) -> ApiToken:
    from accounts import teams

    token, _ = teams.issue_token(w.team, "read-only", name="spare")
    return token


TEAM: dict[str, list[Case]] = {
    "team-dashboard": [Case("page", "GET", "read")],
    # With an endpoint already there, a writer is sent back to the dashboard, adding nothing.
    "team-demo-endpoint": [Case("page", "POST", "write", ok=frozenset({302}),
                                kwargs=lambda w: {"slug": _endpoint(w).team.slug})],
    "team-switch": [Case("page", "POST", "read", ok=frozenset({302}))],
    "team-members": [Case("page", "GET", "read")],
    "member-invite": [
        Case(
            "page", "POST", "manage",
            data=lambda w: {"email": "new.person@example.test", "role": "member"},
            ok=frozenset({302}),
            effect=lambda w: Invitation.dangerously_unscoped.filter(
                team=w.team, email="new.person@example.test").exists(),
        )
    ],
    "member-role": [
        Case(
            "page", "POST", "manage",
            kwargs=lambda w: {"slug": w.team.slug, "public_id": _membership(w, w.target).public_id},
            data=lambda w: {"role": "viewer"},
            ok=frozenset({302}),
            effect=lambda w: _membership(w, w.target).role == Role.VIEWER,
        )
    ],
    "member-remove": [
        Case(
            "page", "POST", "manage",
            kwargs=lambda w: {"slug": w.team.slug, "public_id": _membership(w, w.target).public_id},
            ok=frozenset({302}),
            effect=lambda w: not Membership.dangerously_unscoped.filter(
                team=w.team, user=w.target).exists(),
        )
    ],
    "team-tokens": [Case("page", "GET", "read")],
    "team-settings": [
        Case("page", "GET", "read"),
        Case(
            "page", "POST", "own", data=lambda w: {"badge_site_measured_only": "on"},
            ok=frozenset({302}),
            effect=lambda w: Team.dangerously_unscoped.get(pk=w.team.pk).badge_site_measured_only,
        ),
    ],
    "team-rename": [
        Case(
            "page", "POST", "own", data=lambda w: {"name": "Renamed Acme"}, ok=frozenset({302}),
            effect=lambda w: Team.dangerously_unscoped.get(pk=w.team.pk).name == "Renamed Acme",
        )
    ],
    # Owners only: "own" is a need only owners meet (test_every_team_url.ROLE_ALLOWS).
    "team-delete": [
        Case("page", "GET", "own"),
        Case(
            "page", "POST", "own", data=lambda w: {"confirm_name": w.team.name}, ok=frozenset({302}),
            effect=lambda w: not Team.dangerously_unscoped.filter(pk=w.team.pk).exists(),
        ),
    ],
    "invitation-revoke": [
        Case(
            "page", "POST", "manage", kwargs=_invitation_id, ok=frozenset({302}),
            effect=lambda w: not Invitation.dangerously_unscoped.filter(
                team=w.team, email="invited@example.test").exists(),
        )
    ],
    "invitation-resend": [
        Case(
            "page", "POST", "manage", kwargs=_invitation_id, ok=frozenset({302}),
            effect=lambda w: _invitation(w).secret_hash != f"isolation-{w.team.slug}",
        )
    ],
    "token-create": [
        Case(
            "page", "POST", "manage",
            data=lambda w: {"scope": "read-only", "name": "made-by-test"},
            effect=lambda w: ApiToken.dangerously_unscoped.filter(
                team=w.team, name="made-by-test").exists(),
        )
    ],
    "token-revoke": [
        Case(
            "page", "POST", "manage",
            kwargs=lambda w: {"slug": w.team.slug, "public_id": _spare_token(w).public_id},
            ok=frozenset({302}),
            effect=lambda w: ApiToken.dangerously_unscoped.get(
                team=w.team, name="spare").revoked_at is not None,
        )
    ],
    "api-team-list": [Case("api", "GET", "read", kwargs=lambda w: {}, listing=True)],
    "api-team-detail": [
        Case("api", "GET", "read"),
        Case(
            "api", "PATCH", "own",
            data=lambda w: {"name": "Renamed Acme"},
            effect=lambda w: Team.dangerously_unscoped.get(pk=w.team.pk).name == "Renamed Acme",
        ),
    ],
    "api-endpoint-list": [
        Case("api", "GET", "read", kwargs=lambda w: _endpoint(w) and {}, listing=True),
        Case(
            "api", "POST", "write", kwargs=lambda w: {},
            data=lambda w: {"team": w.team.slug, "name": "made-by-test",
                            "base_url": "http://127.0.0.1:9/v1", "model": "m", "levels": [1, 2]},
            ok=frozenset({201}),
            effect=lambda w: Endpoint.dangerously_unscoped.filter(
                team=w.team, name="made-by-test").exists(),
        ),
    ],
    "api-endpoint-detail": [
        Case("api", "GET", "read", kwargs=_endpoint_id),
        Case(
            "api", "PATCH", "write", kwargs=_endpoint_id, data=lambda w: {"name": "renamed"},
            effect=lambda w: _endpoint(w).name == "renamed",
        ),
        Case(
            "api", "DELETE", "write", kwargs=_endpoint_id, ok=frozenset({204}),
            effect=lambda w: not Endpoint.dangerously_unscoped.filter(team=w.team).exists(),
        ),
    ],
    "api-endpoint-scans": [
        Case("api", "GET", "read", kwargs=_endpoint_id),
        Case(
            "api", "POST", "write", kwargs=_endpoint_id, ok=frozenset({202}),
            effect=lambda w: Scan.dangerously_unscoped.filter(
                endpoint__team=w.team, trigger="api").exists(),
        ),
    ],
    "api-endpoint-history": [
        Case("api", "GET", "read", kwargs=_endpoint_with_scan_id, query="?check=error_rate"),
    ],
    "api-endpoint-capacity": [Case("api", "GET", "read", kwargs=_endpoint_with_capacity_id)],
    "api-endpoint-probes": [Case("api", "GET", "read", kwargs=_endpoint_id)],
    "api-endpoint-slo": [Case("api", "GET", "read", kwargs=_endpoint_with_scan_id)],
    "api-endpoint-reports": [
        Case(
            # 202: taken for the proof workers.
            "api", "POST", "write", kwargs=_pushed_endpoint_id, data=lambda w: measured_report(),
            ok=frozenset({202}),
            effect=lambda w: Scan.dangerously_unscoped.filter(
                endpoint__team=w.team, pushed=True).exists(),
        ),
    ],
    # Prometheus text: another team's caller gets 200 with none of this team's endpoints.
    "api-metrics": [Case("api", "GET", "read", kwargs=lambda w: (_endpoint(w), {})[1],
                         listing=True)],
    "api-sla": [Case("api", "GET", "read",
                     kwargs=lambda w: (_endpoint(w), {"slug": w.team.slug})[1])],
    "api-sla-csv": [Case("api", "GET", "read",
                         kwargs=lambda w: (_endpoint(w), {"slug": w.team.slug})[1])],
    "api-sla-pdf": [Case("api", "GET", "read",
                         kwargs=lambda w: (_endpoint(w), {"slug": w.team.slug})[1])],
    "api-scan-detail": [Case("api", "GET", "read", kwargs=_scan_id)],
    "api-scan-report": [Case("api", "GET", "read", kwargs=_scan_id)],
    "api-scan-cancel": [Case("api", "POST", "write", kwargs=_running_manual_scan_id,
                             effect=_manual_scan_cancelled)],
    "job-submit": [
        Case(
            "api", "POST", "write",
            kwargs=lambda w: {},
            data=_network_submission,
            ok=frozenset({202}),
            effect=_network_job_submitted,
        )
    ],
    # The body's team slug, as /v1/jobs: another team's caller gets 404, a read-only one 403.
    "job-submit-batch": [
        Case(
            "api", "POST", "write",
            kwargs=lambda w: {},
            data=_network_batch_submission,
            ok=frozenset({202}),
            effect=_network_job_submitted,
        )
    ],
    "job-detail": [
        Case("api", "GET", "read", kwargs=lambda w: {"job_id": _network_job(w).id}),
    ],
}


# --- endpoint and scan pages (scans/pages/) ---------------------------------------------------

# Public badges: no login, nothing but the grade (tests/scans/pages/test_badges.py).
PUBLIC |= {"badge-svg", "badge-json"}

# Public benchmarks: aggregates only, no login (tests/benchmarks/public/).
PUBLIC |= {"public-slo", "public-stats", "benchmarks", "benchmarks-methodology"}

# A team's public status page: only what the team chose to show, no login
# (tests/scans/pages/test_status_page.py checks another team's data never appears).
PUBLIC |= {"status-page"}
# Its Atom feed and email subscription (the addresses are never shown; the links carry signed
# tokens): tests/scans/status_pages/test_subscriptions.py.
PUBLIC |= {"status-page-feed", "status-page-subscribe", "status-page-confirm", "status-page-unsubscribe"}


def _status_page_enabled(w) -> bool:
    from scans.models import StatusPage

    return StatusPage.dangerously_unscoped.filter(team=w.team, enabled=True).exists()


TEAM["status-page-settings"] = [
    Case("page", "GET", "read"),
    Case("page", "POST", "write", data=lambda w: {"enabled": "on", "title": "Up or not"},
         ok=frozenset({302}), effect=_status_page_enabled),
]


def _page_form(name: str) -> dict:
    return {"name": name, "base_url": "http://127.0.0.1:9/v1", "model": "m",
            "mode": "scheduled", "levels_text": "1, 2", "max_tokens": 16, "timeout_s": 10,
            "interval_minutes": 60, "enabled": "on", "slo_grade_floor": "B",
            "slo_objective": 0.9, "alert_after_errors": 3}


def _pinned_badge_id(w) -> dict:
    endpoint = _endpoint(w)
    Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(badge_key=f"pinned-{w.team.slug}")
    return {"public_id": endpoint.public_id}


def _prompt_sample_id(w) -> dict:
    from accounts import encryption

    endpoint = _endpoint(w)
    Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(
        prompt_sample_encrypted=encryption.encrypt("hello\nworld"))
    return {"public_id": endpoint.public_id}


TEAM.update({
    "endpoint-create": [
        Case("page", "GET", "write"),
        Case(
            "page", "POST", "write", data=lambda w: _page_form("made-by-page"),
            ok=frozenset({302}),
            effect=lambda w: Endpoint.dangerously_unscoped.filter(
                team=w.team, name="made-by-page").exists(),
        ),
    ],
    "endpoint-detail": [Case("page", "GET", "read", kwargs=_endpoint_with_scan_id)],
    # Test connection writes nothing; a discard-port URL answers at once (or the guard refuses).
    "endpoint-test-connection-new": [
        Case("page", "POST", "write", data=lambda w: {"base_url": "http://127.0.0.1:9/v1",
                                                       "model": "m"}),
    ],
    "endpoint-test-connection": [
        Case("page", "POST", "write", kwargs=_endpoint_id,
             data=lambda w: {"base_url": "http://127.0.0.1:9/v1", "model": "m"}),
    ],
    "endpoint-edit": [
        Case("page", "GET", "write", kwargs=_endpoint_id),
        Case(
            "page", "POST", "write", kwargs=_endpoint_id,
            data=lambda w: _page_form("renamed-by-page"), ok=frozenset({302}),
            effect=lambda w: _endpoint(w).name == "renamed-by-page",
        ),
    ],
    "endpoint-delete": [
        Case("page", "GET", "write", kwargs=_endpoint_id),
        Case(
            "page", "POST", "write", kwargs=_endpoint_id, ok=frozenset({302}),
            effect=lambda w: not Endpoint.dangerously_unscoped.filter(team=w.team).exists(),
        ),
    ],
    "endpoint-scan-now": [
        Case(
            "page", "POST", "write", kwargs=_endpoint_id, ok=frozenset({302}),
            effect=lambda w: Scan.dangerously_unscoped.filter(
                endpoint__team=w.team, trigger="manual").exists(),
        ),
    ],
    "endpoint-prompt-sample-delete": [
        Case(
            "page", "POST", "write", kwargs=_prompt_sample_id, ok=frozenset({302}),
            effect=lambda w: not _endpoint(w).has_prompt_sample,
        ),
    ],
    "endpoint-badge-rotate": [
        Case(
            "page", "POST", "manage", kwargs=_pinned_badge_id, ok=frozenset({302}),
            effect=lambda w: _endpoint(w).badge_key != f"pinned-{w.team.slug}",
        ),
    ],
    "scan-detail": [Case("page", "GET", "read", kwargs=_scan_id)],
    "scan-report-html": [Case("page", "GET", "read", kwargs=_scan_id)],
    "scan-status": [Case("page", "GET", "read", kwargs=_scan_id)],
    "scan-cancel": [
        Case("page", "POST", "write", kwargs=_running_manual_scan_id, ok=frozenset({302}),
             effect=_manual_scan_cancelled),
    ],
    "scan-compare": [Case("page", "GET", "read", kwargs=_scan_id)],
    "endpoints-compare": [Case("page", "GET", "read")],
})


# --- notification channels (scans/pages/channels.py) -------------------------------


def _channel(w):
    from scans.models import NotificationChannel

    existing = NotificationChannel.dangerously_unscoped.filter(team=w.team, kind="email").first()
    return existing or NotificationChannel.dangerously_unscoped.create(
        team=w.team, kind="email", name="Email to owners and admins")


def _channel_id(w) -> dict:
    return {"public_id": _channel(w).public_id}


def _channel_named(w, name) -> bool:
    from scans.models import NotificationChannel

    return NotificationChannel.dangerously_unscoped.filter(team=w.team, name=name).exists()


def _test_sent(w) -> bool:
    from scans.models import Delivery

    return Delivery.dangerously_unscoped.filter(channel__team=w.team, event__kind="test").exists()


TEAM.update({
    "team-channels": [Case("page", "GET", "read", kwargs=lambda w: (_channel(w), {"slug": w.team.slug})[1])],
    "channel-create": [
        Case("page", "GET", "channels"),
        Case(
            "page", "POST", "channels", data=lambda w: {"kind": "email", "name": "made-by-page",
                                                     "enabled": "on"},
            ok=frozenset({302}), effect=lambda w: _channel_named(w, "made-by-page"),
        ),
    ],
    "channel-edit": [
        Case("page", "GET", "channels", kwargs=_channel_id),
        Case(
            "page", "POST", "channels", kwargs=_channel_id,
            data=lambda w: {"kind": "email", "name": "renamed-by-page", "enabled": "on"},
            ok=frozenset({302}), effect=lambda w: _channel_named(w, "renamed-by-page"),
        ),
    ],
    "channel-delete": [
        Case("page", "GET", "channels", kwargs=_channel_id),
        Case(
            "page", "POST", "channels", kwargs=_channel_id, ok=frozenset({302}),
            effect=lambda w: not _channel_named(w, "Email to owners and admins"),
        ),
    ],
    # Send test: mail to the owners and admins (the console backend in tests).
    "channel-test": [
        Case("page", "POST", "channels", kwargs=_channel_id, ok=frozenset({302}), effect=_test_sent),
    ],
    # The same through the API (scans/api/channels.py); another team's channel id is a 404.
    "api-channel-list": [
        Case("api", "GET", "read", kwargs=lambda w: (_channel(w), {})[1], listing=True),
        Case(
            "api", "POST", "channels", kwargs=lambda w: {},
            data=lambda w: {"team": w.team.slug, "kind": "email", "name": "made-by-api"},
            ok=frozenset({201}), effect=lambda w: _channel_named(w, "made-by-api"),
        ),
    ],
    "api-channel-detail": [
        Case("api", "GET", "read", kwargs=_channel_id),
        Case("api", "PATCH", "channels", kwargs=_channel_id, data=lambda w: {"name": "renamed-by-api"},
             effect=lambda w: _channel_named(w, "renamed-by-api")),
        Case("api", "DELETE", "channels", kwargs=_channel_id, ok=frozenset({204}),
             effect=lambda w: not _channel_named(w, "Email to owners and admins")),
    ],
    "api-channel-test": [  # 202: a worker sends it
        Case("api", "POST", "channels", kwargs=_channel_id, ok=frozenset({202}), effect=_test_sent),
    ],
    "api-channel-deliveries": [Case("api", "GET", "read", kwargs=_channel_id)],
})


# --- maintenance windows (scans/pages/maintenance.py) ------------------------------


def _window(w):
    from scans.models import MaintenanceWindow

    existing = MaintenanceWindow.dangerously_unscoped.filter(team=w.team).first()
    return existing or MaintenanceWindow.dangerously_unscoped.create(
        team=w.team, name="Monthly upgrade", starts_at=timezone.now() + timedelta(days=1),
        ends_at=timezone.now() + timedelta(days=1, hours=2))


def _window_id(w) -> dict:
    return {"public_id": _window(w).public_id}


def _window_named(w, name) -> bool:
    from scans.models import MaintenanceWindow

    return MaintenanceWindow.dangerously_unscoped.filter(team=w.team, name=name).exists()


def _window_data(name):
    return lambda w: {"name": name, "endpoint": "", "kind": "once", "timezone": "UTC",
                      "starts_at": "2030-01-01T10:00", "ends_at": "2030-01-01T12:00"}


TEAM.update({
    "team-maintenance": [
        Case("page", "GET", "read", kwargs=lambda w: (_window(w), {"slug": w.team.slug})[1]),
    ],
    "team-sla": [
        Case("page", "GET", "read", kwargs=lambda w: (_endpoint(w), {"slug": w.team.slug})[1]),
    ],
    "maintenance-create": [
        Case("page", "GET", "write"),
        Case("page", "POST", "write", data=_window_data("made-by-page"), ok=frozenset({302}),
             effect=lambda w: _window_named(w, "made-by-page")),
    ],
    "maintenance-edit": [
        Case("page", "GET", "write", kwargs=_window_id),
        Case("page", "POST", "write", kwargs=_window_id, data=_window_data("renamed-by-page"),
             ok=frozenset({302}), effect=lambda w: _window_named(w, "renamed-by-page")),
    ],
    "maintenance-delete": [
        Case("page", "GET", "write", kwargs=_window_id),
        Case("page", "POST", "write", kwargs=_window_id, ok=frozenset({302}),
             effect=lambda w: not _window_named(w, "Monthly upgrade")),
    ],
    # the API (scans/api/maintenance.py)
    "api-maintenance-window-list": [
        Case("api", "GET", "read", kwargs=lambda w: (_window(w), {})[1], listing=True),
        Case(
            "api", "POST", "write", kwargs=lambda w: {},
            data=lambda w: {"team": w.team.slug, "name": "made-by-api", "kind": "weekly",
                            "weekdays": [0], "start_time": "02:00", "duration_minutes": 30},
            ok=frozenset({201}), effect=lambda w: _window_named(w, "made-by-api"),
        ),
    ],
    "api-maintenance-window-detail": [
        Case("api", "GET", "read", kwargs=_window_id),
        Case("api", "PATCH", "write", kwargs=_window_id, data=lambda w: {"name": "renamed-by-api"},
             effect=lambda w: _window_named(w, "renamed-by-api")),
        Case("api", "DELETE", "write", kwargs=_window_id, ok=frozenset({204}),
             effect=lambda w: not _window_named(w, "Monthly upgrade")),
    ],
})


# --- incidents (scans/pages/incidents.py, scans/api/incidents.py) --------------------------


def _incident(w):
    from scans.models import Incident

    existing = Incident.dangerously_unscoped.filter(team=w.team, title="Known problem").first()
    if existing is None:
        now = timezone.now()
        existing = Incident.dangerously_unscoped.create(
            team=w.team, title="Known problem", manual=True, opened_at=now, last_problem_at=now)
    return existing


def _incident_id(w) -> dict:
    return {"public_id": _incident(w).public_id}


def _resolved_incident_id(w) -> dict:
    from scans.models import Incident

    incident = _incident(w)
    Incident.dangerously_unscoped.filter(pk=incident.pk).update(resolved_at=timezone.now(),
                                                              status="resolved")
    return {"public_id": incident.public_id}


def _incident_where(w, **lookup) -> bool:
    from scans.models import Incident

    return Incident.dangerously_unscoped.filter(team=w.team, **lookup).exists()


def _incident_said(w, text) -> bool:
    from scans.models import IncidentUpdate

    return IncidentUpdate.dangerously_unscoped.filter(incident__team=w.team, text=text).exists()


TEAM.update({
    "team-incidents": [
        Case("page", "GET", "read", kwargs=lambda w: (_incident(w), {"slug": w.team.slug})[1]),
    ],
    "incident-create": [
        Case("page", "GET", "write"),
        Case("page", "POST", "write", ok=frozenset({302}),
             data=lambda w: {"title": "made-by-page", "status": "investigating", "text": "x"},
             effect=lambda w: _incident_where(w, title="made-by-page")),
    ],
    "incident-detail": [Case("page", "GET", "read", kwargs=_incident_id)],
    "incident-acknowledge": [
        Case("page", "POST", "write", kwargs=_incident_id, ok=frozenset({302}),
             effect=lambda w: _incident_where(w, acknowledged_at__isnull=False)),
    ],
    "incident-update": [
        Case("page", "POST", "write", kwargs=_incident_id, ok=frozenset({302}),
             data=lambda w: {"status": "identified", "text": "said-by-page"},
             effect=lambda w: _incident_said(w, "said-by-page")),
    ],
    "incident-postmortem": [
        Case("page", "POST", "write", kwargs=_resolved_incident_id, ok=frozenset({302}),
             data=lambda w: {"postmortem": "written-by-page"},
             effect=lambda w: _incident_where(w, postmortem="written-by-page")),
    ],
    "api-incident-list": [
        Case("api", "GET", "read", kwargs=lambda w: (_incident(w), {})[1], listing=True),
        Case("api", "POST", "write", kwargs=lambda w: {},
             data=lambda w: {"team": w.team.slug, "title": "made-by-api", "text": "x"},
             ok=frozenset({201}), effect=lambda w: _incident_where(w, title="made-by-api")),
    ],
    "api-incident-detail": [Case("api", "GET", "read", kwargs=_incident_id)],
    "api-incident-acknowledge": [
        Case("api", "POST", "write", kwargs=_incident_id,
             effect=lambda w: _incident_where(w, acknowledged_at__isnull=False)),
    ],
    "api-incident-post-update": [
        Case("api", "POST", "write", kwargs=_incident_id, ok=frozenset({201}),
             data=lambda w: {"status": "identified", "text": "said-by-api"},
             effect=lambda w: _incident_said(w, "said-by-api")),
    ],
    "api-incident-postmortem": [
        Case("api", "PUT", "write", kwargs=_resolved_incident_id,
             data=lambda w: {"postmortem": "written-by-api"},
             effect=lambda w: _incident_where(w, postmortem="written-by-api")),
    ],
})


# --- the status page API and configuration as code (scans/api/status_pages.py, config.py) ---


def _page_titled(w, title) -> bool:
    from scans.models import StatusPage

    return StatusPage.dangerously_unscoped.filter(team=w.team, title=title).exists()


def _endpoint_named(w, name) -> bool:
    return Endpoint.dangerously_unscoped.filter(team=w.team, name=name).exists()


TEAM.update({
    "api-status-page": [
        Case("api", "GET", "read"),
        Case("api", "PATCH", "write", data=lambda w: {"title": "titled-by-api"},
             effect=lambda w: _page_titled(w, "titled-by-api")),
    ],
    "api-team-config": [
        Case("api", "GET", "read"),
        Case("api", "POST", "write",
             data=lambda w: {"config": {"team": w.team.slug, "endpoints": {"applied-by-api": {
                 "base_url": "http://127.0.0.1:9/v1", "model": "tiny"}}}},
             effect=lambda w: _endpoint_named(w, "applied-by-api")),
    ],
})


# --- the audit log (audit/): owners and admins only; tokens never manage -----------------

TEAM.update({
    "team-audit": [Case("page", "GET", "manage")],
    "api-team-audit": [
        Case("api", "GET", "manage"),
        Case("api", "GET", "manage", query="?format=jsonl"),
        Case("api", "GET", "manage", query="?format=csv"),
    ],
})
