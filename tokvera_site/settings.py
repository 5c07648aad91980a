"""Django settings, all from the environment (see tokvera_site/config.py and docs/operations.md)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from kombu import Exchange, Queue

from common.demo_target import demo_target_url
from tokvera_site import config
from tokvera_site.config import VAR_DIR

# templates/ and static/ ship inside this package: links to the top-level folders in a
# checkout, the folders themselves in a wheel (pyproject.toml, package data).
SITE_DIR = Path(__file__).resolve().parent


def _load():
    return {
        "SECRET_KEY": config.secret_key(),
        "FIELD_ENCRYPTION_KEYS": config.field_encryption_keys(),
        # Which private ranges the site's scanner may reach: "" (public internet only) or a
        # comma-separated subset of: loopback, private. The run command and tests use loopback.
        "OUTBOUND_ALLOW": config.string_list("OUTBOUND_ALLOW", []),
        # Where a name connects instead, as curl --resolve: "host:port=ip:port", comma-separated.
        # The guard still judges the address given. Tests point the notification services'
        # fixed hosts (hooks.slack.com, …) at loopback receivers with it (scans/notify/channels/).
        "OUTBOUND_RESOLVE": config.string_list("OUTBOUND_RESOLVE", []),
        "DEBUG": config.flag("DEBUG", default=False),
        "DATABASES": {"default": config.database()},
        "CACHES": {"default": config.cache()},
        "CELERY_BROKER_URL": config.broker_url(),
        "ALLOWED_HOSTS": config.string_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"]),
        "INVITE_MAX_AGE_HOURS": config.integer("INVITE_MAX_AGE_HOURS", 72),
        # The console email backend masks invitation links unless this is on (development).
        "EMAIL_SHOW_SECRETS": config.flag("EMAIL_SHOW_SECRETS", default=False),
        "SITE_URL": config.env.str("SITE_URL", default="http://127.0.0.1:8000").rstrip("/"),
        # The run command's `tokvera target` (Procfile.dev; the Makefile sets its port): an
        # empty dashboard offers it in one click. Unset in production: no such offer.
        "DEMO_TARGET_URL": demo_target_url(),
        # When set, GET /metrics (process metrics only) asks for `Authorization: Bearer <it>`.
        "SITE_METRICS_TOKEN": config.env.str("SITE_METRICS_TOKEN", default=""),
        # Single sign-on's provider and its claim → team role map (below, "Single sign-on").
        "SSO_APP": config.oidc_provider(),
        "SSO_TEAM_ROLES": config.oidc_team_roles(),
        # Per-team limits on POST /v1/jobs, the longest a lease call waits for work and how
        # many wait at once per web process, when the environment sets them (defaults and
        # meaning: benchmarks/policy.py, docs/routing.md).
        **{name: config.integer(name, 0) for name in NETWORK_LIMITS_FROM_ENV if name in os.environ},
        # Scans per worker process and streams in flight across them (see "Scans" below).
        "SCAN_CONCURRENCY_PER_WORKER": config.positive_integer("SCAN_CONCURRENCY_PER_WORKER", 32),
        "SCAN_STREAMS_PER_WORKER": config.positive_integer("SCAN_STREAMS_PER_WORKER", 64),
        # Failed token authentications per client address and window, before 429
        # (common/auth_failures.py).
        "AUTH_FAILURE_LIMIT": config.positive_integer("AUTH_FAILURE_LIMIT", 30),
        "AUTH_FAILURE_WINDOW_S": config.positive_integer("AUTH_FAILURE_WINDOW_S", 60),
        # Reverse proxies in front of the site, each appending to X-Forwarded-For: how the
        # client address is read wherever something is counted per address (0: the
        # connection's own; common/client_address.py, docs/operations.md).
        "TRUSTED_PROXY_COUNT": config.non_negative_integer("TRUSTED_PROXY_COUNT", 0),
        # The periodic tasks' routine lines (beat sending, workers receiving and finishing
        # them) are logged at this level and above only: WARNING keeps them out of the run
        # command's output; INFO shows them (common/logging.py).
        "PERIODIC_TASK_LOG_LEVEL": config.log_level("TOKVERA_PERIODIC_LOG_LEVEL", "WARNING"),
        # Anyone may create an account at /signup/ (off for private installs: only invitations
        # make accounts then). docs/operations.md, "Accounts".
        "SIGNUP_OPEN": config.flag("SIGNUP_OPEN", default=True),
        # Days a scan's full report.json is kept after it finished; then only its summary
        # stays (grade, points, checks, each level's figures: scans/history/retention.py). At least 1.
        "REPORT_RETENTION_DAYS": config.positive_integer("REPORT_RETENTION_DAYS", 90),
        # Days a scan and its check results are kept after the month it belongs to began to
        # be past them: whole months go (scans/models/scan_partitions.py); the hourly and
        # daily rollups that charts of long ranges read stay. At least 1.
        "SCAN_RETENTION_DAYS": config.positive_integer("SCAN_RETENTION_DAYS", 400),
        # Days hourly rollups are kept (daily ones stay): a chart range that starts earlier
        # is drawn in whole days (scans/history/rollups.py). At least 1; the endpoint page's
        # longest range is 90 days.
        "HOURLY_ROLLUP_RETENTION_DAYS": config.positive_integer("HOURLY_ROLLUP_RETENTION_DAYS",
                                                                92),
        # Days each liveness probe's own row is kept; its hour (ProbeHour) stays like rollups.
        "PROBE_RETENTION_DAYS": config.positive_integer("PROBE_RETENTION_DAYS", 14),
        # Days an audit log entry is kept (audit/retention.py, by the hourly retention pass).
        "AUDIT_RETENTION_DAYS": config.positive_integer("AUDIT_RETENTION_DAYS", 400),
        # Teams one account may own: each team has budgets of its own (pushed report bytes,
        # job submissions), so making teams must not multiply them (accounts/teams.py).
        "TEAMS_PER_ACCOUNT": config.positive_integer("TEAMS_PER_ACCOUNT", 10),
    }


NETWORK_LIMITS_FROM_ENV = ("NETWORK_SUBMIT_LIMIT", "NETWORK_SUBMIT_WINDOW_S",
                           "NETWORK_MAX_UNSETTLED_PER_TEAM", "NETWORK_LEASE_WAIT_MAX_S",
                           "NETWORK_WAITING_LEASES_PER_PROCESS", "NETWORK_SUBMIT_BATCH_MAX")


globals().update(config.exit_on_config_error(_load))
# What _load() sets, declared for type checkers (mypy's Django plugin reads these types).
SECRET_KEY: str
FIELD_ENCRYPTION_KEYS: list[str]
OUTBOUND_ALLOW: list[str]
PROBE_RETENTION_DAYS: int
SCAN_RETENTION_DAYS: int
HOURLY_ROLLUP_RETENTION_DAYS: int
AUDIT_RETENTION_DAYS: int
OUTBOUND_RESOLVE: list[str]
PERIODIC_TASK_LOG_LEVEL: int
DEBUG: bool
DATABASES: dict[str, dict]
CACHES: dict[str, dict]
CELERY_BROKER_URL: str
ALLOWED_HOSTS: list[str]
INVITE_MAX_AGE_HOURS: int
EMAIL_SHOW_SECRETS: bool
SITE_URL: str
DEMO_TARGET_URL: str
SITE_METRICS_TOKEN: str
SSO_APP: dict | None
SSO_TEAM_ROLES: dict[str, tuple[str, str]]
AUTH_FAILURE_LIMIT: int
AUTH_FAILURE_WINDOW_S: int
TRUSTED_PROXY_COUNT: int
SIGNUP_OPEN: bool
REPORT_RETENTION_DAYS: int
TEAMS_PER_ACCOUNT: int
(VAR_DIR / "static").mkdir(parents=True, exist_ok=True)  # whitenoise's root, even before collectstatic

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",  # allauth's WebAuthn pages
    "allauth",
    "allauth.account",
    "allauth.mfa",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",  # single sign-on, when configured
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc served from here: pinned, no CDN
    "django_celery_beat",
    "django_prometheus",
    "axes",
    "tokvera_site.apps.SiteConfig",  # site-wide start-up; its static/ is found as an app's
    "accounts",
    "audit",
    "scans",
    "benchmarks",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "common.errors.ApiNotFoundAsJson",  # after Common: its slash redirect still applies
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "accounts.middleware.UserTimezoneMiddleware",  # every page in the user's own timezone
    "accounts.middleware.TwoFactorRequiredMiddleware",
    "audit.middleware.AuditRequestMiddleware",  # who and from where, for each change recorded
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "tokvera_site.urls"
WSGI_APPLICATION = "tokvera_site.wsgi.application"
ASGI_APPLICATION = "tokvera_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [SITE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accounts.context_processors.current_team",
                "accounts.context_processors.signup_open",
            ],
        },
    },
]

# Login throttling (common/login_throttle.py, docs/operations.md): after 10 failures for
# one username or from one address, sign-ins for it are refused for 15 minutes, right password
# included. Counted in the database (django-axes), per account and per address separately.
AUTHENTICATION_BACKENDS = [
    "common.login_throttle.LoginThrottleBackend",
    "allauth.account.auth_backends.AuthenticationBackend",  # email or username
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = 10
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "common.login_throttle.locked_out"
AXES_VERBOSE = False
# One count per account whichever identifier was typed (email or username).
AXES_USERNAME_CALLABLE = "common.login_throttle.account_key"
# The client address as every other per-address count reads it (TRUSTED_PROXY_COUNT).
AXES_CLIENT_IP_CALLABLE = "common.client_address.of_request"

# Accounts: django-allauth (sign-up, email verification, password reset and change) and its
# MFA (TOTP, WebAuthn, recovery codes). See docs/operations.md, "Accounts".
ACCOUNT_ADAPTER = "accounts.adapter.AccountAdapter"
MFA_ADAPTER = "accounts.adapter.MFAAdapter"
ACCOUNT_LOGIN_METHODS = {"email", "username"}  # accounts made before sign-up have usernames
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = "mandatory"
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_PREVENT_ENUMERATION = True  # reset and sign-up never say whether an address has an account
ACCOUNT_LOGOUT_ON_PASSWORD_CHANGE = False
ACCOUNT_LOGIN_ON_PASSWORD_RESET = False  # a reset never signs in: the login (and its throttle) does
ACCOUNT_CONFIRM_EMAIL_ON_GET = False
# An address is proven by a code typed in the browser that signed up (or logged in), never by
# a link that works wherever it is opened: the owner of an address someone else signed up with
# would otherwise verify that person's account, password and all.
ACCOUNT_EMAIL_VERIFICATION_BY_CODE_ENABLED = True
# Sign-up costs the same whether or not the address has an account (accounts/forms.py).
ACCOUNT_FORMS = {"signup": "accounts.forms.SignupForm"}
ACCOUNT_EMAIL_SUBJECT_PREFIX = "[Tokvera] "
ACCOUNT_DEFAULT_HTTP_PROTOCOL = "https" if SITE_URL.startswith("https://") else "http"  # noqa: F821
# Password failures are counted by axes (above, in the database); allauth's own per-key limit
# is skipped for passwords (accounts.adapter) and counts two-factor codes, at axes' numbers.
ACCOUNT_RATE_LIMITS = {"login_failed": f"{AXES_FAILURE_LIMIT}/m/ip,{AXES_FAILURE_LIMIT}/15m/key"}
MFA_SUPPORTED_TYPES = ["totp", "webauthn", "recovery_codes"]
MFA_TOTP_ISSUER = "Tokvera"
# A code typed as its 30-second step turns over still counts (one step either side, as RFC
# 6238 advises for delay); the failure limit above still bounds guessing.
MFA_TOTP_TOLERANCE = 1
# WebAuthn needs a secure origin; plain http on loopback is one only for development.
MFA_WEBAUTHN_ALLOW_INSECURE_ORIGIN = DEBUG  # noqa: F821 - set by _load() above

# Single sign-on: one OpenID Connect provider the operator configures (OIDC_ISSUER, OIDC_CLIENT_ID,
# OIDC_CLIENT_SECRET); its claim OIDC_TEAMS_CLAIM maps to team roles by OIDC_TEAM_ROLES
# (accounts/sso.py). Its address is the operator's, never a team's: like the mail server's.
SSO_TEAMS_CLAIM = config.env.str("OIDC_TEAMS_CLAIM", default="groups")
SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"APPS": [SSO_APP] if SSO_APP else []}}  # noqa: F821
SOCIALACCOUNT_ADAPTER = "accounts.sso.SocialAccountAdapter"
# The provider vouches for the address (email_verified): an account with it signs in through it.
SOCIALACCOUNT_EMAIL_AUTHENTICATION = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = True
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_LOGIN_ON_GET = False  # a POST starts it: a link cannot sign anyone in

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
# One way to show a date or time where no format is given (the admin's read-only fields too).
FORMAT_MODULE_PATH = ["common.formats"]

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# static/ is found through the site app (tokvera_site/static), like any app's.
# Hashed, compressed file names once `collectstatic` has written its manifest (production, see
# docs/operations.md); until then the files are served as they are, so every page and command
# works on a fresh clone with DEBUG off.
_HAS_MANIFEST = (STATIC_ROOT / "staticfiles.json").exists()
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if _HAS_MANIFEST and not DEBUG  # noqa: F821 - set by _load() above
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_MANIFEST_STRICT = False

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "account_login"
ACCOUNT_LOGOUT_REDIRECT_URL = "account_login"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
# Flash messages live in the session, not in a cookie the browser keeps.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"
# Pushed reports carry per-request timelines; allow them, refuse anything larger.
DATA_UPLOAD_MAX_MEMORY_SIZE = 16 * 1024 * 1024
# Behind a TLS-terminating proxy: trust its X-Forwarded-Proto and mark cookies Secure.
if SITE_URL.startswith("https://"):  # noqa: F821 - set by _load() above
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    CSRF_TRUSTED_ORIGINS = [SITE_URL]  # noqa: F821
EMAIL_BACKEND = config.env.str("EMAIL_BACKEND", default="common.mail.ConsoleEmailBackend")
DEFAULT_FROM_EMAIL = config.env.str("DEFAULT_FROM_EMAIL", default="tokvera@localhost")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.TeamTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON only, and only text a database can store (see common/parsers.py).
    "DEFAULT_PARSER_CLASSES": ["common.parsers.StrictJSONParser"],
    # Every operation's error answers, documented in one place (tokvera_site/api_schema.py).
    "DEFAULT_SCHEMA_CLASS": "tokvera_site.api_schema.ErrorDocumentingSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Tokvera API",
    "DESCRIPTION": "Team-scoped API for endpoints, scans and grades.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",  # pinned, served from the site (templates/api/redoc.html)
    # Request bodies get components of their own (EndpointRequest, …): what a client may send
    # is stated apart from what it gets back.
    "COMPONENT_SPLIT_REQUEST": True,
    # Operations are grouped (tagged) and named by the path after the API's prefix: "endpoints",
    # "scans", "jobs", … rather than "api" and "v1" for everything.
    "SCHEMA_PATH_PREFIX": r"/(api/)?v1/",
    # OpenAPI 3.1: schemas are full JSON Schema, so a limit such as "no NUL in any key of this
    # object" (propertyNames) can be stated, not just described.
    "OAS_VERSION": "3.1.0",
    # Plain Django views of the API (the host heartbeat) and the parser's NUL rule.
    "PREPROCESSING_HOOKS": ["tokvera_site.api_schema.add_plain_views"],
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "tokvera_site.api_schema.refuse_nul_in_requests"],
    "ENUM_NAME_OVERRIDES": {"JobStatusEnum": "benchmarks.models.JobStatus",
                            "ScanStatusEnum": "scans.models.ScanStatus",
                            "CapacityOutcomeEnum": "scans.models.CapacityOutcome"},
}

# Celery. One beat process only (the run command starts exactly one); the schedule lives in
# the database (django-celery-beat) so admins can edit it.
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TASK_IGNORE_RESULT = True
# One result backend object for every thread (there is none: results are ignored, and the
# "disabled" backend holds no state). Per thread, Celery built it again on each thread's first
# task sent, scanning every installed package's entry points, a cost paid per thread of every
# web process (DECISIONS.md, "The coordinator, round 5").
CELERY_RESULT_BACKEND_THREAD_SAFE = True
CELERY_TASK_ACKS_LATE = False  # opt in per task, only where the task is idempotent
# A worker holds no message it cannot start at once: run_scan is acks_late, so each of a
# worker's threads holds at most the scan it runs, and a queued scan sent while every thread
# is busy waits in Redis, where the next worker takes it if this one is killed (a held message
# would come back only after the visibility timeout, an hour, or the beat's redispatch).
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
# The longest countdown/ETA any task may use must stay below this (see tokvera_site.celery).
CELERY_VISIBILITY_TIMEOUT_S = 3600
if CELERY_BROKER_URL.startswith("filesystem://"):  # noqa: F821 - set by _load() above
    # Embedded single-machine broker: message files under var/, no server needed.
    _broker_dir = VAR_DIR / "broker"
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT_S}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker whose broker went away (Redis restarted) reconnects and keeps consuming instead of
# exiting; the Redis client notices a dead socket within seconds (see DECISIONS.md, workers).
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None  # retry for as long as it takes
CELERY_BROKER_HEARTBEAT = 0  # AMQP-only; Redis uses the socket options below
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False  # scans are rows; see reap()
if not CELERY_BROKER_URL.startswith("filesystem://"):  # noqa: F821
    CELERY_BROKER_TRANSPORT_OPTIONS.update({
        "socket_timeout": 30, "socket_connect_timeout": 5, "socket_keepalive": True,
        "health_check_interval": 10, "retry_on_timeout": True,
    })
    # Several sites (or test processes) on one Redis database: each prefixes every key and
    # channel of its broker with its own CELERY_BROKER_KEY_PREFIX (kombu's global_keyprefix).
    _broker_prefix = os.environ.get("CELERY_BROKER_KEY_PREFIX", "")
    if _broker_prefix and CELERY_BROKER_URL.startswith("redis"):  # noqa: F821
        CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = _broker_prefix

# Scans (scans/running/worker.py; docs/operations.md). A running scan touches its row every
# SCAN_HEARTBEAT_S; the reaper errors one silent for SCAN_STALE_AFTER_S (its worker died) and
# frees its origin. A scan whose origin is busy stays queued and is sent again once
# SCAN_ORIGIN_BUSY_RETRY_S have passed (by the beat's next run). A finished report waits in the
# worker up to SCAN_STORE_RETRY_S for an unreachable database.
SCAN_HEARTBEAT_S = 15
SCAN_STALE_AFTER_S = 60  # with the reaper every minute: a dead worker is noticed within 2 min
SCAN_ORIGIN_BUSY_RETRY_S = 30
SCAN_STORE_RETRY_S = 300
# Scans are I/O-bound (about 1 CPU-s per 30-60 s scan), so a worker runs many at once: the
# thread pool, one scan (with its own event loop) per thread, at most this many per worker
# process. Each scan's own loop-lag monitor still judges client-bound levels (DECISIONS.md).
SCAN_CONCURRENCY_PER_WORKER: int  # set by _load()
# ...and at most SCAN_STREAMS_PER_WORKER streams in flight across them: each level waits for
# its concurrency before it starts (scans/grader/budget.py), so the top levels of scans that
# run in step take turns instead of overloading the process (measured in DECISIONS.md).
SCAN_STREAMS_PER_WORKER: int
CELERY_WORKER_POOL = "threads"
CELERY_WORKER_CONCURRENCY = SCAN_CONCURRENCY_PER_WORKER  # noqa: F821 - set by _load()
# Scan locations: each is a Celery queue scans.<location> served by
# `celery -A tokvera_site worker -Q scans.<location>` on any machine (docs/operations.md).
# An endpoint scanned from no chosen location is scanned from SCAN_DEFAULT_LOCATION.
SCAN_DEFAULT_LOCATION = config.env.str("SCAN_DEFAULT_LOCATION", default="site")
SCAN_LOCATIONS = config.string_list("SCAN_LOCATIONS", [SCAN_DEFAULT_LOCATION])  # noqa: F821
# The address this location's liveness probes leave from, on a machine with several (empty:
# the system's choice); a worker per location can set its own.
SCAN_SOURCE_ADDRESS = config.env.str("SCAN_SOURCE_ADDRESS", default="")

if SCAN_DEFAULT_LOCATION not in SCAN_LOCATIONS:
    SCAN_LOCATIONS = [SCAN_DEFAULT_LOCATION, *SCAN_LOCATIONS]
# A worker started without -Q serves the site's tasks, the network's assignment passes (queue
# `passes`, benchmarks.tasks.PASS_QUEUE) and the site's own location; one started with
# -Q scans.<location> serves only that location. In production passes get a worker of their
# own (-Q passes), so folds never wait behind them (docs/operations.md).
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_QUEUES = [
    Queue(name, Exchange(name), routing_key=name)
    for name in ("celery", "passes", f"scans.{SCAN_DEFAULT_LOCATION}")
]

# The one list of credential patterns, masked in every log line and console mail
# (common/logging.py) as in stored scan text.
LOG_REDACTOR = "scans.grader.redaction.redact_patterns"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact": {"()": "common.logging.RedactSecretsFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "filters": ["redact"]},
    },
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},  # a scan makes thousands of requests
    },
}
