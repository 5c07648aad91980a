"""A team's configuration as one document (docs/config-as-code.md): `GET
/api/v1/teams/<slug>/config/` exports it, `POST` applies one: `{"config": {...}, "dry_run":
bool, "prune": bool}`, answered with the plan (create / change / delete, per field old and
new, secrets only as "set" or "changed").

All or nothing per team: the whole document is applied in one transaction, item by item, each
through the API's own serializer and the write service behind it (the same checks, the same
audit entries as the resources' own endpoints), in the order channels, endpoints,
maintenance windows, status page (what an item names exists by then). The first refusal does
not stop the run: every item is tried, each in a savepoint, so the answer lists every
refusal (422, each naming its item and field), and then the transaction is rolled back. A dry
run is the same run, rolled back, so its plan and its refusals are exactly what applying
would give. The team's row is locked for the run: two applies to one team queue.

Items are keyed by name; a name two rows of the team share cannot be managed until one is
renamed (the run says so). Fields the file leaves out are their defaults, except secrets, which
are kept as stored ("" removes one), and the status page's address and title, which are kept.
Nothing the file's sections do not name is deleted unless `prune`; a section the file leaves
out is not managed at all.
"""

from __future__ import annotations

import datetime
import decimal
import difflib
import functools
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, models, transaction
from django.db.models import Model
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import encryption
from accounts.models import Team
from accounts.tenancy import Access
from audit import record as audit
from scans.api.channels import ChannelSerializer
from scans.api.endpoints import EndpointSerializer
from scans.api.maintenance import MaintenanceWindowSerializer
from scans.api.status_pages import StatusPageSerializer, team_in_scope
from scans.config_as_code.document import (
    KEYED_SECTIONS,
    SECRET_ENV,
    STATUS_PAGE,
    Problem,
    secret_env_name,
    shape_problems,
)
from scans.endpoints import service as endpoint_service
from scans.grader import DEFAULT_LEVELS
from scans.models import Endpoint, MaintenanceWindow, NotificationChannel, StatusPage
from scans.notify.channels import service as channel_service
from scans.status_pages import subscriptions
from scans.status_pages.settings import page_of

__all__ = ["ConfigView", "apply_config", "export_config", "may_apply_config"]

KINDS = {"channels": "channel", "endpoints": "endpoint",
         "maintenance_windows": "maintenance window", STATUS_PAGE: "status page"}
CHANNEL_FIELDS = ("kind", "enabled", "url", "secret")
CHANNEL_SECRETS = ("url", "secret")
STATUS_PAGE_FIELDS = ("enabled", "slug", "title", "endpoints")


CHANNEL_RIGHTS = "only owners, admins and read-write tokens change notification channels"


def may_apply_config(access: Access, team_id: int) -> bool:
    """Who may apply (or dry-run) a configuration: whoever may change the team's endpoints
    (a writing role, or a read-write token). The one check, so finer roles slot in here."""
    return access.can_write(team_id)


def _writable(serializer_class: type[serializers.Serializer]) -> tuple[str, ...]:
    """The fields a file may give an item: what the resource's API writes, but its team and
    its name (the item's key)."""
    return tuple(name for name, one in serializer_class().fields.items()
                 if not one.read_only and name not in ("team", "name"))


ENDPOINT_FIELDS = _writable(EndpointSerializer)
ENDPOINT_SECRETS = tuple(name for name, one in EndpointSerializer().fields.items()
                         if one.write_only)
WINDOW_FIELDS = _writable(MaintenanceWindowSerializer)
WINDOW_DEFAULTS: dict[str, Any] = {"endpoint": None, "starts_at": None, "ends_at": None, "weekdays": [],
                   "start_time": None, "duration_minutes": None, "timezone": "UTC",
                   "pause_scans": False}


def _endpoint_default(name: str) -> Any:
    """What an endpoint has when the file leaves `name` out: what a new one gets."""
    if name == "levels":
        return list(DEFAULT_LEVELS)
    if name == "channels":
        return []
    model_field = Endpoint._meta.get_field(name)
    assert isinstance(model_field, models.Field)  # every field a file gives is a column
    return model_field.get_default()


# --- the plan -------------------------------------------------------------------------------


