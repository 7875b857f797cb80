"""The asyncio runtime of a KIP-848 ``consumer``-protocol member.

It drives :class:`~kgroup._core._kip848_member.ConsumerProtocolMember` with the parts the
classic runtime already has: :class:`~._shared.Shared` (the core behind its lock, the
Events, the task owner, the signals), :class:`~._link.CoordinatorLink` (the coordinator
lookup and connection: both cores answer the same discovery calls) and
:meth:`~._rebalance.RebalanceDriver.run_calls` (the listener's callbacks, in the caller's
task). What it adds:

- the **heartbeat task** (:meth:`ConsumerProtocolRuntime.run`): one loop, one wait on
  ``hb_wake``, one heartbeat in flight; a leave heartbeat is sent and its answer only
  logged;
- the **poll path** (:meth:`~ConsumerProtocolRuntime.poll`): reconciliations with their
  callbacks, topic-id lookups (Metadata by id), lost partitions, fatal errors;
- the **leave on close** (:meth:`~ConsumerProtocolRuntime.close`).

It is one of the two :class:`~._membership.MembershipRuntime` implementations that
:class:`~kgroup.GroupMember` talks to (the other is :class:`~._classic.ClassicRuntime`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, assert_never, cast

from .._config import check_topic_pattern, check_topics
from .._core._assignors import RebalanceProtocol
from .._core._consumer_protocol import TopicPartition
from .._core._embedding import ConsumerEmbedding, ListenerCall
from .._core._kip848_actions import (
    HeartbeatFindCoordinator,
    HeartbeatIdle,
    HeartbeatWait,
    PollIdle,
    RaiseError,
    Reconcile,
    ReleaseLost,
    ReleaseOnLeave,
    ResolveTopics,
    SendConsumerHeartbeat,
)
from .._core._kip848_member import ConsumerProtocolMember
from .._core._kip848_state import ConsumerState
from .._core._member import MemberCore
from .._core._state import MemberState
from .._errors import (
    CoordinatorError,
    KGroupError,
    ListenerError,
    RemoteProtocolError,
    UsageError,
)
from ._group_configs import SessionTimeoutLearner
from ._heartbeat import log_late
from ._link import CoordinatorLink
from ._rebalance import RebalanceDriver
from ._shared import Lifecycle, Shared

__all__ = ["ConsumerProtocolRuntime", "classic_state"]

S = ConsumerState

#: How the consumer protocol's states show through the classic ``GroupMember.state``.
_CLASSIC_STATE = {
    S.UNSUBSCRIBED: MemberState.UNJOINED,
    S.JOINING: MemberState.PREPARING_REBALANCE,
    S.RECONCILING: MemberState.COMPLETING_REBALANCE,
    S.ACKNOWLEDGING: MemberState.COMPLETING_REBALANCE,
    S.STABLE: MemberState.STABLE,
    S.FENCED: MemberState.UNJOINED,
    S.PREPARE_LEAVING: MemberState.STABLE,
    S.LEAVING: MemberState.UNJOINED,
    S.STALE: MemberState.UNJOINED,
    S.FATAL: MemberState.UNJOINED,
}


def classic_state(state: ConsumerState) -> MemberState:
    """``state`` as the classic member states name it (GroupMember.state)."""
    return _CLASSIC_STATE[state]


class _Step:
    """The core under the member's lock, its signals applied on exit: ``Shared.step`` for
    this core's type."""

    __slots__ = ("_core", "_shared")

    def __init__(self, shared: Shared, core: ConsumerProtocolMember) -> None:
        self._shared = shared
        self._core = core

    def __enter__(self) -> ConsumerProtocolMember:
        self._shared.lock.acquire()
        return self._core

    def __exit__(self, *exc_info: object) -> None:
        try:
            signals = self._core.take_signals()
        finally:
            self._shared.lock.release()
        if signals:
            self._shared.apply(signals)


