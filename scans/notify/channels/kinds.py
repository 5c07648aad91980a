"""The kinds of notification channel, one interface: check what a channel is given (`clean`)
and send one message (`send`).

- email: the team's owners and admins, by the site's mail backend (as alerts always went);
- webhook: the alert's JSON, signed with HMAC-SHA256 when a secret is set, POSTed through
  the outbound guard (our own transport, which judges every connection);
- Slack, Microsoft Teams (its Workflows webhook), Discord, Telegram, PagerDuty, Opsgenie and
  ntfy: Apprise used as a library, one URL per channel. Only Apprise's plugin for the kind is
  accepted; its connections go through guarded_http (only the hosts the kind's service lives
  on, or the host the URL names for Teams and a private ntfy, each address judged).
- Any other service Apprise reaches over HTTP(S) (the generic kind, `apprise`): accepted only
  when its plugin sends with `requests`, so guarded_http judges every connection (the host the
  URL names, or the API host the plugin's class names); services that open their own sockets
  (mail, syslog, MQTT, XMPP, desktop notifications) are refused by their scheme.
- Paging services resolve what they opened: a message that opens an incident (down, below the
  floor, …) carries a key per endpoint and kind of trouble (`Message.incident`), and its
  recovery resolves the incident with that key. PagerDuty through Apprise (Events API v2:
  event_action "trigger", then "resolve", with the same dedup_key); Opsgenie through our own
  guarded client (guarded_http.post_json): Apprise closes only alerts it remembers in its own
  per-process store, by id, so an alert is created with the key as its alias and closed by
  alias (POST /v2/alerts/{alias}/close?identifierType=alias).
- A failed send is told in coarse classes (scans/outbound.py): "not reachable from this site"
  (a refused address, no DNS answer, a closed, filtered or silent port), "TLS error", or the
  HTTP status the service answered; the error's own words go to the server log, not to the
  delivery row a team member reads.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import sys
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import apprise
import httpx
import requests
from apprise.manager_plugins import NotificationManager
from apprise.plugins.discord import NotifyDiscord
from apprise.plugins.ntfy import NotifyNtfy, NtfyMode
from apprise.plugins.opsgenie import OPSGENIE_API_LOOKUP, NotifyOpsgenie
from apprise.plugins.pagerduty import NotifyPagerDuty, PagerDutyAction
from apprise.plugins.slack import NotifySlack
from apprise.plugins.telegram import NotifyTelegram
from apprise.plugins.workflows import NotifyWorkflows
from django.core.mail import send_mail

from accounts.models import Membership, Role
from accounts.validators import one_line
from scans.grader import ScanTransport
from scans.models import ChannelKind
from scans.notify.channels.guarded_http import check_host, guarded_connections, post_json
from scans.outbound import NOT_REACHABLE, OutboundRefused, check_url, failure_class, guard

SIGNATURE_HEADER = "X-Tokvera-Signature"
MAX_URL_CHARS = 2000
SEND_TIMEOUT_S = 10

# Apprise logs what it sends at DEBUG (tokens in URLs among it) and its failures at WARNING;
# its failures reach our log redacted, through DeliveryFailed.detail, and nothing else does.
log = logging.getLogger(__name__)
_apprise_log = logging.getLogger("apprise")
_apprise_log.setLevel(logging.WARNING)
_apprise_log.addHandler(logging.NullHandler())
_apprise_log.propagate = False


class ChannelInvalid(Exception):
    """What a channel was given cannot be used: the message names the field's fix."""


class ChannelUnreachable(ChannelInvalid):
    """The guard refuses where the channel's URL leads (the message never says where)."""


class DeliveryFailed(Exception):
    """A send that did not arrive: the message is what the delivery row says (a coarse class
    for network failures), `detail` what the server log says (tokens redacted). `retry` is
    False when trying again cannot help (a refused address, a 4xx answer, no recipient)."""

    def __init__(self, message: str, retry: bool = True, detail: str = ""):
        super().__init__(message)
        self.retry = retry
        self.detail = detail or message


@dataclass(frozen=True)
class Message:
    title: str  # one line
    body: str  # plain text
    level: str  # "failure", "warning", "success" or "info" (Apprise's notify types)
    payload: dict  # the alert's JSON, as the webhook sends it
    # The incident this message opens or (resolves=True) ends: one key per endpoint and kind of
    # trouble, so a paging service's recovery resolves what the opening raised; "" for none.
    incident: str = ""
    resolves: bool = False


