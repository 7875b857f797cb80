"""A simulated member process: the real :class:`kgroup.GroupMember` on a virtual-time loop.

Each process has its own :class:`ProcessLoop`, an asyncio event loop whose clock is the
world's virtual clock and which never blocks: it runs only when the world's scheduler steps
it (a callback became ready, or its earliest timer came due). The member reaches the
simulated brokers through :class:`SimTransport`, kgroup's transport seam, so what runs here
is the runtime users run (heartbeat task, poll path, join chain, coordinator link, lease),
not a copy of it.

A process can be paused (its loop does not run and the network's deliveries to it wait, in
order, until it resumes), crashed (no callback, no LeaveGroup: the member is aborted with
the world looking away), restarted (a new process; same instance id when static) or closed
with ``GroupMember.close()`` (half the incarnations with the handoff:
:func:`handoff_on_close`).
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import math
import random
import zlib
from asyncio import events
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kgroup import (
    FencedInstanceId,
    GroupConfig,
    GroupMember,
    InconsistentGroupProtocol,
    LeaderElection,
    MemberState,
    WorkSharding,
)
from kgroup._core._member import MemberCore
from kgroup._errors import CommitFailed, CoordinatorError, OffsetsError, RebalanceInProgress
from kgroup.testing.messages import FindCoordinatorRequest, FindCoordinatorResponse

from ._groups import BRIDGE
from ._sched import Failure, Future, Handle
from ._world848 import assigned_topic_ids, consumer_config

if TYPE_CHECKING:
    from ._network import Conn
    from ._world import World

__all__ = ["Process", "ProcessLoop", "SimConnection", "SimTransport"]

_T = TypeVar("_T")

GROUP = "sim-group"
INF = math.inf

#: A timer due at ``t`` wakes its loop this much later (ms), so that the member's clock has
#: reached ``t`` when it looks (a real loop is never early either).
TIMER_SLACK_MS = 1e-6

#: Loop steps at one virtual instant after which a process is declared livelocked.
LIVELOCK_STEPS = 100_000


class ProcessLoop(asyncio.BaseEventLoop):
    """An asyncio loop on the world's virtual clock, stepped by the world's scheduler."""

    # BaseEventLoop's own state, which the stepping reads (typeshed does not declare it).
    _ready: collections.deque[Any]
    _scheduled: list[Any]
    _timer_cancelled_count: int
    _clock_resolution: float

    def __init__(self, proc: Process) -> None:
        super().__init__()
        self._proc = proc
        self._world = proc.world
        self._kicked = False
        self._timer_at = INF
        self._resume_pending = False
        self._steps_at = -1.0
        self._steps_here = 0
        self.running = True

    # -- the clock and the hooks asyncio calls -------------------------------------------------

    def time(self) -> float:
        return self._world.sched.now / 1000.0

    def call_soon(  # type: ignore[override]
        self, callback: Any, *args: Any, context: Any = None
    ) -> asyncio.Handle:
        # BaseEventLoop.call_soon without its debug checks (the hottest call here).
        handle = events.Handle(callback, args, self, context)
        self._ready.append(handle)
        if not self._kicked and self.running:
            self._kicked = True
            self._world.sched.at(self._world.sched.now, self._step)
        return handle

    def call_at(  # type: ignore[override]
        self, when: float, callback: Any, *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        handle = super().call_at(when, callback, *args, context=context)
        self._arm(when)
        return handle

    def _write_to_self(self) -> None:  # call_soon_threadsafe: one thread here
        pass

    def _process_events(self, event_list: Any) -> None:
        pass

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        self._proc.loop_error(context)

    # -- stepping ------------------------------------------------------------------------------

    def _arm(self, when: float) -> None:
        at = when * 1000.0 + TIMER_SLACK_MS
        if at < self._timer_at and self.running:
            self._timer_at = at
            self._world.sched.at(at, self._timer_due, at)

    def _timer_due(self, at: float) -> None:
        if at != self._timer_at:
            return  # superseded by an earlier wake
        self._timer_at = INF
        self._step()

    def kick(self) -> None:
        """Step as soon as possible (the process resumed)."""
        if not self._kicked and self.running:
            self._kicked = True
            self._world.sched.at(self._world.sched.now, self._step)

    def _resume(self) -> None:
        self._resume_pending = False
        self._step()

    def _step(self) -> None:
        self._kicked = False
        if not self.running:
            return
        proc = self._proc
        world = self._world
        now = world.sched.now
        if proc.paused_until > now:
            if not self._resume_pending:
                self._resume_pending = True
                world.sched.at(proc.paused_until, self._resume)
            return
        if now == self._steps_at:
            self._steps_here += 1
            if self._steps_here > LIVELOCK_STEPS:
                proc.livelocked()
                return
        else:
            self._steps_at, self._steps_here = now, 0
        scheduled = self._scheduled
        ready = self._ready
        end = now / 1000.0 + self._clock_resolution
        while scheduled:
            handle = scheduled[0]
            if handle._cancelled:
                heapq.heappop(scheduled)
                handle._scheduled = False
                self._timer_cancelled_count -= 1
            elif handle._when < end:
                heapq.heappop(scheduled)
                handle._scheduled = False
                ready.append(handle)
            else:
                break
        if len(scheduled) > 200 and self._timer_cancelled_count * 2 > len(scheduled):
            kept = [h for h in scheduled if not h._cancelled]
            for h in scheduled:
                if h._cancelled:
                    h._scheduled = False
            heapq.heapify(kept)
            self._scheduled = scheduled = kept
            self._timer_cancelled_count = 0
        outer = events._get_running_loop()  # a test may step the world from its own loop
        events._set_running_loop(self)
        try:
            for _ in range(len(ready)):
                if not ready:  # halted by a handle that just ran
                    break
                handle = ready.popleft()
                if not handle._cancelled:
                    handle._run()
        finally:
            events._set_running_loop(outer)
        proc.after_step()
        if ready:
            self.kick()
        if scheduled and self.running:
            self._arm(scheduled[0]._when)

    def __del__(self) -> None:
        # Halted loops are dropped, not closed: closing would make the finalizers of what a
        # crashed process left behind fail on call_soon.
        pass

    def halt(self) -> None:
        """Stop for good: nothing runs on this loop again."""
        self.running = False
        self._ready.clear()
        self._scheduled.clear()


class SimConnection:
    """kgroup's ``Connection`` over one simulated TCP connection."""

    def __init__(self, proc: Process, conn: Conn) -> None:
        self._proc = proc
        self.conn = conn

    @property
    def connected(self) -> bool:
        return self.conn.open

    def start(self, message: Any, timeout_ms: float) -> asyncio.Future[Any]:
        """Send now (the network takes it in this step); the future is the answer."""
        proc = self._proc
        if proc.crashed:
            raise CoordinatorError("process exited")
        return proc.bridge(proc.world.net.request(self.conn, message, timeout_ms))

    async def finish(self, pending: asyncio.Future[Any]) -> Any:
        return await pending

    async def request(self, message: Any, timeout_ms: float) -> Any:
        return await self.finish(self.start(message, timeout_ms))

    def close(self, reason: str = "closed") -> asyncio.Future[Any]:
        self._proc.world.net.close(self.conn, reason)
        fut: asyncio.Future[Any] = self._proc.loop.create_future()
        fut.set_result(None)
        return fut

    async def aclose(self) -> None:
        self.close()


