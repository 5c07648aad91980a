"""Writing an endpoint: the one place an endpoint is made or changed, whichever surface asks.

The page form and the API only parse their input into `data` and call `create(team, data,
by)` or `update(endpoint, data, by)`. `data` names Endpoint fields (`levels` and `locations`
too); secrets by the names people give them (`api_key`, `prompt_sample`, `load_dataset`: ""
removes the stored one, absent keeps it); `channels` as public ids (absent: unchanged). `by`
is the caller's Access. In one transaction, in this order (the first refusal wins):

- the URL rules (scans/endpoints/url_rules.py): who may point a URL with a stored secret
  elsewhere (URLChangeRefused), and which secrets stay behind when it moves to another origin;
- the scan profile: the grader's rules, then the site's limits (PlanError, one line; each
  field's bounds and words are its row in profile_fields.py);
- a new endpoint's room under the team's cap (limits.TooManyEndpoints);
- the channels, which must be the endpoint's team's (UnknownChannels);
- then the secrets, the schedule (next_scan_at follows enabled, mode and interval) and the
  write: a new endpoint whole, an edit only the fields it was given (alert state and the like
  belong to the workers).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.utils import timezone

from accounts import encryption
from accounts.models import Team
from accounts.tenancy import Access
from audit import record as audit
from scans.endpoints import limits, profile, profile_fields, scheduling
from scans.endpoints.url_rules import GuardedURL, url_changes
from scans.grader import DEFAULT_LEVELS, DEMO_MODEL_ID, PlanError
from scans.models import (
    Endpoint,
    EndpointMode,
    LivenessState,
    NotificationChannel,
    ProbeResult,
    Scan,
    ScanStatus,
)
from scans.models.endpoints import endpoint_moved

__all__ = ["DEMO_ENDPOINT_NAME", "PROFILE_FIELDS", "REFUSALS", "SECRET_FIELDS", "InvalidURL",
           "Saved", "URLChangeRefused", "UnknownChannels", "check_profile", "clean_base_url",
           "create", "demo_endpoint_fields", "expected_scan_s", "update"]

# What a scan profile is made of (validated together by check_profile): the target, the
# levels, each row of the table that is a column (the dataset is a secret: its ciphertext),
# and the SLO targets, which the capacity search searches against.
PROFILE_FIELDS = ("base_url", "model", "levels",
                  *(row.name for row in profile_fields.FIELDS if row.kind != "dataset"),
                  "load_dataset_encrypted", "slo_ttft_p95_ms", "slo_error_rate")
# A secret as people give it → the field that stores it encrypted.
SECRET_FIELDS = {"api_key": "api_key_encrypted",
                 "prompt_sample": "prompt_sample_encrypted",
                 "load_dataset": "load_dataset_encrypted"}


class InvalidURL(ValueError):
    pass


class URLChangeRefused(Exception):
    """The caller may not point these URLs elsewhere while a secret is stored for them."""

    def __init__(self, refused: dict[str, str]):
        self.refused = refused  # URL field → why it may not change
        super().__init__("; ".join(refused.values()))


class IntervalTooShort(Exception):
    """An interval shorter than the endpoint's scans take: each would wait behind the last."""


class UnknownChannels(Exception):
    def __init__(self) -> None:
        super().__init__("no such channel in the endpoint's team")


# Every refusal of create() and update(): each surface says them in its own way.
REFUSALS = (URLChangeRefused, PlanError, limits.TooManyEndpoints, UnknownChannels,
            IntervalTooShort)

# How many of an endpoint's last scans say how long its scans take.
TYPICAL_SCAN_SAMPLE = 5


@dataclass
class Saved:
    endpoint: Endpoint
    dropped_secrets: list[str] = field(default_factory=list)  # their labels, for the user


def create(team: Team, data: Mapping[str, Any], by: Access) -> Saved:
    """Make an endpoint of `team` from `data` (the model's defaults for what it leaves out;
    `by` is who asks: a new endpoint's secrets arrive with its URLs, so no URL rule applies)."""
    fields = dict(data)
    secrets = _given_secrets(fields)
    channel_ids = fields.pop("channels", None)
    endpoint = Endpoint(team=team, **{"levels": list(DEFAULT_LEVELS), **fields})
    with transaction.atomic(), audit.track(endpoint):
        _set_secrets(endpoint, secrets)
        profile.validate_profile(endpoint)
        limits.check_room_for_endpoint(team.pk)
        picked = _channels(team.pk, channel_ids or [])
        scheduling.apply_schedule(endpoint, None)  # a scheduled one is due at the next beat
        endpoint.save()
        endpoint.channels.set(picked)
    return Saved(endpoint)


