"""Alerts to channels: one AlertEvent per piece of news, one Delivery row per channel.

`record` writes the event and its deliveries in one transaction and, once committed, asks a
worker to try each at once. A delivery that fails stays a row: `attempts`, `last_error`, and
`next_attempt_at` from RETRY_DELAYS_S; the beat's `deliver_due_notifications` (every minute)
sends the rows that are due again, so a retry survives any worker's restart. Each try claims
its row with a conditional UPDATE (the row count says who won), moving `next_attempt_at` a
CLAIM_S ahead: two workers never send one row at once, and a worker that dies mid-send leaves a
row that is due again after CLAIM_S. A row is sent at least once, in rare cases twice.

A test message ("Send test", `start_test`) is limited per team and per account, handed to a
worker (no web thread waits on a receiver), and tried once: a failure or an interrupted try
fails the row, never a retry (a test is for the person waiting on it, not for later).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from functools import partial

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from accounts import encryption
from common import ratelimit
from scans.models import (
    AlertEvent,
    Delivery,
    DeliveryStatus,
    Endpoint,
    NotificationChannel,
    Scan,
)
from scans.notify import incidents
from scans.notify.channels import kinds, messages

log = logging.getLogger(__name__)

# After the n-th failed try, the next one waits RETRY_DELAYS_S[n - 1]; then it has failed.
RETRY_DELAYS_S = (60, 5 * 60, 15 * 60, 60 * 60, 3 * 60 * 60)
MAX_ATTEMPTS = len(RETRY_DELAYS_S) + 1
CLAIM_S = 120  # longer than any one send (mail, or a 10 s HTTP timeout per connection)
DUE_BATCH = 500

# "Send test": each test holds a worker for up to a send's timeout and reaches a third party.
TESTS_PER_WINDOW = 5  # per team
ACCOUNT_TESTS_PER_WINDOW = 10  # per account, across its teams (teams are cheap to make)
TEST_WINDOW_S = 60
BROKER_RETRY_AFTER_S = 30  # what a test answers while the task queue is unreachable
TEST_INTERRUPTED = "the test was interrupted; a test message is not tried again"

# Code that serves every team (the beat's retry pass, ids off our own queue).
ALL_DELIVERIES = Delivery.dangerously_unscoped


def channels_for(endpoint: Endpoint) -> list[NotificationChannel]:
    """The enabled channels an endpoint's alerts go to."""
    scope = NotificationChannel.objects.for_team(endpoint.team_id).filter(enabled=True)
    if not endpoint.all_channels:
        scope = scope.filter(endpoints=endpoint)
    return list(scope.order_by("pk"))


