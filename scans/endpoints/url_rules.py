"""Stored secrets follow their URL's origin.

An endpoint's API key and its load dataset are sent to its base URL (a webhook channel's
signing secret follows its URL the same way: scans/notify/channels/service.py). Whoever can point
such a URL somewhere else could make the site hand them to a server of their choosing, so (the
page form and the API both call `url_changes`):

- only owners and admins may change a URL while a secret sent to it is stored, unless the same
  request gives a new one or removes the stored one (members and read-write tokens are
  refused);
- when the scheme, host or port changes, each stored secret of the URL is dropped, unless the
  same request gives a new one. A new path on the same origin keeps them.

The prompt sample is never sent anywhere, so it is no reason to refuse a change; it describes
the traffic of the server it was given for, so it stays behind with the others when the
origin changes.

Removing a URL sends the secrets nowhere, so anyone who may edit the endpoint may do that.
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
    sent: bool = True  # sent to the URL: only owners and admins may move it elsewhere


GUARDED_URLS = (
    GuardedURL("base_url", "api_key_encrypted", "API key"),
    GuardedURL("base_url", "load_dataset_encrypted", "load dataset"),
    GuardedURL("base_url", "prompt_sample_encrypted", "prompt sample", sent=False),
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
    held: dict[str, list[str]] = {}  # URL field → labels of the secrets that hold it
    for guarded in GUARDED_URLS:
        old = getattr(endpoint, guarded.url_field)
        new = new_urls.get(guarded.url_field, old)
        stored = bool(getattr(endpoint, guarded.secret_field))
        if new == old or not new or not stored or guarded.secret_field in secrets_given:
            continue  # unchanged, removed (sends nothing), nothing stored, or replaced too
        if guarded.sent and not can_manage:
            held.setdefault(guarded.url_field, []).append(guarded.secret_label)
        elif old and origin_of(old) != origin_of(new):
            result.dropped.append(guarded)
    for url_field, labels in held.items():
        result.refused[url_field] = _refusal(labels)
    return result


def _refusal(labels: list[str]) -> str:
    named = " and ".join(f"{'an' if label[0] in 'AEIOU' else 'a'} {label}" for label in labels)
    many = len(labels) > 1
    return (f"Only owners and admins can change this URL while {named} "
            f"{'are' if many else 'is'} stored for it. Give a new {' and '.join(labels)} with "
            f"the new URL, or remove the stored {'ones' if many else 'one'}.")