def update(endpoint: Endpoint, data: Mapping[str, Any], by: Access) -> Saved:
    """Change what `data` gives of `endpoint`, judged against the stored row (read again under
    a lock: a form has already written its input onto its own copy)."""
    fields = dict(data)
    secrets = _given_secrets(fields)
    channel_ids = fields.pop("channels", None)
    fields.pop("team", None)  # an endpoint never moves between teams
    with transaction.atomic(), audit.track(endpoint):
        stored = (Endpoint.objects.for_team(endpoint.team_id).select_for_update()
                  .select_related("team").get(pk=endpoint.pk))
        changes = url_changes(
            stored, {name: fields[name] for name in ("base_url",) if name in fields},
            {SECRET_FIELDS[name] for name in secrets}, by.can_manage(stored.team_id))
        if changes.refused:
            raise URLChangeRefused(changes.refused)
        old_interval, old_url = stored.interval_minutes, stored.base_url
        for name, value in fields.items():
            setattr(stored, name, value)
        if stored.base_url != old_url:
            # Another server: what the probes confirmed of the old one says nothing of it.
            LivenessState.objects.for_team(stored.team_id).filter(endpoint=stored).delete()
            stored.liveness, stored.liveness_cause, stored.liveness_since = "", "", None
            stored.next_probe_at = None  # probed at the next pass
            fields.update(liveness="", liveness_cause="", liveness_since=None,
                          next_probe_at=None)
            # Nor do its incidents' problems: no recovery of the old server will come to end
            # them (scans/notify/incidents.py receives this; endpoints import no alert code).
            endpoint_moved.send(Endpoint, endpoint=stored, at=timezone.now())
        _set_secrets(stored, secrets)
        # Judged with the secrets it has now: one a new origin drops still counted here.
        profile.validate_profile(stored)
        picked = None if channel_ids is None else _channels(stored.team_id, channel_ids)
        dropped = _drop_secrets(stored, changes.dropped)
        written = [*fields, *(SECRET_FIELDS[name] for name in secrets),
                   *(guarded.secret_field for guarded in changes.dropped)]
        if stored.interval_minutes != old_interval:
            _check_interval(stored)
        scheduling.apply_schedule(stored, old_interval)
        stored.save(update_fields=[*dict.fromkeys([*written, "next_scan_at"])])
        if picked is not None:
            stored.channels.set(picked)
    return Saved(stored, dropped)


DEMO_ENDPOINT_NAME = "Demo target"


def demo_endpoint_fields(base_url: str) -> dict[str, Any]:
    """The run command's demo target as an endpoint: every field at the form's default but the
    interval (5 minutes, so grades come while someone watches), so it grades as a new endpoint
    of the same server does."""
    return {"name": DEMO_ENDPOINT_NAME, "base_url": base_url, "model": DEMO_MODEL_ID,
            "levels": list(DEFAULT_LEVELS), "interval_minutes": 5}