@dataclass(frozen=True)
class AppriseKind:
    plugin: type
    # Where the service's API lives (Apprise's plugin posts there); empty: the host in the URL.
    hosts: frozenset[str]
    example: str


APPRISE_KINDS: dict[str, AppriseKind] = {
    ChannelKind.SLACK: AppriseKind(
        NotifySlack,
        frozenset({"hooks.slack.com", "slack.com", "hooks.slack-gov.com"}),
        "The incoming webhook's URL, https://hooks.slack.com/services/T…/B…/…, or "
        "slack://T…/B…/… (Apprise's form).",
    ),
    ChannelKind.TEAMS: AppriseKind(
        NotifyWorkflows,
        frozenset(),
        "The URL of a Teams workflow 'When a Teams webhook request is received', "
        "https://…logic.azure.com:443/workflows/…/triggers/manual/paths/invoke?…&sig=…, or "
        "workflows://host/workflow/signature.",
    ),
    ChannelKind.DISCORD: AppriseKind(
        NotifyDiscord,
        frozenset({"discord.com", "discordapp.com"}),
        "The channel's webhook URL, https://discord.com/api/webhooks/ID/TOKEN, or discord://ID/TOKEN.",
    ),
    ChannelKind.TELEGRAM: AppriseKind(
        NotifyTelegram,
        frozenset({"api.telegram.org"}),
        "tgram://BOT_TOKEN/CHAT_ID: the bot's token from @BotFather and the chat to post in.",
    ),
    ChannelKind.PAGERDUTY: AppriseKind(
        NotifyPagerDuty,
        frozenset({"events.pagerduty.com", "events.eu.pagerduty.com"}),
        "pagerduty://INTEGRATION_KEY@API_KEY (Events API v2); add ?region=eu for the EU service.",
    ),
    ChannelKind.OPSGENIE: AppriseKind(
        NotifyOpsgenie,
        frozenset({"api.opsgenie.com", "api.eu.opsgenie.com"}),
        "opsgenie://API_KEY (an API integration's key); add ?region=eu for the EU service.",
    ),
    ChannelKind.NTFY: AppriseKind(
        NotifyNtfy,
        frozenset(),
        "https://ntfy.sh/TOPIC, or your own server: ntfys://your.server/TOPIC (ntfy://… without TLS).",
    ),
}

# The generic kind: any Apprise service that speaks HTTP through `requests` (so guarded_http
# sees and judges each of its connections). Services that open their own sockets (mail over
# SMTP, syslog, MQTT, XMPP, IRC, desktop notifications…) would go around the guard: refused.
GENERIC_EXAMPLE = (
    "Any Apprise URL of a service that is reached over HTTP(S), e.g. gotifys://host/TOKEN, "
    "mmosts://host/TOKEN (Mattermost), matrixs://user:pass@host/#room, pover://USER@TOKEN "
    "(Pushover), jsons://host/path. Not mail, syslog, MQTT, XMPP or desktop notifications.")
_PLUGINS = NotificationManager()  # Apprise's registry of plugins by scheme (one per process)
# Class attributes of a plugin that name the service's fixed API (notify_url, api_url, …).
_SERVICE_URL_NAME = re.compile(r"^(notify|api|base|service_api)[a-z_]*url[a-z_]*$")

EXAMPLES = {
    ChannelKind.EMAIL: "Mail to the team's owners and admins; nothing to fill in.",
    ChannelKind.WEBHOOK: "An http(s) URL that takes a POST of the alert's JSON.",
    **{kind: spec.example for kind, spec in APPRISE_KINDS.items()},
    ChannelKind.APPRISE: GENERIC_EXAMPLE,
}

_LEVELS = {
    "failure": apprise.NotifyType.FAILURE,
    "warning": apprise.NotifyType.WARNING,
    "success": apprise.NotifyType.SUCCESS,
    "info": apprise.NotifyType.INFO,
}


# --- checking what a channel is given --------------------------------------------------------