def lasted_s(endpoint: Endpoint, scan: Scan | None, kind: str) -> float | None:
    """How long the episode a recovery ends lasted: from the scan that opened it (the first
    opening event since the last such recovery) to this scan (a probe's news: to now); None
    when no opening is known."""
    if kind not in messages.OPENED_BY:
        return None
    events = AlertEvent.objects.for_team(endpoint.team_id).filter(endpoint=endpoint)
    recoveries = events.filter(kind=kind)
    if scan is not None:
        recoveries = recoveries.exclude(scan=scan)
    last_recovery = (
        recoveries
        .order_by("-created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    openings = events.filter(kind__in=messages.OPENED_BY[kind][0])
    if last_recovery is not None:
        openings = openings.filter(created_at__gt=last_recovery)
    opening = openings.select_related("scan").order_by("created_at").first()
    if opening is None:
        return None
    started = (opening.scan.finished_at if opening.scan else None) or opening.created_at
    ended = (scan.finished_at if scan is not None else None) or timezone.now()
    return max(0.0, (ended - started).total_seconds())


def record(endpoint: Endpoint, scan: Scan, kind: str, payload: dict) -> AlertEvent | None:
    """Record one alert and a delivery per channel; None if this scan already recorded it."""
    seconds = lasted_s(endpoint, scan, kind)
    payload = {**payload, "lasted_s": seconds, "lasted": messages.lasted_text(kind, seconds)}
    with transaction.atomic():
        event, created = AlertEvent.objects.for_team(endpoint.team_id).get_or_create(
            scan=scan,
            kind=kind,
            defaults={"team_id": endpoint.team_id, "endpoint": endpoint, "message": payload},
        )
        if not created:
            return None
        _queue(event, channels_for(endpoint))
        incidents.on_alert(event, at=scan.finished_at)
    return event


def record_probe_alert(endpoint: Endpoint, kind: str, payload: dict,
                       at: datetime | None = None) -> AlertEvent:
    """Record one piece of news the probes found (no scan) and a delivery per channel. Its
    caller won a conditional UPDATE of the endpoint's liveness, so it is recorded once."""
    seconds = lasted_s(endpoint, None, kind)
    payload = {**payload, "lasted_s": seconds, "lasted": messages.lasted_text(kind, seconds)}
    with transaction.atomic():
        event = AlertEvent.objects.for_team(endpoint.team_id).create(
            team_id=endpoint.team_id, endpoint=endpoint, kind=kind, message=payload)
        _queue(event, channels_for(endpoint))
        incidents.on_alert(event, at=at)
    return event


class TooManyTests(Exception):
    def __init__(self, whose: str, limit: int, retry_after_s: int):
        super().__init__(
            f"Too many test messages from {whose} (at most {limit} a minute); try again in {retry_after_s} s."
        )
        self.retry_after_s = retry_after_s


class QueueUnreachable(Exception):
    """The task queue could not take the test: nothing was saved and nothing was sent."""

    retry_after_s = BROKER_RETRY_AFTER_S


def start_test(channel: NotificationChannel, account: str) -> Delivery:
    """"Send test" from the page or the API: counted per team and per `account` (raises
    TooManyTests past either limit), recorded, and handed to a worker, which tries it once.
    Call it outside a transaction (the row must be committed before a worker can see it).
    Raises QueueUnreachable, with nothing saved, when the broker is unreachable."""
    limits = (
        ("channel-test", str(channel.team_id), TESTS_PER_WINDOW, "this team"),
        ("channel-test-account", account, ACCOUNT_TESTS_PER_WINDOW, "your account"),
    )
    for scope, key, limit, whose in limits:
        allowed, retry_after = ratelimit.allow(scope, key, limit, TEST_WINDOW_S)
        if not allowed:
            raise TooManyTests(whose, limit, retry_after)
    row = send_test(channel, queue=False)
    try:
        deliver_notification.delay(row.pk)
    except BrokerUnreachable as exc:
        log.warning("test message to channel %s not queued: the broker is unreachable (%s)", channel.pk, exc)
        with transaction.atomic():
            AlertEvent.objects.for_team(channel.team_id).filter(pk=row.event_id).delete()
        raise QueueUnreachable(
            "The task queue is unreachable, so the test message was not sent (nothing was saved); "
            f"try again in {BROKER_RETRY_AFTER_S} s."
        ) from None
    return row


def send_test(channel: NotificationChannel, queue: bool = True) -> Delivery:
    """A test message to one channel, recorded as a delivery (tried once: never retried); with
    queue=False no worker is asked to try it (the caller does: start_test)."""
    # Shaped like a real alert (endpoint, state, cause, link), so the receiver sees what alerts
    # will carry; "test": true and the words say nothing is wrong.
    endpoint = Endpoint.objects.for_team(channel.team_id).order_by("name").first()
    if endpoint is not None:
        about = {"id": str(endpoint.public_id), "name": endpoint.name}
        link = settings.SITE_URL + reverse("endpoint-detail", args=[endpoint.public_id])
    else:
        about = {"id": None, "name": "example endpoint"}
        link = settings.SITE_URL + reverse("team-dashboard", args=[channel.team.slug])
    payload = {
        "event": "test",
        "test": True,
        "channel": channel.name,
        "detail": f"A test message from Tokvera to the channel {channel.name} of "
        f"{channel.team.name}: nothing is wrong. Alerts will arrive like this.",
        "state": "down",
        "cause": "an example cause (this is a test)",
        "endpoint": about,
        "team": channel.team.name,
        "url": link,
    }
    with transaction.atomic():
        event = AlertEvent.objects.for_team(channel.team_id).create(
            team_id=channel.team_id, kind="test", message=payload
        )
        (delivery,) = _queue(event, [channel], queue=queue)
    return delivery


def _queue(event: AlertEvent, channels: list[NotificationChannel], queue: bool = True) -> list[Delivery]:
    now = timezone.now()
    rows = Delivery.objects.for_team(event.team_id).bulk_create(
        Delivery(event=event, channel=channel, next_attempt_at=now) for channel in channels
    )
    for row in rows if queue else ():
        transaction.on_commit(partial(deliver_notification.delay, row.pk))
    return rows


def attempt(delivery_id: int) -> str:
    """Try one due delivery: "sent", "retry", "failed", or "not due" (another worker has it,
    or it is settled). Safe to run twice."""
    now = timezone.now()
    claimed = ALL_DELIVERIES.filter(
        pk=delivery_id, status=DeliveryStatus.PENDING, next_attempt_at__lte=now
    ).update(next_attempt_at=now + timedelta(seconds=CLAIM_S), attempts=F("attempts") + 1)
    if not claimed:
        return "not due"
    delivery = ALL_DELIVERIES.select_related("channel", "channel__team", "event").get(pk=delivery_id)
    rows = Delivery.objects.for_team(delivery.channel.team_id).filter(pk=delivery_id)
    channel = delivery.channel
    is_test = delivery.event.kind == "test"
    if is_test and delivery.attempts > 1:  # its one try was claimed and never finished
        rows.update(status=DeliveryStatus.FAILED, last_error=TEST_INTERRUPTED, next_attempt_at=None)
        return "failed"
    try:
        if not channel.enabled:
            raise kinds.DeliveryFailed("the channel is turned off", retry=False)
        config = json.loads(encryption.decrypt(channel.config_encrypted) or "{}")
        kinds.send(channel.kind, channel.team_id, config, messages.render(delivery.event.message))
    except (kinds.DeliveryFailed, encryption.UnreadableSecret) as exc:
        retry = getattr(exc, "retry", False) and delivery.attempts < MAX_ATTEMPTS and not is_test
        error = str(exc)[:500]
        if retry:
            rows.update(
                last_error=error,
                next_attempt_at=timezone.now() + timedelta(seconds=RETRY_DELAYS_S[delivery.attempts - 1]),
            )
        else:
            rows.update(status=DeliveryStatus.FAILED, last_error=error, next_attempt_at=None)
        log.warning(
            "delivery %s to channel %s (%s) failed, attempt %s: %s",
            delivery_id,
            channel.pk,
            channel.kind,
            delivery.attempts,
            getattr(exc, "detail", error)[:2000],
        )
        return "retry" if retry else "failed"
    rows.update(status=DeliveryStatus.SENT, sent_at=timezone.now(), next_attempt_at=None, last_error="")
    return "sent"


def due_ids(now=None) -> list[int]:
    now = now or timezone.now()
    return list(
        ALL_DELIVERIES.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:DUE_BATCH]
    )


# --- tasks (re-exported by scans.tasks, under these names) ----------------------------------


@shared_task(name="scans.tasks.deliver_notification", acks_late=True)  # the claim makes it safe
def deliver_notification(delivery_id: int) -> str:
    return attempt(delivery_id)


@shared_task(name="scans.tasks.deliver_due_notifications")
def deliver_due_notifications() -> int:
    """Every minute: a try for each delivery that is due (a retry, or a first try whose
    message was lost)."""
    ids = due_ids()
    for delivery_id in ids:
        deliver_notification.delay(delivery_id)
    return len(ids)