def typical_scan_s(endpoint: Endpoint) -> tuple[float, int] | None:
    """(the median seconds its last scans ran, how many), or None before any finished."""
    runs = [(finished - started).total_seconds() for started, finished in
            Scan.objects.for_team(endpoint.team_id).filter(
                endpoint_id=endpoint.pk, status=ScanStatus.SUCCEEDED, started_at__isnull=False,
                finished_at__isnull=False)
            .order_by("-finished_at").values_list("started_at", "finished_at")
            [:TYPICAL_SCAN_SAMPLE]]
    if not runs:
        return None
    return sorted(runs)[len(runs) // 2], len(runs)


#: The pace a stream is assumed to keep before the endpoint's own scans tell: a modest server
#: under load. Replies are taken at their ceiling, so the figure is an "up to".
ASSUMED_STREAM_TOKENS_PER_S = 30.0
#: The preflight, the workload's set-up and the bookkeeping around the levels.
SCAN_OVERHEAD_S = 10.0
#: The latest probes whose median first token the estimate takes.
PROBES_FOR_ESTIMATE = 10


@dataclass(frozen=True)
class ScanEstimate:
    """How long a scan of the endpoint takes: `seconds`, and `basis`, what the figure rests on
    in words ("the median of its last 5 scans", "its profile: ...")."""

    seconds: float
    basis: str
    measured: bool


def expected_scan_s(endpoint: Endpoint) -> ScanEstimate:
    """The endpoint's own last scans when there are some; before them, its profile: each
    level's rounds of requests (warm-up included) at one request's time, a reply of max
    tokens at ASSUMED_STREAM_TOKENS_PER_S after the first token its probes measured (1 s
    before any probe). The capacity search's levels are not known ahead, so not counted."""
    typical = typical_scan_s(endpoint)
    if typical is not None:
        seconds, count = typical
        return ScanEstimate(seconds, f"the median of its last {count} scans"
                            if count > 1 else "its last scan", measured=True)
    plan = profile.plan_for(endpoint)
    warmup = plan.workload.warmup or 0
    rounds = sum(math.ceil(requests / level) + (math.ceil(warmup / level) if warmup else 0)
                 for level, requests in zip(plan.levels, plan.requests_per_level, strict=True))
    first_token_s = _probed_first_token_s(endpoint)
    request_s = first_token_s + plan.max_tokens / ASSUMED_STREAM_TOKENS_PER_S
    search = ", plus the capacity search" if endpoint.capacity_search else ""
    return ScanEstimate(
        SCAN_OVERHEAD_S + rounds * request_s,
        f"its profile: {rounds} rounds of requests with replies of up to {plan.max_tokens:,} "
        f"tokens at {ASSUMED_STREAM_TOKENS_PER_S:g} tokens/s{search}", measured=False)


def _probed_first_token_s(endpoint: Endpoint) -> float:
    """The median time to first token of the endpoint's latest probes, in seconds; 1 s before
    any probe answered."""
    ttfts = sorted(ProbeResult.objects.for_team(endpoint.team_id)
                   .filter(endpoint_id=endpoint.pk, ok=True, ttft_ms__isnull=False)
                   .order_by("-at").values_list("ttft_ms", flat=True)[:PROBES_FOR_ESTIMATE])
    return ttfts[len(ttfts) // 2] / 1000 if ttfts else 1.0


def _check_interval(endpoint: Endpoint) -> None:
    """A scheduled endpoint's new interval must leave room for one scan (what its last scans
    took); before any scan there is nothing to judge by."""
    typical = typical_scan_s(endpoint) if endpoint.mode == EndpointMode.SCHEDULED else None
    if typical is None or typical[0] <= endpoint.interval_minutes * 60:
        return
    seconds, count = typical
    need = math.ceil(seconds / 60)
    raise IntervalTooShort(
        f"scans of this endpoint take about {need} min (the median of its last {count}), so an "
        f"interval of {endpoint.interval_minutes} min would queue each scan behind the last: "
        f"choose {need} min or more, or a lighter scan profile")


def clean_base_url(url: str) -> str:
    """`url` as typed, checked: a missing scheme is named with the fix rather than guessed (a
    guessed http:// would send the API key in clear to a server that wanted https)."""
    url = url.strip()
    if url and "://" not in url:
        raise InvalidURL(f"the URL has no scheme: did you mean http://{url} or https://{url}?")
    if not url.startswith(("http://", "https://")):
        raise InvalidURL("expected an http(s) URL such as https://host/v1")
    try:
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError:
        raise InvalidURL("expected an http(s) URL such as https://host/v1") from None
    return url.rstrip("/")


def check_profile(fields: dict) -> None:
    """Raise PlanError (one line) unless this scan profile can run here. A new load dataset
    may be given as text (`load_dataset`, "" for none) instead of its stored ciphertext."""
    endpoint = Endpoint(**{name: fields[name] for name in PROFILE_FIELDS if name in fields})
    if "load_dataset" in fields:
        _set_secrets(endpoint, {"load_dataset": fields["load_dataset"]})
    profile.validate_profile(endpoint)


def _given_secrets(fields: dict[str, Any]) -> dict[str, str]:
    return {name: fields.pop(name) for name in SECRET_FIELDS if name in fields}


def _set_secrets(endpoint: Endpoint, secrets: Mapping[str, str]) -> None:
    """Store each secret encrypted; "" removes it."""
    for name, value in secrets.items():
        setattr(endpoint, SECRET_FIELDS[name], encryption.encrypt(value) if value else "")


def _drop_secrets(endpoint: Endpoint, dropped: Iterable[GuardedURL]) -> list[str]:
    """Forget the secrets of URLs that moved to another origin; their labels, for the user."""
    labels = []
    for guarded in dropped:
        setattr(endpoint, guarded.secret_field, "")
        labels.append(guarded.secret_label)
    return labels


def _channels(team_id: int, ids: Iterable[Any]) -> list[NotificationChannel]:
    wanted = set(ids)
    if not wanted:
        return []
    found = list(NotificationChannel.objects.for_team(team_id).filter(public_id__in=wanted))
    if len(found) != len(wanted):
        raise UnknownChannels()
    return found
