"""The network's documented numbers, in one place (docs/routing.md explains each one).

Each value can be overridden by a Django setting of the same name (for example in a test or
a deployment's settings); the code always reads them through `value()`.
"""

from __future__ import annotations

from django.conf import settings

DEFAULTS = {
    # A host is online while its last heartbeat is at most this old (and it is not suspended).
    "NETWORK_ONLINE_WINDOW_S": 45,
    # Heartbeats are stamped by the server; one stamped more than this ahead of now (a broken
    # clock) does not count as online.
    "NETWORK_HEARTBEAT_FUTURE_SLACK_S": 5,
    # What the agent is told to use between heartbeats.
    "NETWORK_HEARTBEAT_INTERVAL_S": 15,
    # A job assigned to a host that has not called `start` within this time goes back to the queue.
    "NETWORK_LEASE_TIMEOUT_S": 30,
    # A running job that has not called `complete` within this time goes back to the queue.
    "NETWORK_RUN_TIMEOUT_S": 300,
    # How many hosts may hold a job (assignments) before it fails with reason `attempts_exhausted`.
    "NETWORK_MAX_ATTEMPTS": 3,
    # A job that has waited this long in the queue without an eligible host fails with `no_host`.
    "NETWORK_QUEUE_DEADLINE_S": 120,
    # Per-host fixed-window limits on calls (count per window).
    "NETWORK_HEARTBEAT_LIMIT": 20,
    "NETWORK_HEARTBEAT_WINDOW_S": 60,
    "NETWORK_LEASE_LIMIT": 600,
    "NETWORK_LEASE_WINDOW_S": 60,
    # The longest a lease (or a completion with lease_next) may wait for a job to be assigned
    # to the calling host before it answers without one (the agent asks for 25 s).
    "NETWORK_LEASE_WAIT_MAX_S": 30,
    # The most calls one web process holds waiting at once; beyond it a lease answers at once
    # (the agent then polls). Under gthread each waiting call holds a thread: keep this well
    # below the threads per process (docs/operations.md), or waiting hosts starve every call;
    # on the host-call server a waiting call holds no thread (host_call_server.py).
    "NETWORK_WAITING_LEASES_PER_PROCESS": 8,
    # The most jobs one host may run at once, whatever it advertises.
    "NETWORK_MAX_SLOTS": 64,
    # The most queued jobs one assignment pass considers (the rest wait for the next pass).
    "NETWORK_PASS_BATCH": 500,
    # Per-team limits on POST /v1/jobs: submissions per fixed window, and jobs not yet settled
    # (queued, leased or running). Over either the call gets 429 and no job is created.
    "NETWORK_SUBMIT_LIMIT": 120,
    "NETWORK_SUBMIT_WINDOW_S": 60,
    "NETWORK_MAX_UNSETTLED_PER_TEAM": 100,
    # The most jobs one POST /v1/jobs/batch may submit; each counts one against the rate.
    "NETWORK_SUBMIT_BATCH_MAX": 100,
    # Retry-After of a submission refused by the unsettled cap (jobs usually settle in seconds).
    "NETWORK_UNSETTLED_RETRY_AFTER_S": 10,
    # A submission for a model that no online host advertises is refused (503) rather than
    # queued to fail `no_host`. Off only for a network whose hosts start on demand: its jobs
    # then wait for a host, and those that find none count as failures in /v1/slo.
    "NETWORK_REQUIRE_ONLINE_HOST": True,
    # Retry-After of a submission refused because no online host serves its model: about one
    # heartbeat interval, the soonest a host can come online.
    "NETWORK_NO_HOST_RETRY_AFTER_S": 15,
}


def value(name: str):
    return getattr(settings, name, DEFAULTS[name])
