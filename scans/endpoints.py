"""Writing an endpoint: the rules the endpoint pages and the API share, in one place.

Each surface parses its own input (the page's checkboxes, where a blank secret keeps the
stored one; the API's JSON, where an empty string removes it) into these calls:

- `clean_base_url`: an http(s) URL without its trailing slash;
- `check_profile`: the scan profile runs here (the engine's rules, then the site's limits);
- `url_changes` (scans/guarded_urls.py): who may point a URL with a stored secret elsewhere,
  and which secrets stay behind when it moves to another origin;
- `set_secret`: store a secret encrypted, or remove it;
- `save`: keep the schedule consistent, then write (a new endpoint whole, an edit only the
  fields its surface owns: alert state and the like belong to the workers).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from accounts import encryption
from scans import profile, scheduling
from scans.grader.plan import DEFAULT_LEVELS
from scans.guarded_urls import GuardedURL, url_changes
from scans.models import Endpoint

__all__ = ["CAPACITY_FIELDS", "DEFAULT_LEVELS", "PROFILE_FIELDS", "SECRET_FIELDS",
           "WORKLOAD_FIELDS", "InvalidURL", "check_profile", "clean_base_url", "drop_secrets",
           "save", "set_secret", "url_changes"]

# The capacity search (issue 22): on, its levels, the alert threshold; its SLO is the
# endpoint's TTFT and error-rate targets, which is why those are part of the profile too.
CAPACITY_FIELDS = ("capacity_search", "capacity_search_levels", "capacity_alert_below")
# What a scan profile is made of (validated together by check_profile).
PROFILE_FIELDS = ("base_url", "model", "levels", "requests_per_level", "max_tokens",
                  "timeout_s", "price_input_per_mtok", "price_output_per_mtok",
                  "input_tokens", "output_tokens", "shared_prefix_tokens", "warmup",
                  "load_dataset_encrypted", "slo_ttft_p95_ms", "slo_error_rate",
                  *CAPACITY_FIELDS)
# The workload's own fields (issue 21), without the dataset (a secret, below).
WORKLOAD_FIELDS = ("input_tokens", "output_tokens", "shared_prefix_tokens", "warmup")
# A secret as people give it → the field that stores it encrypted.
SECRET_FIELDS = {"api_key": "api_key_encrypted",
                 "prompt_sample": "prompt_sample_encrypted",
                 "load_dataset": "load_dataset_encrypted"}


class InvalidURL(ValueError):
    pass


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
        set_secret(endpoint, "load_dataset", fields["load_dataset"])
    profile.validate_profile(endpoint)


def set_secret(endpoint: Endpoint, name: str, value: str) -> None:
    """Store secret `name` (api_key, prompt_sample, load_dataset) encrypted;
    "" removes it."""
    setattr(endpoint, SECRET_FIELDS[name], encryption.encrypt(value) if value else "")


def drop_secrets(endpoint: Endpoint, dropped: Iterable[GuardedURL]) -> list[str]:
    """Forget the secrets of URLs that moved to another origin; their labels, for the user."""
    labels = []
    for guarded in dropped:
        setattr(endpoint, guarded.secret_field, "")
        labels.append(guarded.secret_label)
    return labels


def save(endpoint: Endpoint, old_interval: int | None, fields: Iterable[str] | None = None,
         ) -> Endpoint:
    """Schedule (next_scan_at follows enabled, mode and interval), then save: all of a new
    endpoint, only `fields` of an existing one. `old_interval` is None for a new endpoint."""
    scheduling.apply_schedule(endpoint, old_interval)
    if endpoint.pk is None or fields is None:
        endpoint.save()
    else:
        endpoint.save(update_fields=[*dict.fromkeys([*fields, "next_scan_at"])])
    return endpoint
