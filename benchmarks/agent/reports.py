"""Completions, group-committed: while no completion call of this agent is in flight a finished
job is reported at once, alone (`/v1/jobs/{id}/complete`); the reports of slots that finish
while one is in flight wait for it and then go together in one `/v1/jobs/complete` call, whose
next jobs go back to the slots that reported, one each. So a lone report is never held back,
and a busy host with several slots spends fewer calls than jobs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.agent.coordinator import AgentStopped, Coordinator


@dataclass(frozen=True)
class Answer:
    """What the coordinator answered for one completion: /complete's status (None: no answer
    before the agent gave up or stopped), its detail when refused, and the next job (started)
    the completion brought."""

    status: int | None
    detail: str = ""
    following: dict | None = None


@dataclass
class PendingReport:
    """One slot's completion, waiting for the call that carries it."""

    job_id: str
    body: dict  # the figures and result, as /complete takes them
    lease_next: bool
    answered: asyncio.Future[Answer]

    def settle(self, answer: Answer) -> None:
        if not self.answered.done():  # a slot cancelled while it waited has gone
            self.answered.set_result(answer)


class CompletionReports:
    """The reports waiting for the next completion call, and the task that sends them (None
    while no completion call is in flight)."""

    def __init__(self, coordinator: Coordinator, log: Callable[[str], object]) -> None:
        self.coordinator = coordinator
        self.log = log
        self._pending: list[PendingReport] = []
        self._reporter: asyncio.Task | None = None
        self._batch_call = True  # False after the coordinator answered it has no batch call

    async def complete(self, job_id: str, body: dict, lease_next: bool) -> Answer:
        """Report a completion and return what the coordinator answered for it. Sent at once
        when no completion call is in flight; otherwise it waits for that call and goes with
        every report that finished meanwhile, in the one call that follows."""
        report = PendingReport(job_id, body, lease_next, asyncio.get_running_loop().create_future())
        self._pending.append(report)
        if self._reporter is None:
            self._reporter = asyncio.create_task(self._send_reports())
            # Its slots learn a refused token from their answers; the task's own is dropped.
            self._reporter.add_done_callback(lambda task: task.cancelled() or task.exception())
        return await report.answered

    async def _send_reports(self) -> None:
        """One completion call after another, each with every report waiting when it starts,
        until none waits."""
        reports: list[PendingReport] = []
        try:
            while self._pending:
                reports, self._pending = self._pending, []
                if len(reports) == 1 or not self._batch_call:
                    await self._complete_each(reports)
                else:
                    await self._complete_together(reports)
        except BaseException as exc:  # a refused token, the agent stopping, an unreadable answer
            for report in [*reports, *self._pending]:
                if isinstance(exc, AgentStopped):
                    if not report.answered.done():
                        report.answered.set_exception(AgentStopped(str(exc)))
                else:
                    report.settle(Answer(None, f"not reported: {type(exc).__name__}"))
            self._pending = []
            raise
        finally:
            self._reporter = None

    async def _complete_each(self, reports: list[PendingReport]) -> None:
        """Each report by its own `/v1/jobs/{id}/complete`, as a lone report goes."""
        await asyncio.gather(*(self._complete_alone(report) for report in reports))

    async def _complete_alone(self, report: PendingReport) -> None:
        # lease_next not waited for here: the lease loop holds this host's one waiting call.
        response = await self.coordinator.report(f"/v1/jobs/{report.job_id}/complete",
                                                 {**report.body, "lease_next": report.lease_next})
        if response is None:
            report.settle(Answer(None))
        elif response.status_code == 200:
            report.settle(Answer(200, following=response.json().get("next")))
        else:
            report.settle(Answer(response.status_code, response.text[:120]))

    async def _complete_together(self, reports: list[PendingReport]) -> None:
        """Several reports in one `/v1/jobs/complete`; each gets its item of the answer, and the
        next jobs go to the reports completed, one each (those that asked for one first)."""
        response = await self.coordinator.report("/v1/jobs/complete", {
            "jobs": [{"id": report.job_id, **report.body} for report in reports],
            "lease_next": any(report.lease_next for report in reports),
        })
        if response is None:
            for report in reports:
                report.settle(Answer(None))
            return
        if response.status_code != 200:
            # A coordinator without the batch call (404, 405), or one that refused the call as
            # a whole (400: a report it could not read): each report alone, answered as today.
            if response.status_code in (404, 405):
                self._batch_call = False
                self.log("the coordinator has no batch completion call; reporting each job alone")
            await self._complete_each(reports)
            return
        answer = response.json()
        items = {str(item.get("id")): item for item in answer.get("jobs") or ()}
        following = list(answer.get("next") or ())
        completed = []
        for report in reports:
            item = items.get(report.job_id)
            if item is None:
                report.settle(Answer(None, "not in the coordinator's answer"))
            elif "error" in item:
                error = item["error"] or {}
                report.settle(Answer(int(error.get("status") or 0) or None,
                                     str(error.get("detail", ""))[:120]))
            else:
                completed.append(report)
        completed.sort(key=lambda report: not report.lease_next)  # stable: the askers first
        for report in completed:
            report.settle(Answer(200, following=following.pop(0) if following else None))

    async def finish(self) -> None:
        """Stopping: let the completion calls under way end briefly, then give them up."""
        reporter = self._reporter
        if reporter is None:
            return
        await asyncio.wait({reporter}, timeout=10)
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError, AgentStopped):
            await reporter
