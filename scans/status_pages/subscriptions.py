"""Email subscriptions to a public status page: double opt-in, one-click unsubscribe, limits.

A visitor gives an address on the page; a confirmation mail goes out with a signed link that
expires after CONFIRM_MAX_AGE_S and works once (it carries a random secret whose SHA-256 is
stored and cleared when used). Only a confirmed subscriber gets news: an incident starting
and ending on an endpoint the page shows, each update of the team's incidents marked public
(public_updates.py), and a maintenance window announced for one (or for the whole team), each
under the name the page shows. Every mail carries an unsubscribe link
(signed with the site's key, no expiry) and List-Unsubscribe headers (RFC 8058).

Every mail goes out from the Celery task scans.tasks.mail_status_page_news, never from a
request or from the alert path itself: a failing mail server costs a logged warning, never an
alert. The subscribe form answers the same whatever happened (subscribed, already there,
refused by a limit, caught by the honeypot), so nobody learns who is subscribed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from functools import partial
from urllib.parse import quote

from celery import shared_task
from django.conf import settings
from django.core import signing
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.dispatch import receiver
from django.template.loader import render_to_string
from django.utils import timezone

from accounts.validators import one_line
from common import ratelimit
from scans import maintenance
from scans.history.slo_wording import duration_text
from scans.models import (
    Endpoint,
    IncidentUpdate,
    MaintenanceWindow,
    StatusPage,
    StatusPageEndpoint,
    StatusPageSubscriber,
)
from scans.models.incidents import public_update_posted
from scans.models.status_pages import incident_news as incident_news_signal
from scans.status_pages import public_updates

log = logging.getLogger(__name__)

__all__ = ["confirm", "count_confirmed", "incident_news", "incident_update_news", "mail_status_page_news",
           "maintenance_news",
           "send_news", "subscribe", "unsubscribe"]

CONFIRM_MAX_AGE_S = 3 * 86400  # a confirmation link older than this no longer works
# Cheap limits on a public form: per client address and per page, in a fixed window.
PER_ADDRESS_LIMIT = 5
PER_PAGE_LIMIT = 50
LIMIT_WINDOW_S = 3600
# Unconfirmed addresses a page holds at once; beyond it new ones are dropped until some expire.
MAX_PENDING_PER_PAGE = 200
HONEYPOT_FIELD = "website"  # hidden from people; a bot that fills every field fills it too

CONFIRM_SALT = "scans.status-page-subscription.confirm"
UNSUBSCRIBE_SALT = "scans.status-page-subscription.unsubscribe"
INCIDENT_KINDS = ("down", "down_recovered")


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _page_url(page: StatusPage) -> str:
    return f"{settings.SITE_URL}/status/{page.slug}/"


def unsubscribe_url(subscriber: StatusPageSubscriber, page: StatusPage) -> str:
    token = signing.Signer(salt=UNSUBSCRIBE_SALT).sign(str(subscriber.public_id))
    return f"{_page_url(page)}unsubscribe/{quote(token)}/"


# --- the public form --------------------------------------------------------------------------


def subscribe(page: StatusPage, email: str, client: str, honeypot: str = "") -> str | None:
    """Take one request of the form. Returns an error to show (a malformed address only), or
    None: the caller then gives the one public answer, whatever was done. A confirmation mail
    is queued for a new or still pending address within the limits."""
    email = email.strip()
    try:
        if len(email) > 254 or one_line(email) != email:
            raise ValidationError("too long or not one line")
        validate_email(email)
    except ValidationError:
        return "Enter a valid email address."
    if honeypot:
        return None
    by_address, _ = ratelimit.allow("status-subscribe-address", client or "unknown",
                                    PER_ADDRESS_LIMIT, LIMIT_WINDOW_S)
    by_page, _ = ratelimit.allow("status-subscribe-page", str(page.pk), PER_PAGE_LIMIT, LIMIT_WINDOW_S)
    if not (by_address and by_page):
        return None
    now = timezone.now()
    mine = StatusPageSubscriber.objects.for_team(page.team_id).filter(status_page=page)
    # Unconfirmed addresses are kept no longer than their link works.
    mine.filter(confirmed_at__isnull=True,
                created_at__lt=now - timedelta(seconds=CONFIRM_MAX_AGE_S)).delete()
    existing = mine.filter(email__iexact=email).first()
    if existing is not None and existing.confirmed_at is not None:
        return None  # already subscribed: nothing to send, the same answer
    if existing is None:
        if mine.filter(confirmed_at__isnull=True).count() >= MAX_PENDING_PER_PAGE:
            return None
        try:
            with transaction.atomic():
                existing = StatusPageSubscriber.dangerously_unscoped.create(  # the page's team
                    status_page=page, email=email)
        except IntegrityError:
            return None  # the same address, in a request at the same time
    subscriber_id = existing.pk
    transaction.on_commit(lambda: _queue("confirm", subscriber_id))
    return None


def confirm(page: StatusPage, token: str) -> bool:
    """Follow a confirmation link: True once for a valid, unexpired, untampered link."""
    try:
        value = signing.TimestampSigner(salt=CONFIRM_SALT).unsign(token, max_age=CONFIRM_MAX_AGE_S)
    except signing.BadSignature:  # SignatureExpired is one too
        return False
    public_id, _, secret = value.partition(":")
    subscriber = (StatusPageSubscriber.objects.for_team(page.team_id)
                  .filter(status_page=page, public_id=public_id, confirmed_at__isnull=True)
                  .exclude(token_hash="").first())
    if subscriber is None or not hmac.compare_digest(subscriber.token_hash, _hash(secret)):
        return False
    # Conditional: of two clicks at once, one confirms.
    return bool(StatusPageSubscriber.objects.for_team(page.team_id).filter(
        pk=subscriber.pk, token_hash=subscriber.token_hash, confirmed_at__isnull=True,
    ).update(confirmed_at=timezone.now(), token_hash=""))


def unsubscribe(page: StatusPage, token: str) -> bool:
    """Follow an unsubscribe link: the address is deleted (nothing of it is kept)."""
    try:
        public_id = signing.Signer(salt=UNSUBSCRIBE_SALT).unsign(token)
    except signing.BadSignature:
        return False
    deleted, _ = StatusPageSubscriber.objects.for_team(page.team_id).filter(
        status_page=page, public_id=public_id).delete()
    return bool(deleted)


def count_confirmed(page: StatusPage) -> int:
    return StatusPageSubscriber.objects.for_team(page.team_id).filter(
        status_page=page, confirmed_at__isnull=False).count()


# --- news from the alert path and the maintenance write path ---------------------------------


def _queue(kind: str, object_id: int, at: datetime | None = None) -> None:
    try:
        mail_status_page_news.delay(kind, object_id, at.isoformat() if at else None)
    except Exception:  # noqa: BLE001 - a broker outage must not break the caller
        log.warning("status page news %s for %s not queued", kind, object_id, exc_info=True)


@receiver(incident_news_signal)
def incident_news(sender: object, *, endpoint: Endpoint, kinds: Iterable[str], at: datetime,
                  **_: object) -> None:
    """Where an alert of `kinds` was decided: an incident starting or ending is queued for the
    subscribers of the pages showing the endpoint, once committed. Never raises."""
    try:
        for kind in kinds:
            if kind in INCIDENT_KINDS:
                transaction.on_commit(partial(_queue, kind, endpoint.pk, at))
    except Exception:  # noqa: BLE001 - subscribers' news must never cost an alert
        log.warning("status page news for endpoint %s not queued", endpoint.pk, exc_info=True)


@receiver(public_update_posted)
def incident_update_news(sender: object, *, update: IncidentUpdate, **_: object) -> None:
    """A public incident update (sent once committed): queued for the pages it reaches."""
    _queue("incident_update", update.pk)


def maintenance_news(window: MaintenanceWindow) -> None:
    """Called once a window is created: announced to the pages showing what it covers."""
    try:
        window_id = window.pk
        transaction.on_commit(lambda: _queue("maintenance", window_id))
    except Exception:  # noqa: BLE001 - the window is saved either way
        log.warning("maintenance news for window %s not queued", window.pk, exc_info=True)


# --- the task's body --------------------------------------------------------------------------


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%-d %b %Y, %H:%M UTC")


def _send(page: StatusPage, subscriber: StatusPageSubscriber, subject: str, template: str,
          context: dict) -> bool:
    stop = unsubscribe_url(subscriber, page)
    body = render_to_string(template, {**context, "page_title": one_line(page.title),
                                       "page_url": _page_url(page), "unsubscribe_url": stop})
    message = EmailMessage(
        subject=one_line(subject)[:200], body=body, to=[subscriber.email],
        headers={"List-Unsubscribe": f"<{stop}>", "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"},
    )
    try:
        message.send()
    except Exception:  # noqa: BLE001 - one failing address must not stop the others
        log.warning("status page mail to subscriber %s not sent", subscriber.public_id, exc_info=True)
        return False
    return True


def _send_confirmation(subscriber_id: int) -> int:
    # Task step: the id came from our own form handler; the page names the team.
    subscriber = (StatusPageSubscriber.dangerously_unscoped.select_related("status_page")
                  .filter(pk=subscriber_id, confirmed_at__isnull=True).first())
    if subscriber is None or not subscriber.status_page.enabled:
        return 0
    page = subscriber.status_page
    secret = secrets.token_urlsafe(32)
    # A new secret for each mail: an older link of the same address stops working.
    StatusPageSubscriber.objects.for_team(page.team_id).filter(pk=subscriber.pk).update(
        token_hash=_hash(secret))
    token = signing.TimestampSigner(salt=CONFIRM_SALT).sign(f"{subscriber.public_id}:{secret}")
    sent = _send(page, subscriber, f"Confirm your subscription to {page.title}",
                 "scans/status_page_mail_confirm.html",
                 {"confirm_url": f"{_page_url(page)}confirm/{quote(token)}/",
                  "valid_for": duration_text(CONFIRM_MAX_AGE_S)})
    return int(sent)


def _incident_mails(kind: str, endpoint_id: int, at: datetime) -> int:
    # Task step: the id came from our own alert code; the endpoint names the team.
    endpoint = Endpoint.dangerously_unscoped.filter(pk=endpoint_id).first()
    if endpoint is None:
        return 0
    entries = (StatusPageEndpoint.objects.for_team(endpoint.team_id)
               .filter(endpoint=endpoint, status_page__enabled=True).select_related("status_page"))
    sent = 0
    for entry in entries:
        name = one_line(entry.display_name)
        if kind == "down":
            subject, what = f"{name} is down", f"{name} is down since {_when(at)}."
        else:
            subject, what = f"{name} is up again", f"{name} answers again since {_when(at)}."
        sent += _mail_confirmed(entry.status_page, subject, {"what": what})
    return sent


def _update_mails(update_id: int) -> int:
    # Task step: the id came from our own incident code; the update names the team.
    update = (IncidentUpdate.dangerously_unscoped.select_related("incident")
              .filter(pk=update_id, public=True).first())
    if update is None:
        return 0
    status = update.get_status_display() or update.incident.get_status_display()
    sent = 0
    for page, names in public_updates.pages_for(update):
        services = ", ".join(one_line(n) for n in names) or "all services"
        what = f"{status} ({_when(update.at)}), {services}: {update.text}"
        sent += _mail_confirmed(page, f"{status}: {services}", {"what": what})
    return sent


def _maintenance_mails(window_id: int, now: datetime) -> int:
    # Task step: the id came from our own write path; the window names the team.
    window = MaintenanceWindow.dangerously_unscoped.filter(pk=window_id).first()
    if window is None:
        return 0
    entries = StatusPageEndpoint.objects.for_team(window.team_id).filter(status_page__enabled=True)
    if window.endpoint_id is not None:
        entries = entries.filter(endpoint_id=window.endpoint_id)
    pages: dict[int, tuple[StatusPage, list[str]]] = {}
    for entry in entries.select_related("status_page"):
        pages.setdefault(entry.status_page_id, (entry.status_page, []))[1].append(
            one_line(entry.display_name))
    ahead = maintenance.occurrences(window, now, now + timedelta(days=366))
    when = (f"from {_when(ahead[0].start)} to {_when(ahead[0].end)}" if ahead
            else "(no time ahead)")
    if window.kind == "weekly":
        when = f"{maintenance.describe(window)}, next {when}"
    sent = 0
    for page, names in pages.values():
        # The window's own name is the team's wording, not chosen for the page: left out.
        what = f"Maintenance is planned for {', '.join(names)} {when}."
        sent += _mail_confirmed(page, f"Maintenance planned: {', '.join(names)}", {"what": what})
    return sent


def _mail_confirmed(page: StatusPage, subject: str, context: dict) -> int:
    subscribers = StatusPageSubscriber.objects.for_team(page.team_id).filter(
        status_page=page, confirmed_at__isnull=False)
    return sum(_send(page, s, f"{page.title}: {subject}", "scans/status_page_mail_news.html", context)
               for s in subscribers)


# Registered by scans.tasks (imported there, as the alert tasks are) under its name there.
@shared_task(name="scans.tasks.mail_status_page_news")  # not acks_late: a redelivery mails twice
def mail_status_page_news(kind: str, object_id: int, at: str | None = None) -> int:
    """The mails of one piece of status page news (a confirmation link, an incident starting or
    ending, a maintenance window announced); a failing address is logged and skipped."""
    return send_news(kind, object_id, at)


def send_news(kind: str, object_id: int, at: str | None = None) -> int:
    """The task's body: the mails of one piece of news; the number sent."""
    moment = datetime.fromisoformat(at) if at else timezone.now()
    if kind == "confirm":
        return _send_confirmation(object_id)
    if kind in INCIDENT_KINDS:
        return _incident_mails(kind, object_id, moment)
    if kind == "maintenance":
        return _maintenance_mails(object_id, timezone.now())
    if kind == "incident_update":
        return _update_mails(object_id)
    log.warning("unknown status page news %r", kind)
    return 0
