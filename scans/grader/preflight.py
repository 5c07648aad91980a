"""Preflight: before any load, ask the server which models it serves and send one probe request.

``GET {base}/models`` and the probe run at the same time, so a server that hangs costs one
``--timeout`` at most. The probe is one request exactly like the load's (same body, same
client, same measurement); it is not part of any level when the scan goes on.

The stop rule (DECISIONS.md, "Preflight"): the scan stops before any load level when the probe
got no answer at all (a transport error -- refused, DNS, TLS -- or no response headers within
``--timeout``) or an HTTP 4xx (401/403, 404 model not found, 429...). A 5xx, a broken or empty
stream or a slow stream does not stop it: the server answered, and the load measures how often.

Every cause is one sentence, with the server's own message truncated to
``SERVER_MESSAGE_CHARS`` and the API key masked (``scans.grader.redaction``).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable

import httpx

from scans.grader.redaction import redact_text

# The preflight's outcome is part of what a scan measured: its types live with the others.
from .measurement import AgentRecord, ModelsListing, Preflight, RequestRecord
from .plan import ScanPlan
from .server_identity import entry_facts, read_at_most

__all__ = [
    "MODELS_BODY_LIMIT",
    "ModelsListing",
    "Preflight",
    "ReplicaError",
    "SendRequest",
    "failure_phrase",
    "plain_http_answer",
    "probe_replicas",
    "run_preflight",
    "server_message",
]

#: A /models answer larger than this is not read (recorded as such; never fatal).
MODELS_BODY_LIMIT = 1024 * 1024
#: How many model ids are kept in the report (the total is always recorded).
MODELS_IDS_KEPT = 20
#: How many ids a cause sentence names.
CAUSE_IDS_NAMED = 8
SERVER_MESSAGE_CHARS = 160

#: Sends one request exactly like the load's and fills its record (the runner's ``request``).
SendRequest = Callable[[RequestRecord], Awaitable[None]]


_MESSAGE_IN_JSON = re.compile(r'"(?:message|detail|error)"\s*:\s*"((?:[^"\\]|\\.)*)"')


def server_message(error: str | None) -> str | None:
    """The server's own words from a failure's detail ("HTTP 404: {json body}" or a message):
    the `message` of an OpenAI-style error body when there is one, else the text itself."""
    if not error:
        return None
    text = error
    if text.startswith("HTTP ") and ":" in text:
        text = text.split(":", 1)[1].strip()
    elif not text.startswith(("{", "error in stream", "error in the answer")):
        return None
    text = text.removeprefix("error in stream: ").removeprefix("error in the answer: ")
    message = None
    try:
        body = json.loads(text)
    except ValueError:
        found = _MESSAGE_IN_JSON.search(text)  # a body cut at 200 characters
        message = found.group(1) if found else text
    else:
        message = _message_of(body) or text
    message = " ".join(str(message).split())
    if len(message) > SERVER_MESSAGE_CHARS:
        message = message[:SERVER_MESSAGE_CHARS - 1] + "…"
    return message or None


def _message_of(body: object) -> str | None:
    if isinstance(body, dict):
        for key in ("message", "detail", "error"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return value
            if isinstance(value, dict | list):
                inner = _message_of(value)
                if inner:
                    return inner
    if isinstance(body, list) and body:
        return _message_of(body[0])
    return None


#: What OpenSSL says when the bytes that came back to a ClientHello were not TLS at all: a
#: plain-HTTP server answering on an https:// URL ("HTTP/1.1 400 ..." read as a TLS record).
_PLAIN_HTTP_SIGNS = ("wrong_version_number", "wrong version number", "record layer failure",
                     "http_request", "http request", "unknown protocol", "packet length too long")


def plain_http_answer(error: str | None) -> bool:
    """True when a transport error is the TLS client reading a plain-HTTP answer."""
    text = (error or "").lower()
    return any(sign in text for sign in _PLAIN_HTTP_SIGNS)


def failure_phrase(failure: str, error: str | None = None) -> str:
    """A failure class (and, for transport errors, its message) in a few plain words."""
    text = (error or "").lower()
    if failure == "transport_error":
        if "refused by the guard" in text or "connectionrefusedbyguard" in text:
            return "the address was refused by the outbound guard"
        if "refused" in text or "[errno 111]" in text or "[errno 61]" in text:
            return "connection refused"
        if ("name or service not known" in text or "nodename nor servname" in text
                or "name resolution" in text or "getaddrinfo" in text):
            return "DNS lookup failed"
        if plain_http_answer(text):
            return "TLS handshake failed (the server answered plain HTTP)"
        if "certificate" in text:
            return "TLS handshake failed (the certificate was not trusted)"
        if "ssl" in text or "tls" in text:
            return "TLS handshake failed"
        if "reset" in text:
            return "connection reset"
        return "no response (connection failed)"
    if failure == "timeout":
        return "timeout"
    if failure.startswith("http_status_"):
        code = failure.removeprefix("http_status_")
        words = {"400": "bad request", "401": "unauthorized", "403": "forbidden",
                 "404": "not found", "408": "request timeout", "413": "request too large",
                 "422": "unprocessable request", "429": "rate-limited",
                 "500": "internal server error", "502": "bad gateway",
                 "503": "service unavailable", "504": "gateway timeout"}.get(code)
        return f"HTTP {code}" + (f" ({words})" if words else "")
    return {
        "incomplete_stream": "the stream broke off before it finished",
        "stream_error": "an error sent inside the stream",
        "not_sse": "an answer that is not an event stream",
        "empty_reply": "a stream that finished without any content",
    }.get(failure, failure.replace("_", " "))


async def fetch_models(client: httpx.AsyncClient, base_url: str, model: str,
                       timeout: float) -> ModelsListing:
    """``GET {base}/models``: never raises; an answer that is not JSON, too large or lists
    thousands of ids is recorded compactly."""
    listing = ModelsListing(url=f"{base_url}/models")
    try:
        async with asyncio.timeout(timeout):
            async with client.stream("GET", listing.url,
                                     headers={"accept": "application/json"}) as response:
                listing.status_code = response.status_code
                body = await read_at_most(response, MODELS_BODY_LIMIT)
                if body is None:
                    listing.detail = (f"HTTP {response.status_code}, an answer over "
                                      f"{MODELS_BODY_LIMIT // 1024} KiB (not read)")
                    return listing
    except TimeoutError:
        listing.detail = f"timeout: no answer within {timeout:g} s"
        return listing
    except httpx.HTTPError as exc:
        listing.detail = f"{failure_phrase('transport_error', str(exc))}: {str(exc)[:120]}"
        return listing
    if not 200 <= listing.status_code < 300:
        listing.detail = f"HTTP {listing.status_code}"
        return listing
    try:
        data = json.loads(body)
    except ValueError:
        listing.detail = f"HTTP {listing.status_code}, not JSON"
        return listing
    entries = data.get("data") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        listing.detail = f"HTTP {listing.status_code}, JSON without a list of models"
        return listing
    ids = [str(e["id"]) for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)]
    listing.entry = next((entry_facts(e) for e in entries
                          if isinstance(e, dict) and e.get("id") == model), None)
    listing.answered = True
    listing.ids = [i[:200] for i in ids[:MODELS_IDS_KEPT]]
    listing.ids_total = len(ids)
    listing.model_listed = model in ids
    listing.detail = f"HTTP {listing.status_code}, {len(ids)} model id{'s' if len(ids) != 1 else ''}"
    return listing


def stops_the_scan(probe: RequestRecord) -> bool:
    """The stop rule: no answer at all, or an HTTP 4xx."""
    if probe.failure == "transport_error":
        return True
    if probe.failure == "timeout" and probe.headers_at is None:
        return True
    code = probe.status_code
    return probe.failure is not None and code is not None and 400 <= code < 500


def _looks_like_wrong_model(probe: RequestRecord, models: ModelsListing, model: str,
                            message: str | None) -> bool:
    if probe.status_code not in (400, 404, 422):
        return False
    text = (message or probe.error or "").lower()
    if "model" in text and ("not found" in text or "does not exist" in text
                            or "not exist" in text or "unknown" in text
                            or model.lower() in text or "model_not_found" in text):
        return True
    return probe.status_code == 404 and models.model_listed is False


def _offered(models: ModelsListing) -> str:
    if not models.answered:
        return f"the server did not list its models ({models.url}: {models.detail})"
    if not models.ids:
        return "the server lists no models"
    named = ", ".join(models.ids[:CAUSE_IDS_NAMED])
    more = models.ids_total - min(len(models.ids), CAUSE_IDS_NAMED)
    return f"the server offers: {named}" + (f" (and {more:,} more)" if more > 0 else "")


def _tls_cause(error: str, origin: str) -> str:
    """A TLS failure named as such, with what to do about it."""
    if plain_http_answer(error):
        plain = "http://" + origin.removeprefix("https://")
        return (f"TLS handshake failed: the server at {origin} answered plain HTTP — did you "
                f"mean {plain}?")
    if "certificate" in error.lower():
        return (f"TLS handshake failed: the certificate of {origin} was not trusted "
                f"({error[:160]})")
    return f"TLS handshake failed with {origin} ({error[:160]})"


def _cause(probe: RequestRecord, models: ModelsListing, model: str, where: str,
           timeout_s: float, authenticated: bool, origin: str = "") -> tuple[str, str]:
    """(one sentence, kind) for a probe that failed."""
    failure = probe.failure or ""
    message = server_message(probe.error)
    said = f': "{message}"' if message else ""
    if failure == "transport_error":
        phrase = failure_phrase(failure, probe.error)
        if phrase.startswith("TLS handshake failed"):
            return _tls_cause(probe.error or "", origin or f"https://{where}"), "tls"
        kind = {"connection refused": "connection_refused",
                "DNS lookup failed": "dns"}.get(phrase, "transport_error")
        hint = " (nothing is listening there)" if kind == "connection_refused" else ""
        detail = "" if kind == "connection_refused" else f" ({(probe.error or '')[:160]})"
        return f"could not connect to {where}: {phrase}{hint}{detail}", kind
    if failure == "timeout":
        if probe.body_written_at is None:
            return f"timeout: could not connect to {where} within {timeout_s:g} s", "timeout"
        if probe.headers_at is None:
            return (f"timeout: {where} accepted the connection but sent no answer within "
                    f"{timeout_s:g} s"), "timeout"
        return (f"timeout: the probe's stream from {where} did not finish within "
                f"{timeout_s:g} s"), "timeout"
    code = probe.status_code
    if code in (401, 403):
        key = "the API key sent was refused" if authenticated else "no API key was sent"
        return f"the server refused the request (HTTP {code}{said}): {key}", "auth"
    if _looks_like_wrong_model(probe, models, model, message):
        return f"model '{model}' not found (HTTP {code}{said}); {_offered(models)}", \
            "model_not_found"
    if code == 404:
        return (f"HTTP 404 from {where}{said}: check the base URL (it usually ends in /v1)",
                "not_found")
    if code is not None and 400 <= code < 500:
        return f"the server refused the probe request (HTTP {code}{said})", "client_error"
    return f"the probe request failed: {failure_phrase(failure, probe.error)}{said}", failure


async def run_preflight(plan: ScanPlan, client: httpx.AsyncClient,
                        send_request: SendRequest) -> Preflight:
    """/models (on `client`) and the probe (`send_request`), concurrently; then the stop rule
    and the cause."""
    probe = RequestRecord(level=1, index=0)
    models, _ = await asyncio.gather(
        fetch_models(client, plan.base_url, plan.model, min(plan.timeout_s, 10.0)),
        send_request(probe),
    )
    if probe.failure is None:
        return Preflight(models, probe, stopped=False, cause=None, kind=None)
    where = plan.origin.split("://", 1)[-1]
    cause, kind = _cause(probe, models, plan.model, where, plan.timeout_s,
                         authenticated=bool(plan.api_key), origin=plan.origin)
    secrets = [plan.api_key] if plan.api_key else []
    cause = redact_text(cause, secrets)
    probe.error = redact_text(probe.error or "", secrets) or None
    models.detail = redact_text(models.detail, secrets)
    return Preflight(models, probe, stopped=stops_the_scan(probe), cause=cause, kind=kind)


class ReplicaError(Exception):
    """A replica URL failed its preflight probe; the message is one line naming it."""


async def probe_replicas(plan: ScanPlan,
                         send_to: Callable[[RequestRecord, int], Awaitable[None]]
                         ) -> list[AgentRecord]:
    """One probe per replica URL, concurrently, like the base URL's: each replica must answer
    before any load is spread over it. Raises ReplicaError naming the first that failed."""
    probes = [AgentRecord(level=1, index=0, url_index=i) for i in range(1, len(plan.urls))]
    await asyncio.gather(*(send_to(probe, probe.url_index) for probe in probes))
    secrets = [plan.api_key] if plan.api_key else []
    for probe in probes:
        if probe.failure is not None:
            phrase = failure_phrase(probe.failure, probe.error)
            raise ReplicaError(redact_text(f"replica {plan.urls[probe.url_index]} failed the "
                                           f"preflight probe: {phrase}", secrets))
    return probes
