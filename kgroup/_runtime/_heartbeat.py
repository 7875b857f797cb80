"""The heartbeat task: one loop, one wait.

The task asks the core what to do (:meth:`MemberCore.heartbeat_action`) and waits on one
``asyncio.Event`` until the action's deadline. That deadline already covers the next
heartbeat, the session and poll timers, and the lease (the core ends every wait at the
lease deadline while an assignment is held), so there is no second timer task: franz-go's
heartbeat ``select`` is the model. A heartbeat in flight does not block the loop: its answer
is handed to the core as soon as it arrives, in the connection reader's own step
(``CoordinatorLink.send_watched``; no task per heartbeat), and then the loop is woken, so
the lease is checked on time even while a request hangs. A transport whose connections
cannot watch a request gets an owned task per heartbeat instead (``_round_trip``).

Woken (through the core's signals) when heartbeats are enabled, a coordinator is found, a
heartbeat is due after ``poll()``, an assignment is installed, and at close.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, assert_never

from .._core._member import (
    HeartbeatDisabled,
    HeartbeatFindCoordinator,
    HeartbeatWait,
    PollTimeoutLeave,
    SendHeartbeat,
)
from .._core._messages import HeartbeatResponse, LeaveGroupRequest, LeaveGroupResponse
from .._errors import CoordinatorError, ErrorCode, KGroupError, RemoteProtocolError
from ._link import CoordinatorLink
from ._shared import Lifecycle, Shared

__all__ = ["HeartbeatDriver", "log_late", "send_leave"]

#: Heartbeat answers that kept the session alive (spec §4.4).
_ALIVE_CODES = frozenset({ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS})


async def send_leave(
    shared: Shared, link: CoordinatorLink, leave: LeaveGroupRequest, timeout_ms: float | None
) -> None:
    """Best effort: sent once, never retried; errors are only logged (§4.5). ``timeout_ms``
    (default ``request_timeout_ms``): close() passes what is left of its budget, so a hung
    answer is reported as ``member.leave_group_failed`` before close()'s own deadline."""
    try:
        response: LeaveGroupResponse = await link.request(
            leave, shared.config.request_timeout_ms if timeout_ms is None else timeout_ms
        )
    except KGroupError as exc:
        shared.log("member.leave_group_failed", group=leave.group_id, error=str(exc))
        return
    shared.log(
        "member.left_group",
        group=leave.group_id,
        member_id=leave.member_id,
        error_code=response.effective_error,
    )


def log_late(shared: Shared, due: float, lateness: float) -> None:
    """Log ``heartbeat.late``: the heartbeat task woke ``lateness`` ms after ``due`` (the
    event loop was busy: a stall)."""
    core = shared.core
    generation = core.generation if core is not None else None
    shared.log(
        "heartbeat.late",
        group=shared.config.group_id,
        member_id=generation.member_id if generation is not None else "",
        generation=generation.generation_id if generation is not None else -1,
        lag_ms=round(lateness, 1),
        due=round(due, 1),
        threshold_ms=shared.config.loop_stall_warn_ms,
        isolated=shared.seam is not None and shared.seam.isolated,
    )