def clean(kind: str, url: str) -> str:
    """The channel's URL as stored, or ChannelInvalid; what `destination` shows of it is
    `destination(kind, url)`."""
    if kind == ChannelKind.EMAIL:
        return ""
    url = url.strip()
    if not url:
        raise ChannelInvalid("Give the URL this channel sends to.")
    if len(url) > MAX_URL_CHARS:
        raise ChannelInvalid(f"At most {MAX_URL_CHARS} characters.")
    if kind == ChannelKind.WEBHOOK:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ChannelInvalid("Expected an http(s) URL such as https://hooks.example.com/tokvera.")
        _refused_is_invalid(lambda: check_url(url))
        return url
    _apprise_plugin(kind, url)
    return url


def _refused_is_invalid(check) -> None:
    try:
        check()
    except OutboundRefused as exc:
        log.info("channel URL refused: %s", exc.detail)
        raise ChannelUnreachable("Not reachable from this site.") from None


def _speaks_http(plugin_class: type) -> bool:
    """The plugin sends with `requests` (its class or a base's module uses it)."""
    return any("requests" in vars(sys.modules.get(cls.__module__) or object)
               for cls in plugin_class.__mro__ if cls.__module__.startswith("apprise."))


def _generic_plugin(url: str):
    scheme = urlsplit(url).scheme.lower()
    # Judged by the scheme's plugin class first: a plugin whose own library is not installed
    # here is still refused for what it is.
    plugin_class = _PLUGINS[scheme] if scheme and scheme in _PLUGINS else None
    if plugin_class is not None and not _speaks_http(plugin_class):
        raise ChannelInvalid(
            f"{plugin_class.service_name} ({scheme}://) is not sent over HTTP, so this site "
            "cannot check where it connects; use a service reached over HTTP(S), or the Email "
            "kind for mail.")
    plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    if plugin is None:
        raise ChannelInvalid(f"Apprise cannot read this URL ({scheme or 'no'} scheme). "
                             f"{GENERIC_EXAMPLE}")
    if not _speaks_http(type(plugin)):
        raise ChannelInvalid(f"{plugin.service_name} is not sent over HTTP. {GENERIC_EXAMPLE}")
    host, port = _own_host(ChannelKind.APPRISE, plugin)
    if host:
        _refused_is_invalid(lambda: check_host(host, port))
    return plugin


def _apprise_plugin(kind: str, url: str):
    """Apprise's plugin for `url`, if it is the kind's own, its host checked by the guard."""
    if kind == ChannelKind.APPRISE:
        return _generic_plugin(url)
    spec = APPRISE_KINDS[kind]
    plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    if plugin is None:
        raise ChannelInvalid(f"Apprise cannot read this as a {ChannelKind(kind).label} URL. {spec.example}")
    if not isinstance(plugin, spec.plugin):
        raise ChannelInvalid(
            f"This is a {plugin.service_name} URL, not a {ChannelKind(kind).label} one. {spec.example}"
        )
    host, port = _own_host(kind, plugin)
    if host:
        _refused_is_invalid(lambda: check_host(host, port))
    return plugin


def _invalid_now(exc: ChannelInvalid) -> str:
    """What a delivery row says of a channel found unusable when sending."""
    return NOT_REACHABLE if isinstance(exc, ChannelUnreachable) else str(exc)


def _own_host(kind: str, plugin) -> tuple[str, int]:
    """The host the URL itself names, where the kind has no fixed service host; ("", 0)."""
    if kind == ChannelKind.APPRISE:
        host = getattr(plugin, "host", None)
        # A self-hosted service's URL names its server; a hosted one's "host" is often a token.
        if isinstance(host, str) and ("." in host or ":" in host or host == "localhost"):
            secure = bool(getattr(plugin, "secure", True))
            return host.lower(), int(getattr(plugin, "port", None) or (443 if secure else 80))
        return "", 0
    if kind == ChannelKind.TEAMS or (kind == ChannelKind.NTFY and plugin.mode == NtfyMode.PRIVATE):
        secure = kind == ChannelKind.TEAMS or plugin.secure
        return str(plugin.host).lower(), int(plugin.port or (443 if secure else 80))
    return "", 0


def _hosts(kind: str, plugin) -> set[str]:
    host, _ = _own_host(kind, plugin)
    if host:
        return {host}
    if kind == ChannelKind.NTFY:
        return {urlsplit(NotifyNtfy.cloud_notify_url).hostname or "ntfy.sh"}
    if kind == ChannelKind.APPRISE:
        return _service_hosts(plugin)
    return set(APPRISE_KINDS[kind].hosts)


