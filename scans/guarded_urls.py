"""Stored secrets follow their URL's origin.

An endpoint's API key is sent to its base URL (a webhook channel's signing secret follows its
URL the same way: scans/channels/service.py). Whoever can point such a URL somewhere else could
make the site hand the secret to a server of their choosing, so (the page form and the API
both call `url_changes`):

- only owners and admins may change a URL whose secret is stored, unless the same request
  gives a new secret or removes the stored one (members and read-write tokens are refused);
- when the scheme, host or port changes, the stored secret is dropped, unless the same
  request gives a new one. A new path on the same origin keeps it.

Removing a URL sends the secret nowhere, so anyone who may edit the endpoint may do that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scans.models import Endpoint
from scans.origins import origin_of


@dataclass(frozen=True)
class GuardedURL:
    url_field: str
    secret_field: str
    secret_label: str


GUARDED_URLS = (
    GuardedURL("base_url", "api_key_encrypted", "API key"),
)


@dataclass
class URLChanges:
    refused: dict[str, str] = field(default_factory=dict)  # URL field → why it may not change
    dropped: list[GuardedURL] = field(default_factory=list)  # secrets the change removes


def url_changes(endpoint: Endpoint, new_urls: dict[str, str], secrets_given: set[str],
                can_manage: bool) -> URLChanges:
    """Judge the URL fields a request changes. `endpoint` holds the stored values;
    `secrets_given` names the secret fields the same request replaces or removes."""
    result = URLChanges()
    if endpoint.pk is None:
        return result  # a new endpoint: its secrets arrive with its URLs
    for guarded in GUARDED_URLS:
        old = getattr(endpoint, guarded.url_field)
        new = new_urls.get(guarded.url_field, old)
        stored = bool(getattr(endpoint, guarded.secret_field))
        if new == old or not new or not stored or guarded.secret_field in secrets_given:
            continue  # unchanged, removed (sends nothing), nothing stored, or replaced too
        if not can_manage:
            result.refused[guarded.url_field] = (
                f"Only owners and admins can change this URL while a {guarded.secret_label} is "
                f"stored for it. Give a new {guarded.secret_label} with the new URL, or remove "
                "the stored one.")
        elif old and origin_of(old) != origin_of(new):
            result.dropped.append(guarded)
    return result