@dataclass
class Change:
    action: str  # create, change, delete
    kind: str
    name: str
    fields: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "kind": self.kind, "name": self.name, "fields": self.fields}


@dataclass
class Outcome:
    changes: list[Change] = field(default_factory=list)
    left: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _plain(value: Any) -> Any:
    """A value as the plan and the export show it: JSON, rows by their names."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, Model):
        return getattr(value, "name", str(value))
    if isinstance(value, list | tuple):
        return [_plain(one) for one in value]
    return value


def _field(name: str, old: Any, new: Any) -> dict[str, Any]:
    return {"field": name, "old": _plain(old), "new": _plain(new), "secret": False}


def _secret_field(name: str, stored: str, given: str | None) -> dict[str, Any] | None:
    """A secret's change, never its value: set, changed or removed (None: unchanged)."""
    if given is None or given == stored:
        return None
    said = "removed" if not given else ("changed" if stored else "set")
    return {"field": name, "old": "set" if stored else "not set", "new": said, "secret": True}


def _problems(detail: Any, item: str, where: str = "") -> list[Problem]:
    """DRF's error detail (a dict per field, lists, nested lists of dicts) as Problems."""
    if isinstance(detail, dict):
        found = []
        for key, value in detail.items():
            inner = where if key in ("non_field_errors", "detail") else (
                f"{where}.{key}" if where else str(key))
            found += _problems(value, item, inner)
        return found
    if isinstance(detail, list):
        found = []
        for index, value in enumerate(detail):
            if isinstance(value, dict | list):
                found += _problems(value, item, f"{where}[{index}]")
            else:
                found += _problems(value, item, where)
        return found
    return [Problem(item, where, str(detail))]


# --- applying -------------------------------------------------------------------------------


