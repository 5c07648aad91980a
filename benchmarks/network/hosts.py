"""Host services: creating hosts, their tokens, trust, suspension, and recording heartbeats.

Every change an admin or an operator command makes goes through here and is audited
(benchmarks/network/audit.py). Each function owns its transaction. Those changes come from the admin
and operator commands, which act across teams (the admin form may move a host to another
team in the same save), so they find the row by its id through ALL_HOSTS; a heartbeat writes
the authenticated host's row within its own team.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from accounts import credentials
from accounts.validators import validate_one_line
from benchmarks.models import GRANTABLE_TRUST, Host, TrustLevel
from benchmarks.network import audit, catalog, jobs, rows
from benchmarks.network.system_wide import ALL_HOSTS

TOKEN_KIND = "tkh"  # noqa: S105 - the token kind prefix, not a secret
HARDWARE_FIELDS = {"gpu_model": str, "vram_mb": int, "cpu_model": str, "ram_mb": int}


class HostError(ValueError):
    """A host change that breaks a rule; the message is shown to the caller."""


class TrustNotGrantable(HostError):
    """Only none, software and edr can be granted; hardware is reserved."""


class UnknownModels(HostError):
    def __init__(self, ids: list[str]):
        self.ids = ids
        super().__init__(f"unknown catalog ids: {', '.join(ids)}")


# --- tokens ----------------------------------------------------------------------------------


def authenticate(token: str) -> Host | None:
    """The host whose current token this is, or None (unknown, wrong or revoked)."""
    # Every host call but the steady heartbeat starts here: plain SQL (benchmarks/network/rows.py).
    # The whole table, ALL_HOSTS's view: no team is known before the token is checked.
    found = rows.fetch(Host, f"SELECT {rows.columns(Host, 'host')} "  # noqa: S608 - names are ours
                       f"FROM {Host._meta.db_table} host WHERE token_prefix = %s",
                       [token[: credentials.PREFIX_CHARS]])  # unique: one row or none
    if not found:
        return None
    row = found[0]
    if row.revoked_at is not None or not row.token_hmac:
        return None
    if not credentials.matches(token, row.token_hmac):
        return None
    return row


def _check_trust(level: str) -> str:
    if level not in {t.value for t in GRANTABLE_TRUST}:
        if level == TrustLevel.HARDWARE:
            raise TrustNotGrantable("hardware trust is reserved and is never granted")
        raise TrustNotGrantable(f"unknown trust level {level!r}: expected none, software or edr")
    return level


@transaction.atomic
def create_host(team, name: str, trust_level: str = TrustLevel.NONE, actor=None) -> tuple[Host, str]:
    """A new host and its token. The token is returned once and never stored."""
    _check_trust(trust_level)
    try:
        validate_one_line(name)
    except ValidationError as exc:
        raise HostError(f"host name: {exc.messages[0]}") from None
    new = credentials.new_secret(TOKEN_KIND)
    host = Host.objects.for_team(team).create(
        team=team, name=name, trust_level=trust_level, token_prefix=new.prefix,
        token_hmac=new.digest, token_issued_at=timezone.now(),
    )
    audit.record(actor, host, "create", {"team": [None, team.slug], "trust_level": [None, trust_level]})
    return host, new.token


@transaction.atomic
def rotate_token(host: Host, actor=None) -> str:
    """Issue a new token; the old one stops working at once. A revoked host is re-enabled."""
    new = credentials.new_secret(TOKEN_KIND)
    ALL_HOSTS.filter(pk=host.pk).update(
        token_prefix=new.prefix, token_hmac=new.digest, token_issued_at=timezone.now(),
        revoked_at=None,
    )
    audit.record(actor, host, "rotate token", {"token_prefix": [host.token_prefix, new.prefix]})
    host.refresh_from_db()
    return new.token


def revoke_token(host: Host, actor=None) -> None:
    """The token stops working at once; the host's leased and running jobs go back to the queue."""
    with transaction.atomic():
        now = timezone.now()
        ALL_HOSTS.filter(pk=host.pk).update(
            token_prefix=None, token_hmac="", revoked_at=now
        )
        audit.record(actor, host, "revoke token", {"token_prefix": [host.token_prefix, None]})
    jobs.release_host_jobs(host.pk, include_running=True)
    host.refresh_from_db()


@transaction.atomic
def set_trust(host: Host, level: str, actor=None) -> None:
    _check_trust(level)
    mine = ALL_HOSTS.filter(pk=host.pk)
    old = mine.select_for_update().get().trust_level
    if old != level:
        mine.update(trust_level=level)
        audit.record(actor, host, "set trust", {"trust_level": [old, level]})
    host.trust_level = level