class ConsumerProtocolRuntime:
    """Runs one consumer-protocol member (see the module docstring)."""

    def __init__(self, shared: Shared, link: CoordinatorLink, rebalance: RebalanceDriver) -> None:
        self._shared = shared
        self._link = link
        self._rebalance = rebalance
        self._core: ConsumerProtocolMember | None = None
        #: What the application holds, with topic names (GroupMember.assignment).
        self.assignment: frozenset[TopicPartition] = frozenset()
        self._leave_sent = asyncio.Event()
        self._stopped = False
        #: Reads the broker's session timeout for the lease (after the first answer).
        self._session_timeout = SessionTimeoutLearner(shared, link, self._step)

    def open(self) -> None:
        """In start(): the core, with a client-generated member id (KIP-1082). The link's
        discovery calls are the same for both cores, so it is ``Shared.core`` too."""
        shared = self._shared
        settings = shared.config.consumer_protocol_settings(str(uuid.uuid4()))
        self._core = ConsumerProtocolMember(settings, now=shared.now(), observer=shared.observe)
        shared.core = cast(MemberCore, self._core)

    @property
    def core(self) -> ConsumerProtocolMember:
        """The sans-I/O core, from :meth:`open` on."""
        core = self._core
        if core is None:
            raise UsageError("GroupMember is not started")
        return core

    @property
    def state(self) -> MemberState:
        """The core's state as the classic member states name it (see ``classic_state``);
        UNJOINED before start()."""
        core = self._core
        return MemberState.UNJOINED if core is None else classic_state(core.state)

    @property
    def rebalance_protocol(self) -> RebalanceProtocol:
        """A consumer-protocol member gives up only what moves."""
        return RebalanceProtocol.COOPERATIVE

    def spawn_tasks(self, abandoned: Callable[[], bool]) -> None:
        """On the coordinator loop: the heartbeat task. The broker resolves patterns and
        watches the metadata: no metadata watch."""
        self._shared.tasks.spawn(self.run(abandoned), "kgroup-heartbeat")

    async def resolve_subscription(self) -> None:
        """Nothing to resolve before the first heartbeat: the broker matches a pattern."""

    def enforce_rebalance(self, reason: str) -> None:
        """Refused: the broker alone starts a consumer group's rebalances (KIP-848 has no
        client-side trigger; Java's consumer logs a warning and does nothing)."""
        # DEVIATION (spec §10.1; deviations.md row 26): refused, not ignored.
        raise UsageError(
            'enforce_rebalance() has no equivalent with group_protocol="consumer": the broker '
            "starts every rebalance of a consumer group (a subscription change reaches it "
            "through subscribe())"
        )

    @property
    def joined_once(self) -> bool:
        """Whether the broker ever gave this member an epoch."""
        return self.core.joined_once

    def stop(self) -> None:
        """Stop the heartbeat task (the fallback to classic replaces it)."""
        self._stopped = True
        self._shared.wake_hb()

    def _step(self) -> _Step:
        return _Step(self._shared, self.core)

    # -- the heartbeat task ----------------------------------------------------------------

    async def _wait(self, until: float | None) -> None:
        shared = self._shared
        timeout = None if until is None else max(0.0, (until - shared.now()) / 1000.0)
        if shared.seam is not None and shared.seam.isolated:
            # Wake at least every second to notice an abandoned member (see run()).
            timeout = 1.0 if timeout is None else min(timeout, 1.0)
        try:
            async with asyncio.timeout(timeout):
                await shared.hb_wake.wait()
        except TimeoutError:
            pass

    async def run(self, abandoned: Callable[[], bool]) -> None:
        """The heartbeat task, on the coordinator loop, until the member closes.
        ``abandoned()`` is true when the member must stop by itself (isolated mode, the
        application's loop closed without close()). A wake-up later than the loop stall
        threshold is logged as ``heartbeat.late``, as for the classic member."""
        shared = self._shared
        stats = shared.hb_stats
        while not self._stopped and shared.lifecycle in (Lifecycle.OPEN, Lifecycle.CLOSING):
            if abandoned():
                return
            shared.hb_wake.clear()
            now = shared.now()
            due = stats.due
            lateness = stats.woke(now)
            with self._step() as core:
                core.wall_offset_ms = shared.wall_offset_ms()
                action = core.heartbeat_action(now)
            if isinstance(action, HeartbeatWait):
                stats.waiting(action.until, now)
            else:
                stats.idle()
            if lateness is not None and due is not None and stats.is_late(lateness):
                log_late(shared, due, lateness)
            match action:
                case SendConsumerHeartbeat():
                    if shared.recorder is not None:
                        shared.recorder.heartbeat_sending(lateness)
                    await self._heartbeat(action)
                case HeartbeatFindCoordinator(until=until):
                    if until <= shared.now():
                        await self._link.ensure_lookup()
                    else:
                        await self._wait(until)
                case HeartbeatWait(until=until):
                    await self._wait(until)
                case HeartbeatIdle(until=until):
                    await self._wait(until)
                case _:
                    assert_never(action)

    async def _heartbeat(self, action: SendConsumerHeartbeat) -> None:
        shared = self._shared
        stats = shared.hb_stats
        stats.sending()
        try:
            response = await self._link.request(action.request, action.timeout_ms)
        except (CoordinatorError, RemoteProtocolError) as exc:
            if shared.recorder is not None and not action.leave:
                shared.recorder.heartbeat_answered(action.sent_at, shared.now())
            stats.lost()
            if action.leave:
                shared.log(
                    "member.leave_group_failed", group=shared.config.group_id, error=str(exc)
                )
                self._leave_sent.set()
                return
            with self._step() as core:
                core.on_heartbeat_failed(action, shared.now(), str(exc))
            return
        except KGroupError as exc:  # UnsupportedVersion from the negotiation, ...
            if action.leave:
                self._leave_sent.set()
                return
            with self._step() as core:
                core.record_fatal(exc)
            return
        if action.leave:
            shared.log(
                "member.left_group",
                group=shared.config.group_id,
                member_id=action.request.member_id,
                error_code=response.error_code,
            )
            self._leave_sent.set()
            return
        now = shared.now()
        stats.answered(action.sent_at, now, ok=response.error_code == 0)
        if shared.recorder is not None:
            shared.recorder.heartbeat_answered(action.sent_at, now)
        with self._step() as core:
            core.on_heartbeat_response(action, response, now)
        if response.error_code == 0:
            self._session_timeout.heartbeat_answered()

    async def subscribe(self, topics: Iterable[str] | None, pattern: str | None) -> None:
        """See :meth:`kgroup.GroupMember.subscribe`: the pattern is sent to the broker,
        which matches it (RE2/J) against whole topic names; the next heartbeat carries the
        change, and the broker's next target assignment reflects it."""
        if (topics is None) == (pattern is None):
            raise UsageError("subscribe() takes either topics or pattern")
        if pattern is not None:
            check_topic_pattern(pattern, "pattern")
            new_topics: tuple[str, ...] = ()
        else:
            new_topics = check_topics(topics, "topics")
        shared = self._shared
        with self._step() as core:
            core.subscribe(new_topics, pattern, shared.now())

    @property
    def subscription(self) -> tuple[str, ...]:
        core = self._core
        if core is not None:
            return core.topics
        embedding = self._shared.embedding  # before start(): what the configuration names
        return embedding.topics if isinstance(embedding, ConsumerEmbedding) else ()

    # -- the poll path ---------------------------------------------------------------------

    async def poll(self, timeout: float | None) -> frozenset[TopicPartition]:
        """See :meth:`kgroup.GroupMember.poll`: returns once a reconciliation (or a loss)
        completed, or at ``timeout``."""
        shared = self._shared
        shared.check_open()
        deadline = None if timeout is None else shared.now() + max(0.0, timeout) * 1000.0
        errors: list[ListenerError] = []
        changed = False
        while shared.open:
            shared.poll_wake.clear()
            with self._step() as core:
                core.polled(shared.now())
                action = core.poll_action(shared.now())
            if isinstance(action, PollIdle):
                if changed or (deadline is not None and shared.now() >= deadline):
                    break
                await self._wait_in_poll(action.until, deadline)
                continue
            changed |= await self._run(action, errors)
        if errors:
            raise errors[0]
        await asyncio.sleep(0)  # a poll loop always yields to the event loop
        return self.assignment

    async def _wait_in_poll(self, until: float | None, deadline: float | None) -> None:
        shared = self._shared
        now = shared.now()
        limit = now + shared.config.max_poll_interval_ms / 2  # keep the poll timer reset
        for bound in (until, deadline):
            if bound is not None:
                limit = min(limit, bound)
        try:
            async with asyncio.timeout(max(0.0, (limit - now) / 1000.0)):
                await shared.poll_wake.wait()
        except TimeoutError:
            pass

    async def _run(self, action: Any, errors: list[ListenerError]) -> bool:
        """Run one poll action; True when the assignment changed."""
        shared = self._shared
        match action:
            case RaiseError(error=error):
                raise error
            case Reconcile():
                await self._reconcile(action, errors)
                return True
            case ReleaseLost(partitions=partitions):
                self.assignment = frozenset()
                await self._rebalance.run_calls(
                    (ListenerCall("on_partitions_lost", partitions),), errors
                )
                with self._step() as core:
                    core.lost_released(shared.now())
                return True
            case ReleaseOnLeave(partitions=partitions, lost=lost):
                call = ListenerCall(
                    "on_partitions_lost" if lost else "on_partitions_revoked", partitions
                )
                await self._rebalance.run_calls((call,), errors)
                self.assignment = frozenset()
                with self._step() as core:
                    core.leave_prepared(shared.now())
                return True
            case ResolveTopics(topic_ids=ids):
                await self._resolve(ids)
                return False
        raise AssertionError(f"unexpected poll action {action!r}")

    async def _reconcile(self, action: Reconcile, errors: list[ListenerError]) -> None:
        """Revoke, install, assign (§10.5 steps 5-6), then report. A ``poll()`` cancelled
        in the middle reports what the member holds by then, so the next ``poll()`` (or
        close()) goes on from there; a revoke callback cut short is reported as lost at the
        next callback run (RebalanceDriver.run_calls). A member that lost its partitions
        while the revoke callback ran (fenced, its lease ended) installs nothing new."""
        installed = False
        try:
            self.assignment = self.assignment - action.revoked
            if action.revoked:
                call = ListenerCall("on_partitions_revoked", action.revoked)
                await self._rebalance.run_calls((call,), errors)
                with self._step() as core:
                    go_on = core.may_install(action, self._shared.now())
                if not go_on:  # lost meanwhile: the next poll() reports what is kept
                    return
            self.assignment = self.assignment | action.assigned
            installed = True
            call = ListenerCall("on_partitions_assigned", action.assigned)
            await self._rebalance.run_calls((call,), errors)
        except BaseException:
            with self._step() as core:
                core.reconcile_interrupted(action, installed=installed)
            raise
        with self._step() as core:
            core.reconciled(action, self._shared.now())

    async def _resolve(self, ids: frozenset[uuid.UUID]) -> None:
        shared = self._shared
        assert shared.seam is not None
        try:
            names = await shared.seam.run_on_coordinator(self._names(ids))
        except KGroupError as exc:
            with self._step() as core:
                core.topics_unresolved(shared.now(), str(exc))
            return
        with self._step() as core:
            core.topics_resolved(names, shared.now())

    async def _names(self, ids: frozenset[uuid.UUID]) -> Mapping[uuid.UUID, str]:
        """Names for ``ids``: first from Metadata for the subscribed topics by name (any
        broker with Metadata v10+), then, for ids still unknown (a regex subscription, or
        a topic just renamed into the subscription), by id (v12+)."""
        from ._topic_ids import resolve_topic_ids, topic_ids_by_name

        timeout_ms = self._shared.config.request_timeout_ms
        conn = await self._link.connection()
        names: dict[uuid.UUID, str] = {}
        if self.core.topics:
            found = await topic_ids_by_name(conn, self.core.topics, timeout_ms=timeout_ms)
            names = {tid: name for tid, name in found.items() if tid in ids}
        missing = ids - names.keys()
        if missing:
            by_id = await resolve_topic_ids(conn, missing, timeout_ms=timeout_ms)
            names.update((tid, topic.name) for tid, topic in by_id.resolved.items())
        return names

    # -- close -----------------------------------------------------------------------------

    async def close(self, errors: list[ListenerError], *, handoff: bool, deadline: float) -> None:
        """Release the partitions (revoked while the member has an epoch, lost otherwise),
        then let the heartbeat task send the leave heartbeat, and wait until it has. With
        ``handoff``, the release waits for the group's next heartbeat tick (the core's
        ``leave``), if it can start within the first half of what is left before
        ``deadline`` (seconds, the event loop's clock); close()'s own timeout bounds the
        whole wait.

        A callback that raises here goes to ``errors``, which close() raises once the member
        is closed, as the classic member's does.
        """
        shared = self._shared
        now = shared.now()
        remaining_ms = (deadline - asyncio.get_running_loop().time()) * 1000.0
        with self._step() as core:
            core.wall_offset_ms = shared.wall_offset_ms()
            leaving = core.leave(now, handoff=handoff, deadline=now + remaining_ms / 2)
        if not leaving:
            return
        while True:
            shared.poll_wake.clear()
            with self._step() as core:
                action = core.poll_action(shared.now())
                state = core.state
            if isinstance(action, (ReleaseOnLeave, ReleaseLost)):
                await self._run(action, errors)
                continue
            if state is not S.PREPARE_LEAVING:
                break
            # A reconciliation ends (its end wakes the poll), or a handoff's release is due.
            until = action.until if isinstance(action, PollIdle) else None
            await self._wait_in_poll(until, shared.now() + 100.0)
        if state is S.LEAVING and shared.seam is not None:
            shared.wake_hb()
            # The heartbeat task sets it, on the coordinator loop (a thread of its own in
            # isolated mode): wait for it there.
            await shared.seam.run_on_coordinator(self._leave_sent.wait())