class SimTransport:
    """kgroup's ``Transport`` for one simulated process."""

    def __init__(self, proc: Process) -> None:
        self._proc = proc

    async def connect(self, host: str, port: int) -> SimConnection:
        proc = self._proc
        if proc.crashed:
            raise CoordinatorError("process exited")
        node = int(host.removeprefix("b"))
        timeout = proc.config.request_timeout_ms
        conn = await proc.bridge(proc.world.net.connect(proc, node, timeout))
        return SimConnection(proc, conn)

    async def find_coordinator(self, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
        proc = self._proc
        if proc.crashed:
            raise CoordinatorError("process exited")
        timeout = proc.config.request_timeout_ms
        response: FindCoordinatorResponse = await proc.bridge(
            proc.world.net.find_coordinator(proc, timeout)
        )
        return response

    async def partitions_for(self, topics: Sequence[str]) -> dict[str, int]:
        return {t: n for t, n in self._proc.world.topics.items() if t in topics}

    async def list_topics(self) -> dict[str, int]:
        return dict(self._proc.world.topics)

    async def aclose(self) -> None:
        self._proc.close_connections("transport closed")


class _Listener:
    """The application's rebalance listener (an ItemListener for a GroupProtocol member):
    records holds (invariant 1) and takes a random time in each callback."""

    def __init__(self, proc: Process) -> None:
        self._proc = proc

    def _trace(self, name: str, parts: Iterable[Any]) -> None:
        world = self._proc.world
        if world.tracing:
            world.log(self._proc.holder, f"{name} {sorted(str(tp) for tp in parts)}")

    async def on_partitions_assigned(self, partitions: frozenset[Any]) -> None:
        proc = self._proc
        if proc.crashed:
            return
        world = proc.world
        duration = world.callback_duration()
        self._trace("on_partitions_assigned", partitions)
        generation = proc.member.generation.generation_id
        ids = assigned_topic_ids(proc, partitions) if world.params.kind.consumer_protocol else None
        world.ownership.assigned(proc.holder, partitions, generation, world.now, ids)
        if duration:
            await asyncio.sleep(duration / 1000.0)

    async def on_partitions_revoked(self, partitions: frozenset[Any]) -> None:
        proc = self._proc
        if proc.crashed:
            return
        world = proc.world
        duration = world.callback_duration()
        self._trace("on_partitions_revoked", partitions)
        try:
            if duration:
                await asyncio.sleep(duration / 1000.0)
        finally:  # also when the callback is interrupted (the application closes)
            if not proc.crashed:
                proc.apply_lapsed_lease()
                world.ownership.end(proc.holder, partitions, world.now, "revoked")

    async def on_partitions_lost(self, partitions: frozenset[Any]) -> None:
        proc = self._proc
        if proc.crashed:
            return
        world = proc.world
        duration = world.callback_duration()
        self._trace("on_partitions_lost", partitions)
        proc.apply_lapsed_lease()
        world.ownership.end(proc.holder, partitions, world.now, "lost")
        if duration:
            await asyncio.sleep(duration / 1000.0)


def handoff_on_close(seed: int, holder: str) -> bool:
    """Whether this incarnation closes with the handoff (it matters to cooperative-sticky
    and to consumer-protocol members that leave): half of them, chosen from the seed and
    the holder's name without drawing from the world's random stream, so the other
    choices of a seed stay as they were."""
    return zlib.crc32(f"{seed}/{holder}/handoff".encode()) % 2 == 0


class Process:
    """One incarnation of a member slot: a ``GroupMember`` and the application polling it."""

    def __init__(self, world: World, slot: str, incarnation: int, instance_id: str | None) -> None:
        self.world = world
        self.slot = slot
        self.holder = f"{slot}#{incarnation}"
        self.instance_id = instance_id
        params = world.params
        kind = params.kind
        #: LeaderElection / WorkSharding (GroupProtocol kinds), else None (a consumer).
        self.protocol: LeaderElection | WorkSharding | None = None
        assignors: tuple[str, ...] = ("range",)
        topics: tuple[str, ...] = ()
        if kind.protocol:
            self.protocol = kind.make_protocol(int(slot.removeprefix("m")))
        elif not kind.consumer_protocol:
            assignors = world.slot_assignors[slot]
            topics = tuple(t for t, _ in params.topics)
        self.config = (
            consumer_config(
                params, slot, instance_id, handoff=handoff_on_close(params.seed, self.holder)
            )
            if kind.consumer_protocol
            else GroupConfig(
                bootstrap_servers="b0:9092",
                group_id=GROUP,
                topics=topics,
                assignors=assignors,
                group_instance_id=instance_id,
                session_timeout_ms=params.session_ms,
                heartbeat_interval_ms=params.heartbeat_ms,
                max_poll_interval_ms=params.max_poll_ms,
                request_timeout_ms=params.request_timeout_ms,
                client_id=slot,
                handoff_on_close=handoff_on_close(params.seed, self.holder),
            )
        )
        #: Seen by the world: False once crashed or closed.
        self.alive = True
        #: Crashed: the member is being aborted while the world looks away.
        self.crashed = False
        self.closing = False
        self.conns: list[Conn] = []
        self._deferred: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self._resume_at: float | None = None
        self.paused_until = 0.0
        self.blackholed_until = 0.0
        self.slow_polls = 0
        self.completed_generation = -1
        self.observed_valid_until: float | None = None
        #: Consumer protocol: the application commits what it holds now and then, from a
        #: task of its own (beside poll()), with draws of its own (the world's stay as
        #: they were).
        self._commits = (
            random.Random(f"kgroup-sim-commits-{params.seed}-{self.holder}")
            if kind.consumer_protocol
            else None
        )
        self._committer: asyncio.Task[None] | None = None
        #: ... and reads the committed offsets of partitions it was just given (as
        #: ``GroupConsumer`` does to position them), from another task of its own.
        self._fetches = (
            random.Random(f"kgroup-sim-fetches-{params.seed}-{self.holder}")
            if kind.consumer_protocol
            else None
        )
        self._fetcher: asyncio.Task[None] | None = None
        self._seen: frozenset[Any] = frozenset()
        self.loop = ProcessLoop(self)
        self.member = GroupMember(
            self.config,
            listener=_Listener(self),
            clock=self._clock,
            transport=SimTransport(self),
            protocol=self.protocol,
        )
        self.member.add_event_hook(self._on_event)
        world.log(
            self.holder,
            f"start (instance {instance_id}"
            + (f", assignors {list(assignors)}" if kind.flavor == "upgrade" else "")
            + ")",
        )
        self.app = self.loop.create_task(self._app(), name="sim-app")

    # -- what the world reads ------------------------------------------------------------------

    @property
    def core(self) -> MemberCore:
        core = self.member._core
        if core is None:
            raise AssertionError(f"{self.holder} has not started")
        return core

    @property
    def started(self) -> bool:
        return self.member._core is not None

    @property
    def owned(self) -> frozenset[Any]:
        """What the member holds: TopicPartitions, or item names (GroupProtocol kinds)."""
        return self.member.assignment

    def coordinator_conn(self) -> Conn | None:
        conn = self.member._link.connection_open
        return conn.conn if isinstance(conn, SimConnection) else None

    # -- plumbing ------------------------------------------------------------------------------

    def _clock(self) -> float:
        return self.world.sched.now / 1000.0

    def call_at(self, when: float, fn: Callable[..., None], *args: Any) -> Handle:
        """A network event for this process: dropped once it is gone, held while paused."""
        return self.world.sched.at(when, self._run, fn, args)

    def _run(self, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        if not self.alive:
            return
        if self.paused_until > self.world.now:
            self._deferred.append((fn, args))
            if self._resume_at is None:
                self._resume_at = self.paused_until
                self.world.sched.at(self.paused_until, self._resume)
            return
        fn(*args)

    def _resume(self) -> None:
        self._resume_at = None
        if not self.alive:
            return
        if self.paused_until > self.world.now:
            self._resume_at = self.paused_until
            self.world.sched.at(self.paused_until, self._resume)
            return
        deferred, self._deferred = self._deferred, []
        for fn, args in deferred:
            self._run(fn, args)

    def unpause(self) -> None:
        if self.paused_until > self.world.now:
            self.paused_until = self.world.now
            self.world.sched.at(self.world.now, self._resume)
            self.loop.kick()

    def bridge(self, fut: Future) -> asyncio.Future[Any]:
        """The world's future as an asyncio future of this loop (a ``Failure`` raises
        ``CoordinatorError``, as kgroup's transports report transport failures)."""
        out: asyncio.Future[Any] = self.loop.create_future()

        def done(value: Any) -> None:
            if out.done():
                return
            if isinstance(value, Failure):
                out.set_exception(CoordinatorError(value.reason))
            else:
                out.set_result(value)

        fut.on_done(done)
        return out

    def close_connections(self, reason: str) -> None:
        conns, self.conns = self.conns, []
        for conn in conns:
            self.world.net.close(conn, reason)

    def after_step(self) -> None:
        core = self.member._core
        if core is None:
            return
        # valid_until is None while nothing is held; skip computing it then (hot path).
        if self.world.params.kind.consumer_protocol:
            self.observed_valid_until = core.valid_until
        elif (
            self.member.assignment
            or self.member._shared.releasing
            or core._lease_expired_at is not None
        ):
            self.observed_valid_until = core.valid_until
        else:
            self.observed_valid_until = None

    def retire(self) -> None:
        """The schedule ended: stop the loop; its pending tasks are garbage, not failures."""
        self.alive = False
        self.loop.halt()

    def loop_error(self, context: dict[str, Any]) -> None:
        """Something the loop could not hand to anyone (invariant 3)."""
        if self.crashed or not self.alive:
            return
        exc = context.get("exception")
        if exc is None:
            exc = RuntimeError(context.get("message", "unhandled loop error"))
        self.world.escaped(self, "loop", exc)

    def livelocked(self) -> None:
        from ._world import SimulationFailure

        self.world.fail(
            SimulationFailure(
                "livelock",
                f"{self.holder}'s loop ran {LIVELOCK_STEPS} steps at {self.world.now:.3f} ms "
                "without time moving",
            )
        )
        self.loop.halt()

    def apply_lapsed_lease(self) -> None:
        """Checker side: a hold ends at the lease deadline even if the member has not
        noticed yet (paused, busy in a callback). ``valid_until`` as of the end of the
        previous step is the deadline now."""
        until = self.observed_valid_until
        if until is not None and until < self.world.now:
            self.world.ownership.lease_expired(self.holder, until)

    def _on_event(self, event: str, fields: Any) -> None:
        if self.crashed:
            return
        world = self.world
        if world.tracing:
            detail = " ".join(f"{k}={v}" for k, v in fields.items() if k != "group")
            world.log(self.holder, f"{event} {detail}")
        if event == "member.handoff_done":
            world.count_event(f"handoff_{fields['outcome']}")
        if event == "member.handoff_waiting":
            world.count_event("handoff_waiting")
        if event == "member.lease_expired":
            world.count_event("lease_expired")
            world.ownership.lease_expired(self.holder, fields["deadline"])

    # -- the application -----------------------------------------------------------------------

    async def _app(self) -> None:
        world = self.world
        member = self.member
        heartbeat_ms = self.config.heartbeat_interval_ms
        try:
            await member.start()
            while True:
                try:
                    await member.poll(world.rng.uniform(0, heartbeat_ms) / 1000.0)
                except FencedInstanceId as fatal:
                    if self.instance_id is None:
                        raise
                    # Documented fatal. Two live processes never share an instance id here,
                    # so it is this slot's own older JoinGroup (of this or a dead
                    # incarnation) reaching the broker late, or a coordinator reload that
                    # maps the instance id to an older member id (a replacement made while
                    # the group was rebalancing is not persisted). Java fails the same way.
                    # The application restarts the member.
                    world.count_event("fenced_single_process")
                    world.log(self.holder, f"fatal {fatal!r}: the application restarts")
                    world.sched.at(world.now, world.restart_process, self)
                    return
                except InconsistentGroupProtocol as fatal:
                    upgrade = world.params.kind.upgrade
                    if upgrade is None:
                        raise
                    # Documented fatal, in a rolling upgrade: one that skipped the bridge
                    # list (spec §7.6), or any other after a coordinator reload, which
                    # remembers only each member's selected protocol (Kafka's group record
                    # keeps one subscription per member), so a range-only member is refused
                    # by a reloaded group that selected cooperative-sticky. The operator
                    # restarts the member with the bridge list, which has a name in common
                    # with every configuration of the upgrade.
                    world.count_event(
                        "inconsistent_skipped_bridge"
                        if upgrade == "skipped-bridge"
                        else "inconsistent_after_reload"
                    )
                    world.log(self.holder, f"fatal {fatal!r}: restarted with the bridge list")
                    world.sched.at(world.now, world.restart_process, self, BRIDGE)
                    return
                if member.state is MemberState.STABLE and not member.rebalance_pending:
                    self.completed_generation = member.generation.generation_id
                    if world.tracing:
                        world.log(
                            self.holder,
                            f"stable in generation {self.completed_generation}: "
                            f"{sorted(str(tp) for tp in member.assignment)}",
                        )
                self._maybe_commit()
                self._maybe_fetch()
                if self.slow_polls > 0:
                    self.slow_polls -= 1
                    work = self.config.max_poll_interval_ms * world.rng.uniform(1.0, 1.5)
                    world.echo(world.now + work)
                else:
                    work = world.rng.uniform(0, heartbeat_ms)
                await asyncio.sleep(work / 1000.0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # invariant 3: nothing else escapes a member
            if not self.crashed:
                world.escaped(self, "app", exc)

    # -- offsets -------------------------------------------------------------------------------

    #: How likely the application starts a commit after a poll (one at a time).
    COMMIT_PROBABILITY = 0.3

    def _maybe_commit(self) -> None:
        rng = self._commits
        if rng is None or (self._committer is not None and not self._committer.done()):
            return
        held = self.member.assignment
        if not held or rng.random() >= self.COMMIT_PROBABILITY:
            return
        offset = rng.randint(0, 1_000_000)
        offsets = dict.fromkeys(sorted(held, key=str), offset)
        self._committer = self.loop.create_task(self._commit(offsets), name="sim-commit")

    async def _commit(self, offsets: dict[Any, int]) -> None:
        """``commit_offsets`` of what the member held when it started, from its own task:
        a poll() may revoke some of it meanwhile. What the broker takes is checked by the
        world (``World.commit_taken``); the documented failures are counted."""
        failures = (CommitFailed, OffsetsError, RebalanceInProgress, FencedInstanceId)
        done, _ = await self._offsets_call("commit", self.member.commit_offsets(offsets), failures)
        if done:
            self.world.count_event("commit_ok")

    async def _offsets_call(
        self, what: str, call: Awaitable[_T], failures: tuple[type[Exception], ...]
    ) -> tuple[bool, _T | None]:
        """Await an offsets call of the application's (``what``: ``commit`` or ``fetch``):
        ``(True, its value)``; ``(False, None)`` after one of the documented ``failures``,
        counted as ``<what>_failed``; anything else escapes the member (invariant 3)."""
        world = self.world
        try:
            return True, await call
        except failures as exc:
            world.count_event(f"{what}_failed")
            if world.tracing:
                world.log(self.holder, f"{what} failed: {exc!r}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # invariant 3
            if not self.crashed:
                world.escaped(self, what, exc)
        return False, None

    #: How likely the application reads the committed offsets of partitions it was just
    #: given (one read at a time; partitions given meanwhile are not read).
    FETCH_PROBABILITY = 0.5

    def _maybe_fetch(self) -> None:
        rng = self._fetches
        if rng is None:
            return
        held = self.member.assignment
        given, self._seen = held - self._seen, held
        if not given or (self._fetcher is not None and not self._fetcher.done()):
            return
        if rng.random() < self.FETCH_PROBABILITY:
            partitions = sorted(given, key=str)
            self._fetcher = self.loop.create_task(self._fetch(partitions), name="sim-fetch")

    async def _fetch(self, partitions: list[Any]) -> None:
        """``fetch_committed`` of partitions just given, from its own task; what the broker
        is asked is checked by the world (``World.fetch_asked``)."""
        call = self.member.fetch_committed(partitions)
        done, found = await self._offsets_call("fetch", call, (OffsetsError, CommitFailed))
        if done:
            assert found is not None
            self.world.count_event("fetch_ok" if any(found.values()) else "fetch_nothing")

    async def _stop_committing(self) -> None:
        """Cancel the application's commit and fetch tasks, if they run."""
        for task in (self._committer, self._fetcher):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    # -- ends ----------------------------------------------------------------------------------

    def crash(self) -> None:
        """The process dies: no callback, no LeaveGroup. Its holds end now, or at its lease
        deadline if that passed first (it can no longer notice)."""
        world = self.world
        core = self.member._core
        valid_until = None if core is None else core.valid_until
        if valid_until is not None and valid_until < world.now:
            world.ownership.lease_expired(self.holder, valid_until)
        world.ownership.end_all(self.holder, world.now, "died")
        self.alive = False
        self.crashed = True
        self.paused_until = 0.0
        self.close_connections("process exited")
        world.log(self.holder, "crashed")
        # Clean up what the process left (its tasks), with the world looking away.
        self.app.cancel()
        self.loop.create_task(self._reap(), name="sim-reap")

    async def _reap(self) -> None:
        try:
            await self._stop_committing()
            await self.member.abort()
        finally:
            self.loop.halt()

    def close(self) -> Future:
        """``GroupMember.close()`` from the application; the future is set when it is done."""
        done = Future()
        self.closing = True
        self.loop.create_task(self._close(done), name="sim-close")
        return done

    async def _close(self, done: Future) -> None:
        world = self.world
        try:
            self.app.cancel()
            await asyncio.gather(self.app, return_exceptions=True)
            await self._stop_committing()
            await self.member.close()
        except Exception as exc:
            world.escaped(self, "close", exc)
        finally:
            self.apply_lapsed_lease()
            world.ownership.end_all(self.holder, world.now, "closed")
            world.log(self.holder, "closed")
            self.alive = False
            self.close_connections("process exited")
            self.loop.halt()
            done.set(None)
