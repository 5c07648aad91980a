"""Settings read from the environment.

Every variable is parsed by django-environ; a malformed value stops start-up with
one line that names the variable and says what it expects (ConfigError).
"""

from __future__ import annotations

import logging
import secrets
import sys
from urllib.parse import unquote, urlsplit

import environ

from common.paths import VAR_DIR  # noqa: F401 - settings read it from here
from tokvera_site.devservices import DATABASE_NAME, DEFAULT_DATA_DIR, EmbeddedPostgres, ServiceError


class ConfigError(Exception):
    """A malformed environment variable; the message is one line naming it."""


env = environ.Env()

DATABASE_SCHEMES = ("postgres", "postgresql", "pgsql")
BROKER_SCHEMES = ("filesystem", "redis", "rediss", "amqp", "amqps", "pyamqp")
# The cache is shared by every process (web, worker, beat, commands): the database by default,
# Redis when CACHE_URL says so. A per-process memory cache would split rate limits, build locks
# and the public snapshot between processes.
CACHE_SCHEMES = ("dbcache", "redis", "rediss")
DEFAULT_CACHE_URL = "dbcache://tokvera_cache"


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def _url_with_scheme(name: str, default: str, schemes: tuple[str, ...]) -> str:
    value = env.str(name, default=default).strip()
    scheme = urlsplit(value).scheme
    if scheme not in schemes:
        raise ConfigError(
            f"{name}={_without_password(value)!r} is not valid: expected a URL whose scheme "
            f"is one of {', '.join(schemes)}"
        )
    return value


def _parse(name: str, parser, expects: str, **kwargs):
    try:
        return parser(name, **kwargs)
    except (ValueError, environ.ImproperlyConfigured) as exc:
        raw = env.str(name, default="")
        raise ConfigError(f"{name}={raw!r} is not valid: expected {expects}") from exc


def _embedded_database_url() -> str:
    """The embedded PostgreSQL under var/ that `make run` starts (tokvera_site.devservices)."""
    try:
        return EmbeddedPostgres(DEFAULT_DATA_DIR).url(DATABASE_NAME)
    except ServiceError:
        raise ConfigError(
            "DATABASE_URL is not set and the embedded PostgreSQL (var/postgres) is not running: "
            "start the site with `make run`, or set DATABASE_URL=postgres://USER@HOST:PORT/DB"
        ) from None


def database() -> dict:
    raw = env.str("DATABASE_URL", default="").strip()
    if raw.startswith("sqlite"):
        raise ConfigError(
            f"DATABASE_URL={raw!r} is not valid: SQLite is not supported; expected a postgres:// URL "
            "(or leave DATABASE_URL unset to use the embedded PostgreSQL of `make run`)"
        )
    url = _url_with_scheme("DATABASE_URL", raw or _embedded_database_url(), DATABASE_SCHEMES)
    try:
        config = env.db_url_config(url)
    except Exception as exc:  # django-environ raises several kinds here
        raise ConfigError(f"DATABASE_URL is not valid: {exc}") from exc
    # A Unix socket folder is written percent-encoded in the URL's host (libpq's convention).
    config["HOST"] = unquote(config.get("HOST") or "")
    config["CONN_MAX_AGE"] = _parse("DB_CONN_MAX_AGE", env.int, "a whole number of seconds", default=60)
    config["CONN_HEALTH_CHECKS"] = True
    pool_size = _parse("DB_POOL_MAX_SIZE", env.int, "a whole number of connections (0: no pool)", default=0)
    if pool_size < 0:
        raise ConfigError(f"DB_POOL_MAX_SIZE={pool_size} is not valid: expected 0 or more connections")
    if pool_size:
        # A process's threads share at most this many connections (psycopg_pool through
        # Django), so a web worker can run far more threads than PostgreSQL has connections
        # (waiting leases hold a thread each: docs/operations.md). Django hands a pooled
        # connection back at the end of each request, which persistent connections would stop.
        if env.str("DB_CONN_MAX_AGE", default=""):
            raise ConfigError("DB_CONN_MAX_AGE and DB_POOL_MAX_SIZE are not valid together: "
                              "a pooled connection goes back to the pool after each request")
        timeout = _parse("DB_POOL_TIMEOUT_S", env.float, "a number of seconds", default=5.0)
        config["CONN_MAX_AGE"] = 0
        config.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1, "max_size": pool_size, "timeout": timeout}
    return config


def broker_url() -> str:
    return _url_with_scheme("CELERY_BROKER_URL", "filesystem://", BROKER_SCHEMES)


def cache() -> dict:
    url = _url_with_scheme("CACHE_URL", DEFAULT_CACHE_URL, CACHE_SCHEMES)
    try:
        config = env.cache_url_config(url)
    except Exception as exc:
        raise ConfigError(f"CACHE_URL is not valid: {exc}") from exc
    if config["BACKEND"].endswith("RedisCache"):
        config["BACKEND"] = "common.redis_cache.RedisCache"  # Django's, keeping its client
        # django-environ lower-cases every query key for Django's Redis backend, the cache's own
        # settings too: `?key_prefix=…` came out as "key_prefix", which Django ignores (the keys
        # then had no prefix at all). Those settings are upper case; the rest are client options.
        for name in env._CACHE_BASE_OPTIONS:
            if name.lower() in config:
                config[name] = config.pop(name.lower())
        # A hung Redis must fail a cache call quickly (callers fall back), not hang the request.
        config.setdefault("OPTIONS", {}).update({"socket_connect_timeout": 1, "socket_timeout": 1})
    return config