def _service_hosts(plugin) -> set[str]:
    """The hosts a hosted service's plugin posts to, from the API URLs its classes name."""
    hosts = set()
    for cls in type(plugin).__mro__:
        for name, value in vars(cls).items():
            if (_SERVICE_URL_NAME.match(name) and isinstance(value, str)
                    and value.startswith(("http://", "https://"))):
                host = urlsplit(value).hostname
                if host:
                    hosts.add(host.lower())
    return hosts


def destination(kind: str, url: str) -> str:
    """What the channels page shows of where a channel sends: a host, never a token."""
    if kind == ChannelKind.EMAIL:
        return "the team's owners and admins"
    if kind == ChannelKind.WEBHOOK:
        return urlsplit(url).hostname or ""
    plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    return ", ".join(sorted(_hosts(kind, plugin))) if plugin is not None else ""


# --- sending -----------------------------------------------------------------------------------


def send(kind: str, team_id: int, config: dict, message: Message) -> None:
    """Send one message; DeliveryFailed when it did not arrive."""
    if kind == ChannelKind.EMAIL:
        _send_email(team_id, message)
    elif kind == ChannelKind.WEBHOOK:
        _send_webhook(config["url"], config.get("secret", ""), message.payload)
    elif kind == ChannelKind.OPSGENIE:
        _send_opsgenie(config["url"], message)
    else:
        _send_apprise(kind, config["url"], message)


def _send_email(team_id: int, message: Message) -> None:
    recipients = list(
        Membership.objects.for_team(team_id)
        .filter(role__in=[Role.OWNER, Role.ADMIN])
        .exclude(user__email="")
        .values_list("user__email", flat=True)
    )
    if not recipients:
        raise DeliveryFailed("no owner or admin of the team has an email address", retry=False)
    try:
        # one line whatever was stored: a line break in a subject is a BadHeaderError
        send_mail(
            subject=one_line(message.title), message=message.body, from_email=None, recipient_list=recipients
        )
    except OSError as exc:  # SMTP and socket errors: try again later
        raise DeliveryFailed(f"mail not sent: {type(exc).__name__}: {exc}") from None


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _send_webhook(url: str, secret: str, payload: dict) -> None:
    """POST the signed JSON through the outbound guard (it judges every connection)."""
    try:
        check_url(url)  # a clear refusal up front
    except OutboundRefused as exc:
        raise DeliveryFailed(NOT_REACHABLE, retry=False, detail=exc.detail) from None
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    headers = {"Content-Type": "application/json"}
    if secret:
        headers[SIGNATURE_HEADER] = sign(secret, body)

    async def post() -> int:
        transport = ScanTransport(connect_guard=guard)
        async with httpx.AsyncClient(
            transport=transport, timeout=SEND_TIMEOUT_S, follow_redirects=False
        ) as client:
            response = await client.post(url, content=body, headers=headers)
            return response.status_code

    try:
        status = asyncio.run(post())
    except OutboundRefused as exc:
        raise DeliveryFailed(NOT_REACHABLE, retry=False, detail=exc.detail) from None
    except (httpx.HTTPError, OSError) as exc:
        detail = f"{type(exc).__name__}: {redact(str(exc), [url, secret])}"
        raise DeliveryFailed(failure_class(exc), detail=detail) from None
    if 200 <= status < 300:
        return
    raise DeliveryFailed(f"the receiver answered HTTP {status}", retry=status >= 500 or status in (408, 429))