class HeartbeatDriver:
    """Runs the heartbeat loop on the coordinator loop (see the module docstring)."""

    def __init__(self, shared: Shared, link: CoordinatorLink) -> None:
        self._shared = shared
        self._link = link

    async def _wait(self, until: float | None) -> None:
        """Wait for the wake Event until ``until`` (ms, the member's clock) or forever. In
        isolated mode at most one heartbeat interval, so the task notices an application
        loop that closed without close()."""
        shared = self._shared
        timeout = None if until is None else max(0.0, (until - shared.now()) / 1000.0)
        if shared.seam is not None and shared.seam.isolated:
            cap = shared.config.heartbeat_interval_ms / 1000.0
            timeout = cap if timeout is None else min(timeout, cap)
        try:
            async with asyncio.timeout(timeout):  # no helper task, unlike wait_for on 3.11
                await shared.hb_wake.wait()
        except TimeoutError:
            pass

    async def run(self, abandoned: Any) -> None:
        """The loop. ``abandoned()`` is true when the member must stop by itself (isolated
        mode, the application's loop closed without close())."""
        shared = self._shared
        stats = shared.hb_stats
        while shared.lifecycle is Lifecycle.OPEN:
            if abandoned():
                return
            shared.hb_wake.clear()
            now = shared.now()
            with shared.step() as core:
                # First: did this run start late for a heartbeat that was due?
                due = stats.due
                lateness = stats.woke(now)
                action = core.heartbeat_action(now)
                if isinstance(action, HeartbeatWait):
                    stats.waiting(core.timers.heartbeat.deadline, now)
                else:
                    stats.idle()
                retry_at = core.find_coordinator_retry_at()
            if lateness is not None and due is not None and stats.is_late(lateness):
                self._log_late(due, lateness)
            match action:
                case HeartbeatDisabled(until=until) | HeartbeatWait(until=until):
                    await self._wait(until)
                case HeartbeatFindCoordinator(until=until):
                    if shared.now() >= retry_at:
                        self._link.ensure_lookup()  # honour the lookup's exponential backoff
                    await self._wait(until)
                case SendHeartbeat():
                    if shared.recorder is not None:
                        shared.recorder.heartbeat_sending(lateness)
                    self._send(action, now)
                case PollTimeoutLeave(leave=leave):
                    shared.log(
                        "member.poll_timeout_left",
                        group=shared.config.group_id,
                        sent_leave_group=leave is not None,
                    )
                    if leave is not None:
                        shared.tasks.spawn(
                            send_leave(shared, self._link, leave, None), "kgroup-leave-group"
                        )
                case _:
                    assert_never(action)

    def _send(self, action: SendHeartbeat, sent: float) -> None:
        shared = self._shared
        with shared.lock:
            shared.hb_stats.sending()
        # On the wire before the loop yields (when the connection is ready); the answer is
        # handed over in the connection reader's own step, without a task of its own.
        if self._link.send_watched(
            action.request, action.timeout_ms, functools.partial(self._settled, action, sent)
        ):
            return
        answer = self._link.send_now(action.request, action.timeout_ms)
        shared.tasks.spawn(self._round_trip(action, sent, answer), "kgroup-heartbeat-request")

    def _settled(
        self, action: SendHeartbeat, sent: float, outcome: HeartbeatResponse | KGroupError
    ) -> None:
        """A watched heartbeat's answer (a callback of the loop, not a task): to the core,
        then wake the loop. A failure here is a kgroup bug, kept as a failed task's is."""
        shared = self._shared
        if shared.lifecycle is not Lifecycle.OPEN:
            return  # closing: the connection was dropped under it
        try:
            self._answered(action, sent, outcome)
        except Exception as exc:
            shared.tasks.failed("kgroup-heartbeat-answer", exc)
        shared.hb_wake.set()

    async def _round_trip(
        self, action: SendHeartbeat, sent: float, answer: Callable[[], Awaitable[Any]] | None
    ) -> None:
        """The heartbeat's answer (or the failure the protocol knows) goes to the core at
        once, in this task, then the loop recomputes its wait: for connections that cannot
        watch a request (see :meth:`CoordinatorLink.send_watched`). The request was written
        already (``answer``), or is sent here. Anything else raised here is a kgroup bug and
        fails the task."""
        outcome: HeartbeatResponse | KGroupError
        try:
            if answer is not None:
                outcome = await answer()
            else:
                outcome = await self._link.request(action.request, action.timeout_ms)
        except KGroupError as exc:
            outcome = exc
        self._answered(action, sent, outcome)
        self._shared.hb_wake.set()

    def _answered(
        self, action: SendHeartbeat, sent: float, outcome: HeartbeatResponse | KGroupError
    ) -> None:
        shared = self._shared
        stats = shared.hb_stats
        now = shared.now()
        if shared.recorder is not None:
            shared.recorder.heartbeat_answered(sent, now)
        with shared.step() as core:
            if isinstance(outcome, CoordinatorError | RemoteProtocolError):
                stats.lost()
                core.on_heartbeat_failed(now, str(outcome))
            elif isinstance(outcome, KGroupError):
                stats.lost()
                core.timers.failed(now)
                core.record_fatal(outcome)
            else:
                stats.answered(sent, now, ok=outcome.error_code in _ALIVE_CODES)
                core.on_heartbeat_response(action.generation, outcome, now)

    def _log_late(self, due: float, lateness: float) -> None:
        log_late(self._shared, due, lateness)