def set_suspended(host: Host, suspended: bool, actor=None) -> None:
    """A suspended host is not online and gets no jobs; its unstarted jobs are requeued."""
    with transaction.atomic():
        mine = ALL_HOSTS.filter(pk=host.pk)
        old = mine.select_for_update().get().suspended
        if old != suspended:
            mine.update(suspended=suspended)
            audit.record(actor, host, "suspend" if suspended else "unsuspend",
                         {"suspended": [old, suspended]})
    host.suspended = suspended
    if suspended:
        jobs.release_host_jobs(host.pk, include_running=False)


@transaction.atomic
def set_connect_ready(host: Host, ready: bool, actor=None) -> None:
    mine = ALL_HOSTS.filter(pk=host.pk)
    old = mine.select_for_update().get().connect_ready
    if old != ready:
        mine.update(connect_ready=ready)
        audit.record(actor, host, "set connect readiness", {"connect_ready": [old, ready]})
    host.connect_ready = ready


# --- heartbeats ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heartbeat:
    """What the heartbeat call answers."""

    online: bool
    models: list[str]
    slots: int
    trust_level: str
    suspended: bool


def heartbeat(token: str, models: list[str], hardware: dict, slots: int,
              now: datetime | None = None) -> Heartbeat | None:
    """Authenticate the token and record the heartbeat; None when the token is not a current
    host token. Records only: assignment happens in the assignment pass (benchmarks/network/routing.py).

    A steady host (same model list as last time) costs one statement: an UPDATE that finds the
    row by its token prefix and digest, like `authenticate()`, and returns what the answer
    needs. A changed list (or a token that does not match) takes the full path below. The
    digest is compared in SQL: it is an HMAC of the token, so its bytes are not the caller's
    to choose, and the prefix alone already picks the row.
    """
    now = now or timezone.now()
    steady = _record_if_steady(token, models, hardware, slots, now)
    if steady is not None:
        return steady
    host = authenticate(token)
    if host is None:
        return None
    online = record_heartbeat(host, models, hardware, slots, now)
    return Heartbeat(online=online, models=host.advertised, slots=host.slots,
                     trust_level=host.trust_level, suspended=host.suspended)



def steady_heartbeat(token: str, models: list[str], hardware: dict, slots: int,
                     not_within_s: float, now: datetime | None = None) -> Heartbeat | None:
    """Record a steady host's heartbeat in one statement, or None (nothing written) when this
    is not one: an unknown, wrong or revoked token, a changed model list, or a heartbeat within
    `not_within_s` of the last one recorded. That last condition is the rate limit folded
    into the UPDATE (benchmarks/network/host_protocol.py): a host that heartbeats no more often than
    that needs no counter at all; the callers that do take the full path, which counts them."""
    now = now or timezone.now()
    return _record_if_steady(token, models, hardware, slots, now,
                             not_since=now - timedelta(seconds=not_within_s))


def _record_if_steady(token: str, models: list[str], hardware: dict, slots: int, now: datetime,
                      not_since: datetime | None = None) -> Heartbeat | None:
    """The one-statement heartbeat: an UPDATE that finds the row by its token prefix and
    digest, like `authenticate()`, with the model list unchanged (and, with `not_since`, no
    heartbeat recorded after that), and returns what the answer needs."""
    wanted = sorted(set(models))
    hw = {name: hardware[name] for name in HARDWARE_FIELDS if name in hardware}
    sets = ", ".join(["last_heartbeat_at = %s", "slots = %s", *(f"{name} = %s" for name in hw)])
    params = [now, slots, *hw.values(), token[: credentials.PREFIX_CHARS],
              credentials.digest(token), json.dumps(wanted)]
    recent = ""
    if not_since is not None:
        recent = "AND (last_heartbeat_at IS NULL OR last_heartbeat_at <= %s) "
        params.append(not_since)
    with connection.cursor() as cursor:
        # No team is known before the token is checked: the row is found by the token itself.
        cursor.execute(
            f"UPDATE {Host._meta.db_table} SET {sets} "  # noqa: S608 - column names are ours
            "WHERE token_prefix = %s AND token_hmac = %s AND revoked_at IS NULL "
            f"AND advertised = %s::jsonb {recent}RETURNING suspended, trust_level",
            params,
        )
        row = cursor.fetchone()
    if row is None:
        return None
    suspended, trust_level = row
    return Heartbeat(online=not suspended, models=wanted, slots=slots, trust_level=trust_level,
                     suspended=suspended)


@dataclass(frozen=True)
class SteadyCall:
    """One steady heartbeat waiting to be written with others (steady_heartbeats_statement)."""

    token: str
    models: list[str]
    hardware: dict
    slots: int
    at: datetime  # when it arrived: the heartbeat's time, as `now` is for one call
    not_within_s: float


