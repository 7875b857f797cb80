"""GroupMember: the public facade over the asyncio runtime of one group member.

The runtime is split into owned parts, each in its own module:

- :class:`~._shared.Shared`: the core behind its lock, the clock, the Events, the task owner,
  and the one place where the core's signals are applied;
- :class:`~._link.CoordinatorLink`: the bootstrap cluster, the coordinator lookup task and
  the coordinator connection;
- :class:`~._rebalance.RebalanceDriver`: the listener's callbacks (which run only in
  ``poll()`` and ``close()``, in the caller's task, KIP-62) and, for the classic protocol,
  the poll path and the join chain;
- a :class:`~._membership.MembershipRuntime`, chosen when the member is built: the group
  protocol's own part (state, assignment, subscription, the heartbeat task, the poll path,
  the leave on close): :class:`~._classic.ClassicRuntime` or
  :class:`~._kip848.ConsumerProtocolRuntime`;
- :class:`~._seam.LoopSeam`: where the coordinator side runs, the application's loop or,
  in isolated mode (``GroupConfig.isolate_heartbeat``), a private loop in its own thread.

Every task is spawned through the member's :class:`~._tasks.TaskOwner`: ``close()`` cancels
and awaits them all, and a task that fails is a kgroup bug that ``poll()`` raises as
:class:`~kgroup.InternalError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from .._config import GroupConfig
from .._core._assignors import RebalanceProtocol
from .._core._consumer_protocol import TopicPartition
from .._core._group_protocol import GroupProtocol
from .._core._member import MemberCore
from .._core._state import Generation, MemberState
from .._errors import ConfigError, ListenerError, UnsupportedVersion, UsageError
from .._listener import ItemListener, RebalanceListener
from .._stats import MemberStats
from ._classic import ClassicRuntime
from ._event_log import close_event_log, open_event_log
from ._fallback import fall_back_to_classic, may_fall_back
from ._kip848 import ConsumerProtocolRuntime
from ._link import CoordinatorLink
from ._loop_thread import LoopThread
from ._member_stats import member_stats
from ._membership import MembershipRuntime
from ._offsets import OffsetAndMetadata, commit_offsets, fetch_committed
from ._rebalance import RebalanceDriver
from ._seam import LoopSeam
from ._shared import EventHook, Lifecycle, Shared
from ._tasks import require_asyncio
from ._transport import KafkaTransport, Transport

__all__ = ["EventHook", "GroupMember"]

_T = TypeVar("_T")


class GroupMember:
    """A member of a Kafka consumer group, driven from asyncio.

    Example::

        async with GroupMember(GroupConfig(bootstrap_servers="localhost:9092",
                                           group_id="g", topics=["t"])) as member:
            while True:
                assignment = await member.poll(timeout=1.0)
                ...  # work on the partitions in ``assignment``

    ``poll()`` is the poll path of KIP-62: call it at least every ``max_poll_interval_ms``.
    It runs any pending rebalance (and the listener's callbacks) in the caller's task and
    raises the fatal errors recorded by the heartbeat task. Heartbeats are sent by a task
    beside it, so a slow iteration does not cost the membership as long as the event loop
    itself is not blocked for longer than ``session_timeout_ms`` (or use
    ``isolate_heartbeat``).

    Parameters:
    - ``config``: a :class:`GroupConfig`.
    - ``listener``: a :class:`RebalanceListener` (any subset of its methods, sync or async);
      an :class:`ItemListener` for a member with a ``protocol``.
    - ``clock``: a monotonic clock in seconds (tests); default: the event loop's ``time()``.
    - ``transport``: how the member reaches the brokers (tests:
      ``kgroup.testing.MockTransport``); default: Kafka's wire protocol via aiokafka.
    - ``protocol``: a :class:`GroupProtocol` (such as :class:`LeaderElection` or
      :class:`WorkSharding`) makes this a member of a group that is not a consumer group:
      it shares out the protocol's items instead of partitions (``config.topics`` stays
      empty). Default: a consumer group member.
    """

    def __init__(
        self,
        config: GroupConfig,
        *,
        listener: RebalanceListener | ItemListener | None = None,
        clock: Callable[[], float] | None = None,
        transport: Transport | None = None,
        protocol: GroupProtocol | None = None,
    ) -> None:
        if not isinstance(config, GroupConfig):
            raise UsageError(f"config must be a GroupConfig, got {type(config).__name__}")
        if config.group_protocol == "consumer" and protocol is not None:
            raise ConfigError("group_protocol", "a GroupProtocol member needs the classic protocol")
        self._config = config
        shared = Shared(config, listener=listener, clock=clock, protocol=protocol)
        self._shared = shared
        self._link = CoordinatorLink(
            shared, KafkaTransport(config) if transport is None else transport
        )
        shared.link = self._link
        self._rebalance = RebalanceDriver(shared, self._link)
        #: The group protocol's part: the one place where the protocol is chosen (a
        #: fallback to classic replaces it once, see ``_fallback``).
        runtime = ConsumerProtocolRuntime if config.group_protocol == "consumer" else ClassicRuntime
        self._runtime: MembershipRuntime = runtime(shared, self._link, self._rebalance)
        self._abandon_task: asyncio.Task[None] | None = None

    # -- public state ----------------------------------------------------------------------------

    @property
    def config(self) -> GroupConfig:
        return self._config

    @property
    def state(self) -> MemberState:
        """The member's state; a consumer-protocol member's maps to the nearest classic
        one (JOINING is PREPARING_REBALANCE, RECONCILING and ACKNOWLEDGING are
        COMPLETING_REBALANCE)."""
        return self._runtime.state

    @property
    def generation(self) -> Generation:
        core = self._shared.core
        return core.generation if core is not None else Generation(-1, "", None)

    @property
    def member_id(self) -> str:
        return self.generation.member_id

    @property
    def assignment(self) -> frozenset[Any]:
        """What this member owns now (as of its last completed rebalance): TopicPartitions
        in a consumer group, item names (str) for a :class:`GroupProtocol` member."""
        return self._runtime.assignment

    @property
    def valid_until(self) -> float | None:
        """Until when (seconds, on the event loop's clock) kgroup vouches for
        :attr:`assignment`; None when nothing is held. Past it the broker may have given the
        partitions to another member: stop working on them. kgroup computes it from the
        send times of the heartbeats the coordinator acknowledged plus the session timeout,
        bounded by the rebalance timeout and the poll deadline (docs: "The lease")."""
        core = self._shared.core
        if core is None:
            return None
        with self._shared.lock:
            deadline = core.valid_until
        return None if deadline is None else deadline / 1000.0

    @property
    def rebalance_pending(self) -> bool:
        """True when the next ``poll()`` has rebalance work to do: a rejoin was requested
        (the heartbeat saw a rebalance, the lease ran out, ...) or the member is not STABLE.
        """
        core = self._shared.core
        if core is None:
            return False
        with self._shared.lock:
            return core.rebalance_pending()

    @property
    def is_leader(self) -> bool:
        core = self._shared.core
        with self._shared.lock:
            return core is not None and core.is_leader

    @property
    def closed(self) -> bool:
        return self._shared.lifecycle is Lifecycle.CLOSED

    def stats(self) -> MemberStats:
        """A typed snapshot for observability (:class:`~kgroup.MemberStats`; times in ms)."""
        return member_stats(self, self._shared)

    def __repr__(self) -> str:
        return (
            f"<GroupMember group={self._config.group_id!r} state={self.state.name} "
            f"generation={self.generation.generation_id} member_id={self.member_id!r}>"
        )

    # -- event hooks -----------------------------------------------------------------------------

    def add_event_hook(self, hook: EventHook) -> None:
        """Call ``hook(name, fields)`` for every membership event the member logs (the
        names of the log-event reference, e.g. ``member.state_changed``), on the
        application's loop (in isolated mode: soon after the event). A hook must be quick and
        must not block. A hook that raises is contained: the call is counted
        (``stats().event_hook_failures``), its first failure is logged as
        ``member.event_hook_failed``, and the member carries on unaffected."""
        self._shared.hooks.append(hook)

    def remove_event_hook(self, hook: EventHook) -> None:
        """Stop calling ``hook``. Removing a hook that was never added is a no-op."""
        try:
            self._shared.hooks.remove(hook)
        except ValueError:
            pass

    # -- lifecycle -------------------------------------------------------------------------------

    def _now(self) -> float:
        return self._shared.now()

    @property
    def _core(self) -> MemberCore | None:
        """The sans-I/O core (tests read it; code changes it only through _core_call)."""
        return self._shared.core

    async def __aenter__(self) -> GroupMember:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the heartbeat task. Joining happens in the first ``poll()``."""
        loop = require_asyncio()
        shared = self._shared
        if shared.lifecycle is not Lifecycle.UNOPENED:
            raise UsageError(f"GroupMember cannot be started: it is {shared.lifecycle.value}")
        thread = None
        if self._config.isolate_heartbeat:
            thread = LoopThread(f"kgroup-coordinator-{self._config.group_id}")
            thread.start()
        shared.seam = LoopSeam(loop, thread)
        if self._config.event_log is not None or self._config.event_log_topic is not None:
            open_event_log(shared)
        self._runtime.open()
        shared.lifecycle = Lifecycle.OPEN
        if thread is None:
            self._spawn_coordinator_tasks()
        else:
            await asyncio.wrap_future(thread.call(self._spawn_coordinator_tasks))
            shared.announce(
                "member.isolated",
                group=self._config.group_id,
                thread=f"kgroup-coordinator-{self._config.group_id}",
            )
        await self._runtime.resolve_subscription()

    def _spawn_coordinator_tasks(self) -> None:
        """On the coordinator loop: start the group protocol's tasks (the heartbeat task;
        for the classic protocol also the metadata watch)."""
        self._runtime.spawn_tasks(self._abandoned)

    # -- subscription ----------------------------------------------------------------------------

    @property
    def subscription(self) -> tuple[str, ...]:
        """The topics this member subscribes to now (for a pattern: what it matched at the
        last metadata refresh); empty for a GroupProtocol member."""
        return self._runtime.subscription

    async def subscribe(
        self, topics: Iterable[str] | None = None, *, pattern: str | None = None
    ) -> None:
        """Change the subscription: a list of ``topics``, or a regular expression
        ``pattern`` over the cluster's topic names (``re`` syntax, ``fullmatch``; internal
        topics never match). Give exactly one.

        When the topic set changes the member rejoins: the next ``poll()`` runs the
        rebalance (eager assignors revoke everything first; cooperative ones revoke only the
        partitions of topics no longer subscribed). A pattern is resolved against the
        cluster's topics before this returns (raises ``CoordinatorError``, with the
        subscription unchanged, when no broker answers), and again every
        ``metadata_max_age_ms``. Raises ConfigError for an invalid argument."""
        self._shared.check_open()
        await self._runtime.subscribe(topics, pattern)

    def enforce_rebalance(self, reason: str = "the application asked for a rebalance") -> None:
        """Ask for a rebalance of the whole group (Java's ``enforceRebalance``): the member
        rejoins in the next ``poll()``; as in any rebalance, the leader assigns afresh (with
        fresh metadata). Useful when something the assignor uses changed outside Kafka.
        With ``group_protocol="consumer"`` it raises :class:`UsageError`: the broker starts
        every rebalance there."""
        self._shared.check_open()
        self._runtime.enforce_rebalance(reason)

    def _abandoned(self) -> bool:
        """Isolated mode: the application's loop closed without ``close()``. Then nobody
        will poll or close this member: stop heartbeating, close the connections and stop
        the coordinator thread instead of heartbeating until the process exits. (The group
        notices when the session times out, as after a crash.)"""
        shared = self._shared
        seam = shared.seam
        if seam is None or seam.thread is None or not seam.app_loop_closed():
            return False
        thread = seam.thread
        shared.log(
            "member.abandoned",
            group=self._config.group_id,
            member_id=self.member_id,
            reason="the application's event loop closed without close() or abort()",
        )
        shared.lifecycle = Lifecycle.CLOSING

        async def stop() -> None:
            try:
                await self._shutdown_coordinator_side()
                await close_event_log(self._shared, stopped=False)
            finally:
                thread.stop_soon()
                shared.lifecycle = Lifecycle.CLOSED

        # Not owned by the task owner (it cancels those); the loop thread cancels/awaits it.
        self._abandon_task = asyncio.get_running_loop().create_task(stop(), name="kgroup-abandon")
        return True

    # -- doors for the offsets API and the records consumer --------------------------------------

    def _core_call(self, fn: Callable[[MemberCore], _T]) -> _T:
        """Run ``fn`` on the open member's core, under the core lock, and apply its signals.
        Code outside the runtime (offsets, the records consumer) reads and changes the core
        only through here. ``fn`` must be synchronous and quick (it may not await)."""
        shared = self._shared
        shared.check_open()
        with shared.step() as core:
            return fn(core)

    async def _coordinator_request(self, request: Any, timeout_ms: float) -> Any:
        """Send one request to the group coordinator and return its response value (on the
        coordinator loop in isolated mode; cancelling the caller cancels it there)."""
        seam = self._shared.seam
        if seam is None:
            raise UsageError("GroupMember is not started")
        return await seam.run_on_coordinator(self._link.request(request, timeout_ms))

    async def _await_coordinator_known(self, deadline: float | None) -> None:
        """Start the coordinator lookup if none runs, and wait for it up to ``deadline``."""
        await self._rebalance._wait_coordinator_task(self._link.ensure_lookup, deadline)

    # -- poll ------------------------------------------------------------------------------------

    async def poll(self, timeout: float | None = None) -> frozenset[Any]:
        """Keep the membership alive; return the assignment when it changes or at timeout.

        Runs any pending rebalance in this task (listener callbacks included) and returns as
        soon as one completes. When the member is stable with nothing pending, waits up to
        ``timeout`` seconds (``None``: without limit) for the next rebalance and runs it.
        ``timeout=0`` makes progress without waiting. A JoinGroup in flight when the timeout
        passes (or when the caller is cancelled) keeps going; the next call picks it up.

        Resets the poll timer, and keeps resetting it while it waits. Raises the fatal
        errors recorded since the last call (GroupError subclasses, InternalError), and
        ListenerError if a callback raised (after the rebalance step completed).
        """
        try:
            return await self._runtime.poll(timeout)
        except UnsupportedVersion as exc:
            if not may_fall_back(self, exc):
                raise
            await fall_back_to_classic(self, exc)  # replaces self._runtime
        return await self._runtime.poll(timeout)

    async def wait_rebalance_pending(self, timeout: float | None = None) -> bool:
        """Wait until the next ``poll()`` has something to do: a rebalance step (a rejoin to
        start, a completed join to install, partitions to release), a fatal error to raise,
        or the member is closing. A JoinGroup in flight is not such a step: a cooperative
        member goes on working on what it owns meanwhile. True as soon as it has; False
        when ``timeout`` seconds (None: no limit) pass first. It never runs the rebalance
        itself: call ``poll()`` for that. A fetch loop uses it to stop waiting for records."""
        shared = self._shared
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + max(0.0, timeout)
        while True:
            shared.pending_wake.clear()
            if self._poll_has_work():
                return True
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            try:
                async with asyncio.timeout(remaining):
                    await shared.pending_wake.wait()
            except TimeoutError:
                return self._poll_has_work()

    def _poll_has_work(self) -> bool:
        shared = self._shared
        core = shared.core
        if not shared.open or core is None:
            return True
        with shared.lock:
            return core.poll_work_pending()

    @property
    def rebalance_protocol(self) -> RebalanceProtocol:
        """EAGER or COOPERATIVE: how this member gives up partitions in a rebalance (the best
        protocol all its assignors support, or its GroupProtocol's). A consumer-protocol
        member gives up only what moves: COOPERATIVE."""
        return self._runtime.rebalance_protocol

    # -- offsets ---------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        *,
        timeout: float | None = None,
    ) -> None:
        """Commit ``offsets`` (the next offset to read, per partition) under the member's
        current generation, retrying retriable failures until ``timeout`` seconds (default:
        ``request_timeout_ms``).

        Raises :class:`~kgroup.RebalanceInProgress` (call ``poll()``, then commit again),
        :class:`~kgroup.CommitFailed` (the member left the generation; the partitions may be
        another member's now), :class:`~kgroup.TopicAuthorizationFailed`, the fatal
        :class:`~kgroup.GroupAuthorizationFailed` / :class:`~kgroup.FencedInstanceId` (also
        raised by the next ``poll()``), or :class:`~kgroup.OffsetsError` (rejected, or not
        done before the timeout)."""
        await commit_offsets(self, offsets, timeout=timeout)

    async def fetch_committed(
        self, partitions: Iterable[TopicPartition], *, timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The committed offsets of ``partitions`` in the member's group (None where nothing
        is committed), retrying retriable failures until ``timeout`` seconds (default:
        ``request_timeout_ms``). Raises :class:`~kgroup.OffsetsError`,
        :class:`~kgroup.TopicAuthorizationFailed` or the fatal
        :class:`~kgroup.GroupAuthorizationFailed`."""
        return await fetch_committed(self, partitions, timeout=timeout)

    # -- abort and close -------------------------------------------------------------------------

    async def abort(self) -> None:
        """Stop at once as if the process had died: no callbacks, no LeaveGroup. Every task
        and connection is still cleaned up. The group notices only when the session times
        out. Meant for tests and demos of crash handling."""
        if self._shared.lifecycle in (Lifecycle.CLOSED, Lifecycle.CLOSING):
            return
        self._shared.lifecycle = Lifecycle.CLOSING
        await self._shutdown()
        self._shared.log("member.aborted", group=self._config.group_id)
        await close_event_log(self._shared, stopped=False)

    async def _shutdown(self) -> None:
        shared = self._shared
        shared.lifecycle = Lifecycle.CLOSING
        shared.closed_event.set()
        shared.wake_hb()
        shared.poll_wake.set()
        shared.pending_wake.set()
        try:
            if shared.seam is not None:
                await shared.seam.shutdown(self._shutdown_coordinator_side)
            else:
                await self._shutdown_coordinator_side()
        finally:
            shared.lifecycle = Lifecycle.CLOSED

    async def _shutdown_coordinator_side(self) -> None:
        """On the coordinator loop: stop its tasks, close its connections."""
        await self._shared.tasks.aclose()
        await self._link.aclose()

    async def close(self, handoff: bool | None = None) -> None:
        """Release the partitions (revoked, or lost if the generation is gone), leave the
        group (dynamic members), stop every task and close every connection. Idempotent;
        bounded by ``min(close_timeout_ms, request_timeout_ms)``. A rebalance callback that
        raises meanwhile is raised as :class:`ListenerError` once the member is closed.

        ``handoff`` (default: ``GroupConfig.handoff_on_close``): a member of a
        ``cooperative-sticky`` group that leaves on close first rejoins once, marked as
        leaving, keeping its partitions meanwhile; a kgroup leader gives them to nobody
        that generation and tells the others a follow-up rebalance is coming, and the member
        then revokes and leaves, so its partitions are unowned for milliseconds plus a
        rebalance instead of up to a whole heartbeat interval. The rejoin takes up to three quarters
        of the budget (the others join it at their next heartbeat, so close() itself takes
        up to a heartbeat interval longer); on any failure, or under a leader that ignores
        the mark, close() releases and leaves as without it. A consumer-protocol member
        that leaves (epoch -1) keeps its partitions until just before the group's next
        heartbeat tick, then revokes and leaves, so the others take them over in the
        answers to their heartbeats on that tick (close() takes up to one heartbeat
        interval longer; deviations.md row 22). Do not poll() the member from another task
        while it closes."""
        shared = self._shared
        if shared.lifecycle in (Lifecycle.CLOSED, Lifecycle.CLOSING):
            return
        if shared.lifecycle is Lifecycle.UNOPENED or shared.core is None or shared.seam is None:
            shared.lifecycle = Lifecycle.CLOSED
            await self._link.aclose()
            return
        budget = min(self._config.close_timeout_ms, self._config.request_timeout_ms) / 1000.0
        errors: list[ListenerError] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        if handoff is None:
            handoff = self._config.handoff_on_close
        try:
            async with asyncio.timeout(budget):
                await self._runtime.close(errors, handoff=handoff, deadline=deadline)
        except TimeoutError:
            shared.log("member.close_timed_out", group=self._config.group_id)
        finally:
            await self._shutdown()
            shared.log("member.closed", group=self._config.group_id)
            await close_event_log(self._shared)
        if errors:
            raise errors[0]
