"""Steady heartbeats written together: the calls that arrive while one write runs go to the
database in the next, one statement for the whole batch (hosts.steady_heartbeats_statement), on
one connection of its own. The host-call server (host_call_server.py) answers each call from
its batch's row.

A dropped connection is opened again and the batch written once more (a heartbeat already
written by the lost attempt is written again: the statement accepts its own time stamp); a
database still unreachable, slower than WRITE_TIMEOUT_S (not tried again) or refusing the
statement fails the batch as DatabaseUnreachable; anything else as BatchFailed. Past
WAITING_MAX calls waiting, a call is refused at once (Busy).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import psycopg
from django.db import connection

from benchmarks.network import hosts

log = logging.getLogger("django.request")

# The most calls one statement writes; calls arriving meanwhile wait for the next one.
BATCH_MAX = 500
# Steady calls waiting for a batch, at most; past it (a database far slower than the
# arrivals) a call is answered BUSY at once.
WAITING_MAX = 10_000
# One batch's longest write, connecting included; past it the connection is dropped and the
# batch answered as an outage. The statement itself never waits for a row lock.
WRITE_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5

Connect = Callable[[], Awaitable[psycopg.AsyncConnection]]


class DatabaseUnreachable(Exception):
    """The batch could not be written (lost, timed out or refused): answered as an outage."""


class BatchFailed(Exception):
    """Anything else went wrong with the batch: each call takes the full path instead."""


class Busy(Exception):
    pass


def connect_as_django() -> Connect:
    """Connections to the database Django's default alias names, with its options."""
    params = {name: value for name, value in connection.get_connection_params().items()
              if name not in ("cursor_factory", "context", "pool")}
    params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    return lambda: psycopg.AsyncConnection.connect(**params, autocommit=True)


@dataclass
class SteadyWriter:
    """Writes steady heartbeats in batches on one connection: each call waits for the batch it
    joined."""

    connect: Connect
    batch_max: int = BATCH_MAX
    waiting_max: int = WAITING_MAX
    _waiting: list[tuple[hosts.SteadyCall, asyncio.Future]] = field(default_factory=list)
    _writing: list[tuple[hosts.SteadyCall, asyncio.Future]] = field(default_factory=list)
    _wake: asyncio.Event | None = None
    _task: asyncio.Task | None = None
    _connection: psycopg.AsyncConnection | None = None

    async def record(self, call: hosts.SteadyCall) -> hosts.Heartbeat | None:
        """The call's answer, or None when it is not steady or its host's row is locked
        (nothing written for it). Raises DatabaseUnreachable, BatchFailed or Busy."""
        if len(self._waiting) >= self.waiting_max:
            raise Busy
        if self._task is None or self._task.done() or self._wake is None:  # first call, or it died
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(self._wake))
        answered: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting.append((call, answered))
        self._wake.set()
        return await answered

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    async def _run(self, wake: asyncio.Event) -> None:
        try:
            while True:
                await wake.wait()
                wake.clear()
                while self._waiting:
                    self._writing = self._waiting[: self.batch_max]
                    del self._waiting[: self.batch_max]
                    await self._answer(self._writing)
                    self._writing = []
        finally:  # stopped (shut down) or broken: no call is left waiting for an answer
            for _, answered in self._writing + self._waiting:
                if not answered.done():
                    answered.set_exception(DatabaseUnreachable("the heartbeat writer stopped"))
            self._writing, self._waiting = [], []

    async def _answer(self, batch: list[tuple[hosts.SteadyCall, asyncio.Future]]) -> None:
        try:
            rows = await self._write([call for call, _ in batch])
        except DatabaseUnreachable as exc:
            failure: Exception = exc
        except Exception:
            log.exception("heartbeat batch failed; its calls take the full path")
            failure = BatchFailed()
        else:
            found = {i: (suspended, trust) for i, suspended, trust in rows}
            for i, (call, answered) in enumerate(batch):
                if not answered.done():  # not cancelled (the caller went away)
                    answered.set_result(hosts.steady_answer(call, *found[i]) if i in found else None)
            return
        for _, answered in batch:
            if not answered.done():
                answered.set_exception(failure)

    async def _write(self, calls: list[hosts.SteadyCall]) -> list[tuple[int, bool, str]]:
        sql, params = hosts.steady_heartbeats_statement(calls)
        for attempt in (1, 2):
            try:
                async with asyncio.timeout(WRITE_TIMEOUT_S):
                    if self._connection is None or self._connection.closed:
                        self._connection = await self.connect()
                    async with self._connection.cursor() as cursor:
                        await cursor.execute(sql, params)
                        return await cursor.fetchall()
            except (psycopg.OperationalError, psycopg.InterfaceError, TimeoutError) as exc:
                current = self._connection
                slow = isinstance(exc, TimeoutError)  # dropped, and not run again on a slow database
                lost = current is None or current.closed or current.broken or slow
                if current is not None and lost:
                    await current.close()
                    self._connection = None
                if not lost or slow or attempt == 2:  # e.g. a statement timeout: not run twice
                    raise DatabaseUnreachable from exc
        raise AssertionError("unreachable")