def steady_heartbeats_statement(calls: list[SteadyCall]) -> tuple[str, list]:
    """`steady_heartbeat` for many calls in one statement: (SQL, parameters). Each returned row
    is (index in `calls`, suspended, trust_level); a call without one wrote nothing and takes
    the full path: it is not steady (the same conditions as one call's), or its host's row is
    locked right now (a fold, an operator's change), so it waits there alone instead of
    stalling the whole batch. The rows are locked in id order and locked rows are skipped, so
    a batch never waits for a row lock and never deadlocks with another batch or a pass.
    A hardware field a call does not send keeps its stored value (NULL in its column of the
    input; a sent value is never NULL). Two calls of one host in a batch update its row once:
    the other finds no row, as the second of two calls within `not_within_s` would."""
    fields = list(HARDWARE_FIELDS)
    columns = ["i", "prefix", "digest", "advertised", "at", "not_since", "slots", *fields]
    types = ["int", "text", "text", "text", "timestamptz", "timestamptz", "int",
             *("text" if kind is str else "bigint" for kind in HARDWARE_FIELDS.values())]
    values: list[list] = [[] for _ in columns]
    for i, call in enumerate(calls):
        row = [i, call.token[: credentials.PREFIX_CHARS], credentials.digest(call.token),
               json.dumps(sorted(set(call.models))), call.at,
               call.at - timedelta(seconds=call.not_within_s), call.slots,
               *(call.hardware.get(name) for name in fields)]
        for column, value in zip(values, row, strict=True):
            column.append(value)
    table = Host._meta.db_table
    sets = ", ".join(["last_heartbeat_at = v.at", "slots = v.slots",
                      *(f"{name} = COALESCE(v.{name}, h.{name})" for name in fields)])
    unnest = ", ".join(f"%s::{kind}[]" for kind in types)
    return (
        f"WITH v AS (SELECT * FROM unnest({unnest}) AS v({', '.join(columns)})), "  # noqa: S608 - ours
        "steady AS ("
        f"SELECT h.id, v.i FROM {table} AS h JOIN v "
        "ON h.token_prefix = v.prefix AND h.token_hmac = v.digest "
        "WHERE h.revoked_at IS NULL AND h.advertised = v.advertised::jsonb "
        # `= v.at`: the same call again (its first try's answer was lost) is still steady.
        "AND (h.last_heartbeat_at IS NULL OR h.last_heartbeat_at <= v.not_since "
        "OR h.last_heartbeat_at = v.at) "
        "ORDER BY h.id FOR NO KEY UPDATE OF h SKIP LOCKED) "
        f"UPDATE {table} AS h SET {sets} FROM steady JOIN v ON v.i = steady.i "
        "WHERE h.id = steady.id "
        "RETURNING v.i, h.suspended, h.trust_level",
        values,
    )


def steady_answer(call: SteadyCall, suspended: bool, trust_level: str) -> Heartbeat:
    return Heartbeat(online=not suspended, models=sorted(set(call.models)), slots=call.slots,
                     trust_level=trust_level, suspended=suspended)


def record_heartbeat(host: Host, models: list[str], hardware: dict, slots: int,
                     now: datetime | None = None) -> bool:
    """Store what the host reports. Returns whether it is online now.

    `host` is the row loaded by authentication; the model list is checked and rewritten only
    when it changed, so a steady host costs one UPDATE per heartbeat.
    """
    now = now or timezone.now()
    wanted = sorted(set(models))
    changed_models = wanted != list(host.advertised or [])
    if changed_models:
        # Checked when the list changes; an unchanged list was checked when it was stored
        # (and a catalog row referenced by jobs cannot be deleted, only deactivated).
        unknown = sorted(set(wanted) - catalog.catalog_ids())
        if unknown:
            raise UnknownModels(unknown)
    fields: dict = {"last_heartbeat_at": now, "slots": slots}
    for name in HARDWARE_FIELDS:
        if name in hardware and hardware[name] != getattr(host, name):
            fields[name] = hardware[name]
    if changed_models:
        fields["advertised"] = wanted
        with transaction.atomic():
            # Catalog ids are the primary keys; django-stubs assume integer ones.
            host.catalog_models.set(wanted)  # type: ignore[arg-type]
            Host.objects.for_team(host.team_id).filter(pk=host.pk).update(**fields)
    else:  # one statement, autocommit
        Host.objects.for_team(host.team_id).filter(pk=host.pk).update(**fields)
    for name, value in fields.items():
        setattr(host, name, value)
    return host.is_online(now)