def _send_apprise(kind: str, url: str, message: Message) -> None:
    try:
        plugin = _apprise_plugin(kind, url)  # checked again: DNS may have moved since saving
    except ChannelInvalid as exc:
        raise DeliveryFailed(_invalid_now(exc), retry=False) from None
    if isinstance(plugin, NotifyPagerDuty):
        # Raise, or resolve, the incident of our key; never Apprise's own "map" guess.
        plugin.action = PagerDutyAction.RESOLVE if message.resolves else PagerDutyAction.TRIGGER
        if message.incident:
            plugin.dedup = message.incident
    notifier = apprise.Apprise()
    notifier.add(plugin)
    entries: list = []
    with guarded_connections(_hosts(kind, plugin)) as guarded:
        result = notifier.notify(
            body=message.body,
            title=message.title,
            notify_type=_LEVELS[message.level],
            log_callback=lambda entry, _service: entries.append(entry),
            log_level=logging.WARNING,
        )
    if guarded.refused:
        raise DeliveryFailed(NOT_REACHABLE, retry=False, detail=guarded.refused[0])
    if not result:
        said = "; ".join([*guarded.errors, *(str(e.message) for e in entries)])  # WARNING and above
        detail = redact(said, _url_secrets(url))
        answered = guarded.outcomes[-1] if guarded.outcomes else ""
        service = plugin.service_name if kind == ChannelKind.APPRISE else ChannelKind(kind).label
        if answered.startswith("HTTP "):
            status = int(answered.removeprefix("HTTP "))
            raise DeliveryFailed(
                f"{service} answered {answered}",
                retry=status >= 500 or status in (408, 429),
                detail=detail,
            )
        # A network failure's class; with no request sent, Apprise refused the message itself.
        raise DeliveryFailed(answered or f"{service} did not take the message", detail=detail)


OPSGENIE_MESSAGE_CHARS = 130  # the Alert API's limits
OPSGENIE_DESCRIPTION_CHARS = 15000
OPSGENIE_NOTE_CHARS = 25000
OPSGENIE_RESPONDERS = 50


def _send_opsgenie(url: str, message: Message) -> None:
    """Create an alert (its alias the incident's key), or close the one of that alias; the
    channel's URL is read by Apprise's plugin (key, region, responders, tags, priority)."""
    try:
        plugin = _apprise_plugin(ChannelKind.OPSGENIE, url)
    except ChannelInvalid as exc:
        raise DeliveryFailed(_invalid_now(exc), retry=False) from None
    alerts = OPSGENIE_API_LOOKUP[plugin.region_name]
    headers = {"Authorization": f"GenieKey {plugin.apikey}"}
    params = None
    if message.resolves and message.incident:
        target = f"{alerts}/{quote(message.incident, safe='')}/close"
        params = {"identifierType": "alias"}
        body: dict = {"source": "Tokvera", "note": message.body[:OPSGENIE_NOTE_CHARS]}
    else:
        target = alerts
        title = message.title or message.body
        body = {
            "message": title if len(title) <= OPSGENIE_MESSAGE_CHARS
            else title[: OPSGENIE_MESSAGE_CHARS - 3] + "...",
            "description": message.body[:OPSGENIE_DESCRIPTION_CHARS],
            "source": "Tokvera",
            "priority": f"P{plugin.priority}",
            "details": {**plugin.details, "type": message.level},
        }
        if message.incident:
            body["alias"] = message.incident
        for name, value in (
            ("responders", plugin.targets[:OPSGENIE_RESPONDERS]),
            ("tags", getattr(plugin, "_NotifyOpsgenie__tags", [])),
            ("entity", plugin.entity),
            ("user", plugin.user),
        ):
            if value:
                body[name] = value
    try:
        hosts = _hosts(ChannelKind.OPSGENIE, plugin)
        response = post_json(hosts, target, body, headers, params, SEND_TIMEOUT_S)
    except OutboundRefused as exc:
        raise DeliveryFailed(NOT_REACHABLE, retry=False, detail=exc.detail) from None
    except requests.RequestException as exc:
        detail = f"{type(exc).__name__}: {redact(str(exc), _url_secrets(url))}"
        raise DeliveryFailed(failure_class(exc), detail=detail) from None
    if response.status_code in (200, 202):
        return
    raise DeliveryFailed(
        f"Opsgenie answered HTTP {response.status_code}",
        retry=response.status_code >= 500 or response.status_code in (408, 429),
    )


def _url_secrets(url: str) -> list[str]:
    """The parts of an Apprise URL that may be secret: user, password, host (a token for many
    services), every path segment and query value."""
    parts = urlsplit(url)
    pieces = [
        parts.username,
        parts.password,
        parts.hostname,
        # A token may sit where a port would (tgram://<id>:<secret>/…): every piece of the netloc.
        *re.split(r"[@:]", parts.netloc),
        *parts.path.split("/"),
        *re.split(r"[&=]", parts.query),
    ]
    return [p for p in pieces if p and len(p) >= 4]


def redact(text: str, secrets: list[str]) -> str:
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    return text[:500]