class _Run:
    """One application of a document to a team, inside the caller's transaction."""

    def __init__(self, request: Request, team: Team, prune: bool):
        self.request, self.team, self.prune = request, team, prune
        self.context = {"request": request}
        self.outcome = Outcome()
        self.may_change_channels = True  # set by channels() for the caller

    def refuse(self, item: str, where: str, message: str) -> None:
        self.outcome.problems.append(Problem(item, where, message))

    def attempt(self, item: str, write: Callable[[], object]) -> None:
        """Run one item's write in a savepoint; its refusals become problems."""
        try:
            with transaction.atomic():
                write()
        except exceptions.APIException as exc:
            self.outcome.problems.extend(_problems(exc.detail, item))
        except IntegrityError:
            self.refuse(item, "", "clashes with what the team has (a name taken?)")

    def known_fields(self, item: str, given: Mapping[str, Any],
                     known: Iterable[str]) -> dict[str, Any]:
        """`given` without the fields the resource does not have, each refused (with the
        likeliest one meant); the rest is still checked, so one run names every problem."""
        known = tuple(known)
        for name in given:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"did you mean {close[0]}?" if close else "see docs/config-as-code.md"
                self.refuse(item, name, f"unknown field; {hint}")
        return {name: value for name, value in given.items() if name in known}

    def unresolved_secrets(self, item: str, given: Mapping[str, Any]) -> bool:
        unresolved = [name for name, value in given.items()
                      if isinstance(value, dict) and SECRET_ENV in value]
        for name in unresolved:
            self.refuse(item, name, "secret_env is read by the client (tokvera apply): send "
                                    "the secret's value")
        return bool(unresolved)

    def keyed(self, section: str, rows: Iterable[Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
        """The team's rows of a section by name; a name two rows share is refused where the
        file names it (and reported where it would be pruned)."""
        by_name: dict[str, list[Any]] = defaultdict(list)
        for row in rows:
            by_name[row.name].append(row)
        for name, same in by_name.items():
            if len(same) > 1 and (name in wanted or self.prune):
                self.refuse(f"{section}.{name}", "", f"{len(same)} {KINDS[section]}s of the team "
                            "are named so: rename all but one on the site first")
        return {name: same[0] for name, same in by_name.items() if len(same) == 1}

    def leave_or_delete(self, section: str, rows: Mapping[str, Any], wanted: Mapping[str, Any],
                        delete: Callable[[Any], None]) -> None:
        for name, row in rows.items():
            if name in wanted:
                continue
            if not self.prune:
                self.outcome.left.append({"kind": KINDS[section], "name": name})
                continue
            self.outcome.changes.append(Change("delete", KINDS[section], name))
            self.attempt(f"{section}.{name}", functools.partial(delete, row))

    # channels --------------------------------------------------------------------------

    def channels(self, wanted: Mapping[str, dict[str, Any]]) -> None:
        rows = self.keyed("channels", NotificationChannel.objects.for_team(self.team.pk),
                          wanted)
        self.may_change_channels = Access.for_request(self.request).can_change_channels(
            self.team.pk)
        if not self.may_change_channels and self.prune:
            for name in set(rows) - set(wanted):
                self.refuse(f"channels.{name}", "", CHANNEL_RIGHTS)
        for name, given in wanted.items():
            item = f"channels.{name}"
            given = self.known_fields(item, given, CHANNEL_FIELDS)
            if self.unresolved_secrets(item, given):
                continue
            self.channel(item, name, given, rows.get(name))
        self.leave_or_delete("channels", rows, wanted, channel_service.delete)

    def channel(self, item: str, name: str, given: dict[str, Any],
                existing: NotificationChannel | None) -> None:
        payload = {"name": name, "enabled": True, **given}
        fields: list[dict[str, Any]] = []
        if existing is not None:
            stored = channel_service.stored_config(existing) if existing.config_encrypted else {}
            for one in ("kind", "enabled"):
                if payload.get(one) != getattr(existing, one):
                    fields.append(_field(one, getattr(existing, one), payload.get(one)))
            for one in CHANNEL_SECRETS:
                given_secret = given.get(one)
                if isinstance(given_secret, str):
                    given_secret = given_secret.strip()
                changed = _secret_field(one, str(stored.get(one) or ""), given_secret
                                        if isinstance(given_secret, str) else None)
                if changed:
                    fields.append(changed)
            if not fields:
                return
        else:
            fields = [_field(one, None, value) if one not in CHANNEL_SECRETS else
                      {"field": one, "old": None, "new": "set", "secret": True}
                      for one, value in given.items()]
        serializer = ChannelSerializer(existing, data=payload, context=self.context)

        def write() -> None:
            if not serializer.is_valid():
                raise exceptions.ValidationError(serializer.errors)
            if existing is None:
                serializer.save(team=self.team)
            else:
                serializer.save()

        if not self.may_change_channels:
            self.refuse(item, "", CHANNEL_RIGHTS)
            return
        self.outcome.changes.append(Change("create" if existing is None else "change",
                                           "channel", name, fields))
        self.attempt(item, write)

    # endpoints -------------------------------------------------------------------------

    def endpoints(self, wanted: Mapping[str, dict[str, Any]]) -> None:
        rows = self.keyed("endpoints", Endpoint.objects.for_team(self.team.pk)
                          .prefetch_related("channels"), wanted)
        channel_ids = {channel.name: channel.public_id for channel in
                       NotificationChannel.objects.for_team(self.team.pk)}
        self.channel_names = {str(public_id): name for name, public_id in channel_ids.items()}
        for name, given in wanted.items():
            item = f"endpoints.{name}"
            given = self.known_fields(item, given, ENDPOINT_FIELDS)
            if self.unresolved_secrets(item, given):
                continue
            picked = given.get("channels", [])
            if not isinstance(picked, list) or not all(isinstance(one, str) for one in picked):
                self.refuse(item, "channels", "expected a list of channel names")
                continue
            missing = [one for one in picked if one not in channel_ids]
            if missing:
                self.refuse(item, "channels", f"no channel named {missing[0]!r} in the file or "
                                              "on the site")
                continue
            self.endpoint(item, name, {**given, "channels": [str(channel_ids[one])
                                                             for one in picked]},
                          rows.get(name))
        self.leave_or_delete("endpoints", rows, wanted, self._delete_endpoint)

    @staticmethod
    def _delete_endpoint(endpoint: Endpoint) -> None:
        with audit.track(endpoint):
            endpoint.delete()

    def endpoint(self, item: str, name: str, given: dict[str, Any],
                 existing: Endpoint | None) -> None:
        payload = {one: _endpoint_default(one) for one in ENDPOINT_FIELDS
                   if one not in ENDPOINT_SECRETS}
        payload.update(given, name=name)
        serializer = EndpointSerializer(existing, data=payload, context=self.context)
        try:
            valid = serializer.is_valid()
        except exceptions.APIException as exc:  # a 422 of a field's own check
            self.outcome.problems.extend(_problems(exc.detail, item))
            return
        if not valid:
            self.outcome.problems.extend(_problems(serializer.errors, item))
            return
        validated = dict(serializer.validated_data)
        if existing is None:
            fields = [{"field": one, "old": None, "new": "set", "secret": True}
                      if one in ENDPOINT_SECRETS else
                      _field(one, None, self._shown(one, validated.get(one)))
                      for one in given if one in validated]
            self.outcome.changes.append(Change("create", "endpoint", name, fields))
            self.attempt(item, lambda: serializer.create({**validated, "team": self.team}))
            return
        changed, fields = self._endpoint_changes(existing, validated)
        if not changed:
            return
        self.outcome.changes.append(Change("change", "endpoint", name, fields))
        self.attempt(item, lambda: serializer.update(
            existing, {one: validated[one] for one in changed}))

    def _endpoint_changes(self, existing: Endpoint,
                          validated: Mapping[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
        changed, fields = [], []
        for one, new in validated.items():
            if one in ENDPOINT_SECRETS:
                stored = getattr(existing, endpoint_service.SECRET_FIELDS[one])
                secret = _secret_field(one, encryption.decrypt(stored) if stored else "", new)
                if secret:
                    changed.append(one)
                    fields.append(secret)
                continue
            old = (sorted(str(c.public_id) for c in existing.channels.all()) if one == "channels"
                   else getattr(existing, one))
            if one == "channels":
                new = sorted(str(public_id) for public_id in new)
            if old != new:
                changed.append(one)
                fields.append(_field(one, self._shown(one, old), self._shown(one, new)))
        return changed, fields

    def _shown(self, name: str, value: Any) -> Any:
        if name == "channels":
            return sorted(self.channel_names.get(str(one), str(one)) for one in value)
        return value

    # maintenance windows ---------------------------------------------------------------

    def maintenance_windows(self, wanted: Mapping[str, dict[str, Any]]) -> None:
        rows = self.keyed("maintenance_windows", MaintenanceWindow.objects
                          .for_team(self.team.pk).select_related("endpoint"), wanted)
        endpoint_ids = {one.name: one.public_id for one in Endpoint.objects.for_team(self.team.pk)}
        for name, given in wanted.items():
            item = f"maintenance_windows.{name}"
            given = self.known_fields(item, given, WINDOW_FIELDS)
            target = given.get("endpoint")
            if target is not None and (not isinstance(target, str) or target not in endpoint_ids):
                self.refuse(item, "endpoint", "expected the name of an endpoint in the file or "
                                              "on the site (leave it out: every endpoint)")
                continue
            payload = {**WINDOW_DEFAULTS, **given, "name": name,
                       "endpoint": str(endpoint_ids[target]) if target else None}
            self.window(item, name, given, payload, rows.get(name))
        self.leave_or_delete("maintenance_windows", rows, wanted, self._delete_window)

    @staticmethod
    def _delete_window(window: MaintenanceWindow) -> None:
        with audit.track(window):
            MaintenanceWindow.objects.for_team(window.team_id).filter(pk=window.pk).delete()

    def window(self, item: str, name: str, given: Mapping[str, Any], payload: dict[str, Any],
               existing: MaintenanceWindow | None) -> None:
        serializer = MaintenanceWindowSerializer(existing, data=payload, context=self.context)
        try:
            valid = serializer.is_valid()
        except exceptions.APIException as exc:
            self.outcome.problems.extend(_problems(exc.detail, item))
            return
        if not valid:
            self.outcome.problems.extend(_problems(serializer.errors, item))
            return
        validated = serializer.validated_data
        if existing is None:
            fields = [_field(one, None, validated.get(one)) for one in given if one in validated]
            self.outcome.changes.append(Change("create", "maintenance window", name, fields))

            def create() -> None:
                window = serializer.save(team=self.team)
                audit.created(window)
                subscriptions.maintenance_news(window)  # mailed once committed

            self.attempt(item, create)
            return
        fields = [_field(one, getattr(existing, one), new) for one, new in validated.items()
                  if one != "name" and getattr(existing, one) != new]
        if not fields:
            return
        self.outcome.changes.append(Change("change", "maintenance window", name, fields))

        def update() -> None:
            with audit.track(existing):
                serializer.save()

        self.attempt(item, update)

    # the status page -------------------------------------------------------------------

    def status_page(self, given: Mapping[str, Any]) -> None:
        item = STATUS_PAGE
        given = self.known_fields(item, given, STATUS_PAGE_FIELDS)
        endpoints = {one.name: one for one in Endpoint.objects.for_team(self.team.pk)}
        shown = self._shown_on_page(given.get("endpoints", []), endpoints)
        if shown is None:
            return
        page = page_of(self.team)
        payload = {"enabled": given.get("enabled", False), "slug": given.get("slug", page.slug),
                   "title": given.get("title", page.title),
                   "endpoints": [{"endpoint": str(endpoint.public_id), "name": display}
                                 for endpoint, display in shown]}
        serializer = StatusPageSerializer(page, data=payload, context=self.context)
        entries = list(page.entries.select_related("endpoint").order_by("position", "pk"))
        before = {"enabled": page.enabled, "slug": page.slug, "title": page.title,
                  "endpoints": [_shown_entry(entry.endpoint.name, entry.display_name)
                                for entry in entries]}
        title = payload["title"]
        after = {"enabled": payload["enabled"], "slug": payload["slug"],
                 "title": (title.strip() or "Status") if isinstance(title, str) else title,
                 "endpoints": [_shown_entry(endpoint.name, display.strip() or endpoint.name)
                               for endpoint, display in shown]}
        fields = [_field(one, before[one], after[one]) for one in STATUS_PAGE_FIELDS
                  if before[one] != after[one]]
        if not fields:
            return
        self.outcome.changes.append(Change("change", "status page", page.slug, fields))

        def write() -> None:
            if not serializer.is_valid():
                raise exceptions.ValidationError(serializer.errors)
            serializer.save()

        self.attempt(item, write)

    def _shown_on_page(self, listed: Any, endpoints: Mapping[str, Endpoint]
                       ) -> list[tuple[Endpoint, str]] | None:
        """The file's `endpoints:` of the page (names, or {endpoint, name}) as rows."""
        if not isinstance(listed, list):
            self.refuse(STATUS_PAGE, "endpoints", "expected a list of endpoint names")
            return None
        shown = []
        for index, entry in enumerate(listed):
            name, display = (entry, "") if isinstance(entry, str) else (
                (entry.get("endpoint"), entry.get("name", "")) if isinstance(entry, dict)
                else (None, ""))
            if not isinstance(name, str) or name not in endpoints or not isinstance(display, str):
                self.refuse(STATUS_PAGE, f"endpoints[{index}]", "expected an endpoint's name, "
                            "or {endpoint: NAME, name: SHOWN AS}, of an endpoint in the file or "
                            "on the site")
                return None
            shown.append((endpoints[name], display))
        return shown


def _shown_entry(endpoint_name: str, display_name: str) -> Any:
    """A status page entry as the file writes it: the endpoint's name, or {endpoint, name}
    when the page shows it under another."""
    if display_name == endpoint_name:
        return endpoint_name
    return {"endpoint": endpoint_name, "name": display_name}


def apply_config(request: Request, team: Team, config: Mapping[str, Any], *, dry_run: bool,
                 prune: bool) -> Outcome:
    """Apply `config` (its shape already checked) to `team`: all of it, or with any problem or
    a dry run, nothing (every write is rolled back)."""
    run = _Run(request, team, prune)
    with transaction.atomic():
        Team.objects.for_team(team.pk).select_for_update().get(pk=team.pk)
        for section in KEYED_SECTIONS:
            if config.get(section) is not None:
                getattr(run, section)({name: item or {} for name, item in config[section].items()})
        if config.get(STATUS_PAGE) is not None:
            run.status_page(config[STATUS_PAGE])
        if dry_run or run.outcome.problems:
            transaction.set_rollback(True)
    return run.outcome


# --- export ---------------------------------------------------------------------------------


def export_config(team: Team) -> tuple[dict[str, Any], list[str]]:
    """The team's configuration as the file writes it (defaults left out, secrets as
    `secret_env` placeholders), and a warning for each name two rows share (only one is kept)."""
    warnings: list[str] = []
    channels = list(NotificationChannel.objects.for_team(team.pk).order_by("name", "pk"))
    endpoints = list(Endpoint.objects.for_team(team.pk).prefetch_related("channels")
                     .order_by("name", "pk"))
    windows = list(MaintenanceWindow.objects.for_team(team.pk).select_related("endpoint")
                   .order_by("name", "pk"))
    config: dict[str, Any] = {"team": team.slug}
    config["channels"] = _keyed("channels", channels, _exported_channel, warnings)
    config["endpoints"] = _keyed("endpoints", endpoints, _exported_endpoint, warnings)
    config["maintenance_windows"] = _keyed("maintenance_windows", windows, _exported_window,
                                           warnings)
    _distinct_secret_names(config)
    page = StatusPage.objects.for_team(team.pk).first()
    if page is not None:
        config[STATUS_PAGE] = {
            "enabled": page.enabled, "slug": page.slug, "title": page.title,
            "endpoints": [_shown_entry(entry.endpoint.name, entry.display_name) for entry in
                          page.entries.select_related("endpoint").order_by("position", "pk")]}
    return config, warnings


def _distinct_secret_names(config: dict[str, Any]) -> None:
    """Give every secret its own variable: names that differ only in case or punctuation
    ("Chat A", "chat-a") would otherwise share one, and the file as exported would send one
    item's secret to the other's server. A repeat gets _2, _3… in file order."""
    taken: set[str] = set()
    for section in ("channels", "endpoints"):
        for item in (config.get(section) or {}).values():
            for value in item.values():
                if not (isinstance(value, dict) and SECRET_ENV in value):
                    continue
                name, n = value[SECRET_ENV], 1
                while name in taken:
                    n += 1
                    name = f"{value[SECRET_ENV]}_{n}"
                value[SECRET_ENV] = name
                taken.add(name)


def _keyed(section: str, rows: list[Any], exported: Callable[[Any], dict[str, Any]],
           warnings: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for row in rows:
        if row.name in found:
            warnings.append(f"two {KINDS[section]}s are named {row.name!r}: only one is "
                            "exported; rename the other on the site")
            continue
        found[row.name] = exported(row)
    return found


def _secret_ref(section: str, name: str, one: str) -> dict[str, str]:
    return {SECRET_ENV: secret_env_name(section, name, one)}


def _exported_channel(channel: NotificationChannel) -> dict[str, Any]:
    item: dict[str, Any] = {"kind": channel.kind}
    if not channel.enabled:
        item["enabled"] = False
    stored = channel_service.stored_config(channel) if channel.config_encrypted else {}
    for one in CHANNEL_SECRETS:
        if stored.get(one):
            item[one] = _secret_ref("channels", channel.name, one)
    return item


def _exported_endpoint(endpoint: Endpoint) -> dict[str, Any]:
    item: dict[str, Any] = {}
    for one in ENDPOINT_FIELDS:
        if one in ENDPOINT_SECRETS:
            if getattr(endpoint, endpoint_service.SECRET_FIELDS[one]):
                item[one] = _secret_ref("endpoints", endpoint.name, one)
            continue
        value = (sorted(channel.name for channel in endpoint.channels.all())
                 if one == "channels" else getattr(endpoint, one))
        if one in ("base_url", "model") or value != _endpoint_default(one):
            item[one] = _plain(value)
    return item


def _exported_window(window: MaintenanceWindow) -> dict[str, Any]:
    item: dict[str, Any] = {"kind": window.kind}
    for one, default in WINDOW_DEFAULTS.items():
        value = getattr(window, one)
        if value != default:
            item[one] = _plain(value)
    return item


# --- the view -------------------------------------------------------------------------------


CONFIG_SCHEMA = {
    "type": "object",
    "description": "The configuration file as JSON (docs/config-as-code.md): `team` (the "
                   "team's slug), and the sections it manages; a section left out is not "
                   "managed. Secrets are sent as their values (tokvera apply reads each "
                   "`secret_env` variable).",
    "properties": {
        "team": {"type": "string"},
        **{section: {"type": "object", "additionalProperties": {"type": "object"}}
           for section in KEYED_SECTIONS},
        STATUS_PAGE: {"type": "object"},
    },
    "required": ["team"],
}


@extend_schema_field(CONFIG_SCHEMA)
class ConfigField(serializers.DictField):
    pass


class ConfigApplySerializer(serializers.Serializer):
    config = ConfigField()
    dry_run = serializers.BooleanField(required=False, default=False,
                                       help_text="answer the plan, change nothing")
    prune = serializers.BooleanField(
        required=False, default=False,
        help_text="delete what the sections of the file do not name")


FIELD_CHANGES = inline_serializer("ConfigFieldChange", many=True, fields={
    "field": serializers.CharField(),
    "old": serializers.JSONField(allow_null=True),
    "new": serializers.JSONField(allow_null=True),
    "secret": serializers.BooleanField(
        help_text='a secret: old is "set" or "not set", new "set", "changed" or "removed"; '
                  "never its value"),
})
PLAN = inline_serializer("ConfigPlan", {
    "team": serializers.CharField(),
    "dry_run": serializers.BooleanField(),
    "prune": serializers.BooleanField(),
    "applied": serializers.BooleanField(help_text="the changes were made (not a dry run)"),
    "changes": inline_serializer("ConfigChange", {
        "action": serializers.ChoiceField(choices=["create", "change", "delete"]),
        "kind": serializers.ChoiceField(choices=sorted(KINDS.values())),
        "name": serializers.CharField(),
        "fields": FIELD_CHANGES,
    }, many=True),
    "left": serializers.ListField(
        child=serializers.DictField(child=serializers.CharField()),
        help_text="items of the managed sections the file does not name, left as they are "
                  "(without prune)"),
    "warnings": serializers.ListField(child=serializers.CharField()),
})
REFUSED = OpenApiResponse(
    response=inline_serializer("ConfigRefused", {
        "detail": serializers.CharField(),
        "errors": inline_serializer("ConfigProblem", {
            "item": serializers.CharField(help_text='e.g. "endpoints.chat"; "" for the file'),
            "field": serializers.CharField(),
            "message": serializers.CharField(),
        }, many=True),
    }),
    description="Refused, nothing changed: every problem of the document, each naming its "
                "item and field (an unknown field, a value the resource's API refuses, a name "
                "two rows of the team share, a team other than the path's).")
EXPORT = inline_serializer("ConfigExport", {
    "config": ConfigField(),
    "warnings": serializers.ListField(child=serializers.CharField()),
})


class ConfigView(APIView):
    """A team's configuration as code."""

    permission_classes = [IsAuthenticated]

    @extend_schema(responses=EXPORT)
    def get(self, request: Request, slug: str) -> Response:
        """Export the team's configuration: secrets as `secret_env` placeholders"""
        config, warnings = export_config(team_in_scope(request, slug))
        return Response({"config": config, "warnings": warnings})

    @extend_schema(request=ConfigApplySerializer, responses={200: PLAN, 422: REFUSED})
    def post(self, request: Request, slug: str) -> Response:
        """Apply a configuration, all of it or nothing, and answer the plan"""
        team = team_in_scope(request, slug)
        if not may_apply_config(Access.for_request(request), team.pk):
            raise exceptions.PermissionDenied("Your role in this team is read-only.")
        body = ConfigApplySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        config, dry_run, prune = (body.validated_data[one] for one in ("config", "dry_run", "prune"))
        problems = shape_problems(config)
        if not problems and config["team"] != team.slug:
            problems.append(Problem("", "team", f"the file is for team {config['team']!r}, "
                                                f"not {team.slug!r}"))
        outcome = Outcome(problems=problems) if problems else apply_config(
            request, team, config, dry_run=dry_run, prune=prune)
        if outcome.problems:
            return Response({"detail": "The configuration was refused; nothing was changed.",
                             "errors": [one.as_dict() for one in outcome.problems]}, status=422)
        return Response({"team": team.slug, "dry_run": dry_run, "prune": prune,
                         "applied": not dry_run,
                         "changes": [change.as_dict() for change in outcome.changes],
                         "left": outcome.left, "warnings": outcome.warnings})