def secret_key() -> str:
    """SECRET_KEY from the environment, or generated once into var/ (never committed)."""
    key = env.str("SECRET_KEY", default="")
    if key:
        if len(key) < 32:
            raise ConfigError("SECRET_KEY is not valid: expected at least 32 characters")
        return key
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def field_encryption_keys() -> list[str]:
    """Fernet keys for secrets at rest: FIELD_ENCRYPTION_KEY (comma-separated; the first
    encrypts), or one generated once into var/field_key."""
    from cryptography.fernet import Fernet

    raw = env.str("FIELD_ENCRYPTION_KEY", default="")
    if not raw:
        path = VAR_DIR / "field_key"
        if not path.exists():
            VAR_DIR.mkdir(parents=True, exist_ok=True)
            path.write_text(Fernet.generate_key().decode())
            path.chmod(0o600)
        raw = path.read_text().strip()
    keys = [key.strip() for key in raw.split(",") if key.strip()]
    for key in keys:
        try:
            Fernet(key)
        except ValueError:
            raise ConfigError(
                "FIELD_ENCRYPTION_KEY is not valid: expected comma-separated Fernet keys "
                "(32 url-safe base64-encoded bytes each)"
            ) from None
    return keys


def flag(name: str, default: bool = False) -> bool:
    # env.bool() reads any unknown word as False; a typo must not silently turn DEBUG off.
    raw = env.str(name, default="1" if default else "0").strip().lower()
    if raw not in _TRUE | _FALSE:
        raise ConfigError(f"{name}={raw!r} is not valid: expected true or false (1/0, yes/no, on/off)")
    return raw in _TRUE


def integer(name: str, default: int) -> int:
    return _parse(name, env.int, "a whole number", default=default)


def positive_integer(name: str, default: int) -> int:
    value = integer(name, default)
    if value < 1:
        raise ConfigError(f"{name}={value!r} is not valid: expected a whole number of at least 1")
    return value


def non_negative_integer(name: str, default: int) -> int:
    value = integer(name, default)
    if value < 0:
        raise ConfigError(f"{name}={value!r} is not valid: expected a whole number of at least 0")
    return value


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(name: str, default: str) -> int:
    """A logging level by name (DEBUG, INFO, WARNING, ERROR, CRITICAL), as its number."""
    raw = env.str(name, default=default).strip().upper()
    if raw not in LOG_LEVELS:
        raise ConfigError(f"{name}={raw!r} is not valid: expected one of {', '.join(LOG_LEVELS)}")
    return logging.getLevelName(raw)


def string_list(name: str, default: list[str]) -> list[str]:
    return _parse(name, env.list, "a comma-separated list", default=default)


SSO_ROLES = ("owner", "admin", "member", "viewer")
SSO_ROLE_ALIASES = {"editor": "member"}  # "editor" is what the pages call the member role


def oidc_provider() -> dict | None:
    """The OpenID Connect app django-allauth signs in with, from OIDC_ISSUER, OIDC_CLIENT_ID and
    OIDC_CLIENT_SECRET (all three, or none: no single sign-on). OIDC_NAME is the button's word."""
    issuer = env.str("OIDC_ISSUER", default="").strip()
    client_id = env.str("OIDC_CLIENT_ID", default="").strip()
    secret = env.str("OIDC_CLIENT_SECRET", default="")
    if not (issuer or client_id or secret):
        return None
    if not (issuer and client_id and secret):
        raise ConfigError("OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET go together: "
                          "set all three for single sign-on, or none")
    parts = urlsplit(issuer)
    # Plain http only on this machine: the provider's answers decide who gets which team role.
    loopback = parts.hostname in ("127.0.0.1", "::1", "localhost")
    if not parts.hostname or parts.scheme not in (("https", "http") if loopback else ("https",)):
        raise ConfigError(f"OIDC_ISSUER={issuer!r} is not valid: expected the issuer's https URL")
    return {"provider_id": "sso", "name": env.str("OIDC_NAME", default="single sign-on"),
            "client_id": client_id, "secret": secret,
            "settings": {"server_url": issuer.rstrip("/"), "oauth_pkce_enabled": True}}


def oidc_team_roles() -> dict[str, tuple[str, str]]:
    """OIDC_TEAM_ROLES: which value of the OIDC_TEAMS_CLAIM claim makes a user what in which
    team, as `value=team-slug:role` pairs separated by commas (role: owner, admin, editor,
    viewer)."""
    raw = env.str("OIDC_TEAM_ROLES", default="").strip()
    grants: dict[str, tuple[str, str]] = {}
    for pair in filter(None, (p.strip() for p in raw.split(","))):
        value, _, target = pair.rpartition("=")
        slug, _, role = target.partition(":")
        role = SSO_ROLE_ALIASES.get(role.strip(), role.strip())
        if not value.strip() or not slug.strip() or role not in SSO_ROLES:
            raise ConfigError(f"OIDC_TEAM_ROLES: {pair!r} is not valid: expected "
                              "claim-value=team-slug:role (owner, admin, editor or viewer)")
        grants[value.strip()] = (slug.strip(), role)
    return grants


def exit_on_config_error(fn):
    """Run settings code; turn a ConfigError into one clear line and exit status 2."""
    try:
        return fn()
    except ConfigError as exc:
        sys.stderr.write(f"tokvera: configuration error: {exc}\n")
        raise SystemExit(2) from None
