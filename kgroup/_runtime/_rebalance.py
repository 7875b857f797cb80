"""The poll path: rebalances run in the task that calls ``poll()`` (KIP-62).

:class:`RebalanceDriver` asks the core for the next join action and carries it out: run the
listener's callbacks (in the caller's task, one at a time), start or wait for the
JoinGroup→SyncGroup chain, install an assignment, back off, or raise a fatal error.

The join chain is a task owned by the member, not by ``poll()``: a cancelled or timed-out
``poll()`` never cancels an in-flight JoinGroup (spec §6.1); the next ``poll()`` waits for
the same chain. In isolated mode the chain runs on the coordinator loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, assert_never

from .._core._embedding import ListenerCall
from .._core._member import (
    AwaitJoin,
    AwaitLeaseProof,
    CompleteJoin,
    ComputeAssignment,
    FindCoordinator,
    Idle,
    PrepareJoin,
    RaiseFatal,
    SendJoinGroup,
    SendSyncGroup,
    Sleep,
)
from .._core._state import Generation
from .._errors import (
    AssignmentError,
    CoordinatorError,
    KGroupError,
    ListenerError,
    RemoteProtocolError,
)
from .._log import EventName, logger
from ._link import CoordinatorLink
from ._shared import Shared

__all__ = ["RebalanceDriver", "RebalanceStep"]

#: The join actions that move a rebalance along (:meth:`RebalanceDriver.advance`).
RebalanceStep: TypeAlias = AwaitLeaseProof | PrepareJoin | SendJoinGroup | AwaitJoin | CompleteJoin

_CALLBACK_EVENTS: dict[str, EventName] = {
    "on_partitions_revoked": "member.partitions_revoked",
    "on_partitions_assigned": "member.partitions_assigned",
    "on_partitions_lost": "member.partitions_lost",
}


class RebalanceDriver:
    """Drives the join side of the core from ``poll()`` (see the module docstring)."""

    def __init__(self, shared: Shared, link: CoordinatorLink) -> None:
        self._shared = shared
        self._link = link
        #: The join chain (on the coordinator loop).
        self.chain: asyncio.Task[None] | None = None
        #: Isolated mode: the queued start of the join chain (done once the chain exists).
        self._chain_start: concurrent.futures.Future[Any] | None = None
        #: Partitions whose revoke callback was cancelled: reported lost at the next chance.
        self._interrupted: frozenset[Any] = frozenset()

    # -- waiting ---------------------------------------------------------------------------------

    def _timeout(self, deadline: float | None) -> float | None:
        return None if deadline is None else max(0.0, (deadline - self._shared.now()) / 1000.0)

    async def _wait_coordinator_task(
        self, get: Any, deadline: float | None, *, starts_chain: bool = False
    ) -> None:
        shared = self._shared
        assert shared.seam is not None

        def started(fut: concurrent.futures.Future[Any]) -> None:
            self._chain_start = fut

        await shared.seam.wait_task(
            get,
            lambda: self._timeout(deadline),
            still_open=lambda: shared.open,
            on_started=started if starts_chain else None,
        )

    async def _sleep_until(self, until: float, deadline: float | None) -> None:
        target = until if deadline is None else min(until, deadline)
        timeout = max(0.0, (target - self._shared.now()) / 1000.0)
        try:
            await asyncio.wait_for(self._shared.closed_event.wait(), timeout)
        except TimeoutError:
            pass

    async def _wait_in_poll(self, deadline: float | None) -> bool:
        """Stable and idle: wait for a rebalance trigger, a fatal error or the deadline,
        resetting the poll timer as the Java client's poll loop does. False at deadline."""
        shared = self._shared
        now = shared.now()
        if deadline is not None and now >= deadline:
            return False
        slice_ms = shared.config.max_poll_interval_ms / 2
        until = now + slice_ms if deadline is None else min(deadline, now + slice_ms)
        try:
            async with asyncio.timeout((until - now) / 1000.0):
                await shared.poll_wake.wait()
        except TimeoutError:
            pass
        with shared.step() as core:
            core.poll(shared.now())
        return True

    # -- poll ------------------------------------------------------------------------------------

    async def poll(self, timeout: float | None) -> frozenset[Any]:
        """See :meth:`kgroup.GroupMember.poll`."""
        shared = self._shared
        shared.check_open()
        with shared.step() as core:
            core.poll(shared.now())
        deadline = None if timeout is None else shared.now() + max(0.0, timeout) * 1000.0
        errors: list[ListenerError] = []
        completed = False
        while shared.open:
            shared.poll_wake.clear()
            with shared.step() as core:
                action = core.next_join_action(shared.now())
            match action:
                case Idle():
                    if completed:
                        break
                    if not await self._wait_in_poll(deadline):
                        break
                case RaiseFatal(error=error):
                    raise error
                case FindCoordinator():
                    await self._wait_coordinator_task(self._link.ensure_lookup, deadline)
                case CompleteJoin():
                    await self.advance(action, deadline, errors)
                    completed = True
                    joined = shared.core
                    if joined is not None and joined.leaderless:
                        shared.wake_metadata()  # no leader named: the watch takes its counts
                # Before Sleep: AwaitLeaseProof is a Sleep that also ends on poll's wake-up.
                case AwaitLeaseProof() | PrepareJoin() | SendJoinGroup() | AwaitJoin():
                    await self.advance(action, deadline, errors)
                case Sleep(until=until):
                    await self._sleep_until(until, deadline)
                case _:
                    assert_never(action)
            if deadline is not None and shared.now() >= deadline:
                break
        if errors:
            raise errors[0]
        await asyncio.sleep(0)  # a poll loop always yields to the event loop
        return shared.embedding.owned

    async def advance(
        self, action: RebalanceStep, deadline: float | None, errors: list[ListenerError]
    ) -> None:
        """Carry out one join action that moves a rebalance along, in the caller's task:
        the pre-join hook's callbacks, the JoinGroup→SyncGroup chain (started, or waited
        for until ``deadline``), the wait for a lease proof, the completion. ``poll()`` and
        close()'s handoff both drive rebalances with it."""
        shared = self._shared
        match action:
            case AwaitLeaseProof(until=until):
                # The assignment may be installed only once a heartbeat proves the session
                # fresh (the core asked the heartbeat task for one): wait for its answer
                # (the core wakes poll on member.lease_renewed).
                wait_until = until if deadline is None else min(until, deadline)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, (wait_until - shared.now()) / 1000)):
                        await shared.poll_wake.wait()
            case PrepareJoin(lost=lost):
                await self.run_calls(shared.embedding.prepare(lost=lost), errors)
            case SendJoinGroup():
                await self._wait_coordinator_task(
                    functools.partial(self._start_chain, action), deadline, starts_chain=True
                )
            case AwaitJoin():
                chain = self.chain
                # Isolated mode: a poll() cancelled right after SendJoinGroup may have left
                # the chain's start queued on the coordinator loop; then the chain is about
                # to exist and the wait below (queued after it) finds it.
                start = self._chain_start
                starting = start is not None and not start.done()
                if not starting and (chain is None or chain.done()):
                    with shared.step() as core:
                        core.abandon_chain()  # defensive: a chain always reports back
                else:
                    await self._wait_coordinator_task(lambda: self.chain, deadline)
            case CompleteJoin(generation=generation, assignment=data):
                await self._complete(generation, data, errors)
            case _:
                assert_never(action)

    # -- the join chain (coordinator loop) -------------------------------------------------------

    def _start_chain(self, action: SendJoinGroup) -> asyncio.Task[None]:
        # The JoinGroup leaves right now (when the connection is ready).
        answer = self._link.send_now(action.request, action.timeout_ms)
        self.chain = self._shared.tasks.spawn(self._run_chain(action, answer), "kgroup-join-chain")
        return self.chain

    async def _run_chain(
        self, action: SendJoinGroup, answer: Callable[[], Awaitable[Any]] | None
    ) -> None:
        """JoinGroup (already written when ``answer`` is given), then (leader) assignment,
        then SyncGroup; every outcome reported to the core, which decides what happens
        next."""
        shared, link = self._shared, self._link
        try:
            if answer is not None:
                join = await answer()
            else:
                join = await link.request(action.request, action.timeout_ms)
            with shared.step() as core:
                step = core.on_join_response(join, shared.now())
            if isinstance(step, ComputeAssignment):
                embedding = shared.embedding
                topics = embedding.metadata_topics(step.members)
                counts = await link.transport.partitions_for(topics)
                assignments = embedding.assign(step.protocol_name, step.members, counts)
                with shared.step() as core:
                    step = core.assignment_computed(assignments, now=shared.now())
            if isinstance(step, SendSyncGroup):
                sync = await link.request(step.request, step.timeout_ms)
                with shared.step() as core:
                    core.on_sync_response(sync, shared.now())
        except (CoordinatorError, RemoteProtocolError) as exc:
            with shared.step() as core:
                core.on_join_failed(shared.now(), str(exc))
        except KGroupError as exc:
            with shared.step() as core:
                core.chain_failed_fatal(exc)

    async def cancel_chain(self) -> None:
        """On the coordinator loop: cancel the join chain, if any, and wait for it."""
        chain = self.chain
        if chain is not None and not chain.done():
            chain.cancel()
            await asyncio.gather(chain, return_exceptions=True)
            # Its JoinGroup/SyncGroup may still be held by the coordinator, and a broker
            # reads a connection's next request only after answering the previous one: a
            # LeaveGroup on that connection would wait out the whole rebalance. Drop it; the
            # LeaveGroup goes out on a fresh one.
            self._link.drop()

    # -- callbacks and completion ----------------------------------------------------------------

    async def run_calls(self, calls: tuple[ListenerCall, ...], errors: list[ListenerError]) -> None:
        """Run listener callbacks in order, in this task. A raising callback is logged and
        collected; the rest still run (membership stays consistent)."""
        shared = self._shared
        if self._interrupted:
            # A revoke callback was cancelled part-way (poll() cancelled, e.g. on SIGTERM):
            # the application never heard the end of it, and its commit may not have gone
            # out. Report those partitions as lost first: they are no longer this member's.
            calls = (ListenerCall("on_partitions_lost", self._interrupted), *calls)
            self._interrupted = frozenset()
        # Partitions being revoked are still held until their callback returns (the
        # application may commit in it): the lease covers them until then.
        shared.releasing = frozenset().union(
            *(c.partitions for c in calls if c.callback == "on_partitions_revoked")
        )
        try:
            await self._run_calls_in_order(calls, errors)
        except asyncio.CancelledError:
            self._interrupted = shared.releasing
            raise
        finally:
            shared.releasing = frozenset()

    async def _run_calls_in_order(
        self, calls: tuple[ListenerCall, ...], errors: list[ListenerError]
    ) -> None:
        shared = self._shared
        core = shared.core
        for call in calls:
            generation = core.generation if core is not None else Generation(-1, "", None)
            event = _CALLBACK_EVENTS[call.callback]
            logged = {
                "group": shared.config.group_id,
                "member_id": generation.member_id,
                "generation": generation.generation_id,
                "partitions": sorted(str(tp) for tp in call.partitions),
            }
            shared.announce(event, **logged)  # logged, and the hooks get the same fields
            shared.record(
                event,
                member_id=generation.member_id,
                generation=generation.generation_id,
                partitions=call.partitions,
            )
            method = getattr(shared.listener, call.callback, None)
            if method is None:
                continue
            try:
                result = method(frozenset(call.partitions))
                if result is not None and inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.exception(
                    "member.listener_error",
                    group=shared.config.group_id,
                    callback=call.callback,
                    error=repr(exc),
                )
                shared.record("member.listener_error", callback=call.callback, error=repr(exc))
                error = ListenerError(call.callback, exc)
                error.__cause__ = exc
                errors.append(error)
            if call.callback == "on_partitions_revoked":
                shared.releasing -= call.partitions  # released: its callback has returned

    async def _complete(
        self, generation: Generation, data: bytes, errors: list[ListenerError]
    ) -> None:
        shared = self._shared
        try:
            completion = shared.embedding.complete(generation, data)
        except AssignmentError:
            with shared.step() as core:
                core.on_invalid_assignment(shared.now())
            raise
        await self.run_calls(completion.calls, errors)
        with shared.step() as core:
            core.join_completed(
                shared.now(), follow_up=completion.follow_up, rejoin=completion.rejoin_reason
            )
            rebalance_ms = core.last_rebalance_ms
            member_id = core.generation.member_id
        shared.log(
            "member.stable",
            group=shared.config.group_id,
            member_id=member_id,
            generation=generation.generation_id,
            assignment=sorted(str(tp) for tp in shared.embedding.owned),
            rebalance_ms=rebalance_ms,
        )
