"""GroupMember: the asyncio runtime around the sans-I/O :class:`MemberCore`.

What this module owns, and nothing else: the tasks, the connections and the Events.

Tasks (all created through :class:`_TaskOwner`, which ``close()`` cancels and awaits):

- the **heartbeat task** (``_heartbeat_loop``), started on open and alive until close. It
  asks the core what to do and waits on ``_hb_wake`` (an ``asyncio.Event``) with a timeout
  until the next deadline. Woken by: ``poll()`` when a heartbeat is due, the join chain when
  heartbeats are enabled, a coordinator found, close.
- the **join chain task** (``_run_chain``): one JoinGroup->SyncGroup round trip. It is
  started by ``poll()`` but owned by the member, and ``poll()`` only *waits* for it: a
  cancelled or timed-out ``poll()`` never cancels an in-flight JoinGroup (spec §6.1); the
  next ``poll()`` waits for the same chain.
- the **coordinator lookup task** (``_lookup_once``): at most one at a time, shared by both
  drivers.

User callbacks run only in ``poll()`` and ``close()``, in the caller's task (KIP-62).

Isolated mode (``GroupConfig.isolate_heartbeat``): the heartbeat, lease, lookup and join
chain tasks, the coordinator connection and the bootstrap ``Cluster`` live on a private
event loop in a background thread (:class:`LoopThread`); ``poll()``, ``close()`` and the
callbacks stay on the application's loop. The two loops wake each other with thread-safe
``Event`` sets, and every synchronous call into the core (and the core events it fires) runs
under ``_lock``, never held across an ``await``. In the default mode both "loops" are the
application's loop and every hop is a direct call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import functools
import inspect
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .._config import GroupConfig
from .._core._consumer_protocol import TopicPartition
from .._core._embedding import ConsumerEmbedding, ListenerCall
from .._core._member import (
    AwaitJoin,
    AwaitLeaseProof,
    CompleteJoin,
    ComputeAssignment,
    FindCoordinator,
    HeartbeatDisabled,
    HeartbeatFindCoordinator,
    HeartbeatWait,
    Idle,
    MemberCore,
    PollTimeoutLeave,
    PrepareJoin,
    RaiseFatal,
    SendHeartbeat,
    SendJoinGroup,
    SendSyncGroup,
    Sleep,
)
from .._core._messages import LeaveGroupRequest, LeaveGroupResponse
from .._core._state import Coordinator, Generation, MemberState
from .._core._timers import HeartbeatStats
from .._errors import (
    AssignmentError,
    CoordinatorError,
    ErrorCode,
    KGroupError,
    ListenerError,
    RemoteProtocolError,
    UnexpectedBrokerError,
    UsageError,
)
from .._listener import RebalanceListener
from .._log import log_core_event, logger
from ._connection import BrokerConnection, Cluster
from ._loop_thread import LoopThread, set_event, task_future
from ._security import connection_kwargs

__all__ = ["GroupMember"]

_T = TypeVar("_T")

#: What close() keeps of its budget after the LeaveGroup's own deadline (ms).
_CLOSE_MARGIN_MS = 100.0

#: Heartbeat answers that kept the session alive (spec §4.4).
_ALIVE_CODES = frozenset({ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS})


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _consume(fut: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned future's outcome so that asyncio does not warn about it."""
    if not fut.cancelled():
        fut.exception()


def _require_asyncio() -> asyncio.AbstractEventLoop:
    """The running asyncio loop, or a UsageError that says what runs instead."""
    loop = _running_loop()
    if loop is not None:
        return loop
    library = None
    try:
        import sniffio

        library = sniffio.current_async_library()
    except Exception:  # sniffio absent, or no async library detected
        library = None
    if library is not None and library != "asyncio":
        raise UsageError(
            f"kgroup needs asyncio, but this code runs under {library}: aiokafka, which "
            "kgroup uses for its connections, works on asyncio only. Under anyio use "
            "anyio.run(main, backend='asyncio')"
        )
    raise UsageError(
        "kgroup needs asyncio and found no running asyncio event loop: call it from a "
        "coroutine run by asyncio.run() (or anyio.run(main, backend='asyncio'))"
    )


class _Lifecycle(enum.Enum):
    UNOPENED = "unopened"  # constructed; nothing started
    OPEN = "open"  # tasks running
    CLOSING = "closing"  # close() in progress
    CLOSED = "closed"  # everything stopped; the member cannot be reopened


class _TaskOwner:
    """Owns every task the member starts; ``aclose`` cancels and awaits them all."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def aclose(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


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
    itself is not blocked for longer than ``session_timeout_ms``.

    Parameters:
    - ``config``: a :class:`GroupConfig`.
    - ``listener``: a :class:`RebalanceListener` (any subset of its methods, sync or async).
    - ``clock``: a monotonic clock in seconds (tests); default: the event loop's ``time()``.
    """

    def __init__(
        self,
        config: GroupConfig,
        *,
        listener: RebalanceListener | object | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not isinstance(config, GroupConfig):
            raise UsageError(f"config must be a GroupConfig, got {type(config).__name__}")
        self._config = config
        self._listener = listener
        self._clock = clock
        self._embedding = ConsumerEmbedding(config.topics, config.assignors, rack_id=config.rack_id)
        self._lifecycle = _Lifecycle.UNOPENED
        self._core: MemberCore | None = None
        self._tasks = _TaskOwner()
        self._hb_wake = asyncio.Event()
        self._lease_wake = asyncio.Event()
        self._releasing: frozenset[TopicPartition] = frozenset()
        #: Partitions whose revoke callback was cancelled: reported lost at the next chance.
        self._interrupted: frozenset[TopicPartition] = frozenset()
        self._poll_wake = asyncio.Event()
        self._closed_event = asyncio.Event()
        #: The join chain and lookup tasks live on the coordinator loop (which is the
        #: application's loop in the default mode).
        self._chain: asyncio.Task[None] | None = None
        #: Isolated mode: the queued start of the join chain (done once the chain exists).
        self._chain_start: concurrent.futures.Future[Any] | None = None
        self._lookup: asyncio.Task[None] | None = None
        #: Serialises every synchronous access to the core (two threads in isolated mode).
        self._lock = threading.RLock()
        self._hb_stats = HeartbeatStats(stall_warn_ms=config.loop_stall_warn_ms)
        #: Isolated mode: the coordinator side's own loop and thread (None otherwise).
        self._loop_thread: LoopThread | None = None
        self._app_loop: asyncio.AbstractEventLoop | None = None
        self._coord_loop: asyncio.AbstractEventLoop | None = None
        self._abandon_task: asyncio.Task[None] | None = None
        #: TLS/SASL arguments for every connection (secrets stay inside aiokafka).
        self._security = connection_kwargs(config)
        self._cluster = Cluster(
            config.brokers,
            client_id=config.client_id,
            request_timeout_ms=config.request_timeout_ms,
            security=self._security,
        )
        self._coord_conn: BrokerConnection | None = None
        self._coord_for: Coordinator | None = None
        self._coord_lock = asyncio.Lock()
        self._closing_conns: set[asyncio.Future[Any]] = set()
        #: Called with (event name, fields) for every core event (kgroup.testing uses it),
        #: always on the application's loop (in isolated mode: soon after the event).
        self._observers: list[Callable[[str, dict[str, Any]], None]] = []

    # -- public state ----------------------------------------------------------------------------

    @property
    def config(self) -> GroupConfig:
        return self._config

    @property
    def state(self) -> MemberState:
        return self._core.state if self._core is not None else MemberState.UNJOINED

    @property
    def generation(self) -> Generation:
        return self._core.generation if self._core is not None else Generation(-1, "", None)

    @property
    def member_id(self) -> str:
        return self.generation.member_id

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member owns now (as of its last completed rebalance)."""
        return self._embedding.owned

    @property
    def valid_until(self) -> float | None:
        """Until when (seconds, on the event loop's clock) kgroup vouches for
        :attr:`assignment`; None when nothing is held. Past it the broker may have given the
        partitions to another member: stop working on them. kgroup computes it from the
        send times of the heartbeats the coordinator acknowledged plus the session timeout,
        bounded by the rebalance timeout and the poll deadline (README, "The lease")."""
        core = self._core
        if core is None:
            return None
        with self._lock:
            deadline = core.valid_until
        return None if deadline is None else deadline / 1000.0

    @property
    def rebalance_pending(self) -> bool:
        """True when the next ``poll()`` has rebalance work to do: a rejoin was requested
        (the heartbeat saw a rebalance, the lease ran out, ...) or the member is not STABLE.
        A fetch loop can use it to stop waiting for records and poll."""
        core = self._core
        if core is None:
            return False
        with self._lock:
            return bool(core.rejoin_needed or core.state is not MemberState.STABLE)

    @property
    def is_leader(self) -> bool:
        with self._lock:
            return self._core is not None and self._core.is_leader

    @property
    def closed(self) -> bool:
        return self._lifecycle is _Lifecycle.CLOSED

    def stats(self) -> dict[str, Any]:
        """A snapshot for observability (a plain dict; times in ms):

        - ``state``, ``generation``, ``member_id``, ``assignment`` (sorted ``"topic-p"``
          strings), ``isolated`` (the coordinator side runs on its own thread);
        - ``rebalances``, ``last_rebalance_ms``, ``last_heartbeat_age_ms``;
        - ``heartbeats_sent``, ``heartbeats_acknowledged`` (answered with no error or
          REBALANCE_IN_PROGRESS), ``heartbeats_failed`` (error answer or no answer),
          ``heartbeats_late`` (ran more than ``loop_stall_warn_ms`` after due);
        - ``heartbeat_lateness_ms`` and ``heartbeat_rtt_ms``: ``{"p50", "p99", "max"}`` over
          the last 1024 samples (None values when empty); ``last_heartbeat_lateness_ms``;
        - ``lease_remaining_ms``: how long the assignment is still vouched for (None when
          nothing is held; 0 once the lease lapsed).
        """
        now = self._now()
        hb = self._hb_stats
        with self._lock:
            core = self._core
            received = None if core is None else core.timers.last_heartbeat_received
            valid_until = None if core is None else core.valid_until
            generation = self.generation
            return {
                "state": self.state.name,
                "generation": generation.generation_id,
                "member_id": generation.member_id,
                "assignment": sorted(str(tp) for tp in self._embedding.owned),
                "isolated": self._config.isolate_heartbeat,
                "rebalances": 0 if core is None else core.rebalances,
                "last_rebalance_ms": None if core is None else core.last_rebalance_ms,
                "last_heartbeat_age_ms": None if received is None else now - received,
                "heartbeats_sent": hb.sent,
                "heartbeats_acknowledged": hb.acknowledged,
                "heartbeats_failed": hb.failed,
                "heartbeats_late": hb.late,
                "heartbeat_lateness_ms": hb.lateness.summary(),
                "heartbeat_rtt_ms": hb.rtt.summary(),
                "last_heartbeat_lateness_ms": hb.last_lateness_ms,
                "lease_remaining_ms": None if valid_until is None else max(0.0, valid_until - now),
            }

    def __repr__(self) -> str:
        return (
            f"<GroupMember group={self._config.group_id!r} state={self.state.name} "
            f"generation={self.generation.generation_id} member_id={self.member_id!r}>"
        )

    # -- lifecycle -------------------------------------------------------------------------------

    def _now(self) -> float:
        clock = self._clock
        if clock is None:
            try:
                clock = asyncio.get_running_loop().time
            except RuntimeError:  # stats() from a thread without a loop: the same clock
                clock = time.monotonic
        return clock() * 1000.0

    async def __aenter__(self) -> GroupMember:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the heartbeat task. Joining happens in the first ``poll()``."""
        loop = _require_asyncio()
        if self._lifecycle is not _Lifecycle.UNOPENED:
            raise UsageError(f"GroupMember cannot be started: it is {self._lifecycle.value}")
        self._app_loop = self._coord_loop = loop
        if self._config.isolate_heartbeat:
            thread = LoopThread(f"kgroup-coordinator-{self._config.group_id}")
            thread.start()
            self._loop_thread, self._coord_loop = thread, thread.loop
        self._core = MemberCore(
            self._config,
            protocol_type=self._embedding.protocol_type,
            protocols=self._embedding.metadata,
            now=self._now(),
            observer=self._on_core_event,
            holds_assignment=lambda: bool(self._embedding.owned or self._releasing),
        )
        self._lifecycle = _Lifecycle.OPEN
        if self._loop_thread is None:
            self._spawn_coordinator_tasks()
        else:
            await asyncio.wrap_future(self._loop_thread.call(self._spawn_coordinator_tasks))
            logger.info(
                "member.isolated",
                group=self._config.group_id,
                thread=f"kgroup-coordinator-{self._config.group_id}",
            )

    def _spawn_coordinator_tasks(self) -> None:
        """On the coordinator loop: start the heartbeat and lease tasks."""
        self._tasks.spawn(self._heartbeat_loop(), "kgroup-heartbeat")
        self._tasks.spawn(self._lease_loop(), "kgroup-lease")

    def _check_open(self) -> MemberCore:
        if self._lifecycle is not _Lifecycle.OPEN or self._core is None:
            raise UsageError(
                f"GroupMember is {self._lifecycle.value}: use 'async with GroupMember(...)' "
                "or await start() first"
                if self._lifecycle is _Lifecycle.UNOPENED
                else f"GroupMember is {self._lifecycle.value}"
            )
        return self._core

    def _on_core_event(self, event: str, **fields: Any) -> None:
        # Runs inside a core call, under ``_lock``, on either loop's thread.
        log_core_event(event, **fields)
        self._wake_lease()  # any change may move the lease deadline
        if self._observers:
            app = self._app_loop
            if self._loop_thread is None or app is None or _running_loop() is app:
                for observer in self._observers:
                    observer(event, fields)
            else:  # observers always run on the application's loop
                with contextlib.suppress(RuntimeError):
                    for observer in self._observers:
                        app.call_soon_threadsafe(observer, event, fields)
        if event in (
            "member.rejoin_requested",
            "member.fatal_error",
            "member.state_changed",
            "member.lease_expired",
            "member.lease_renewed",
        ):
            self._wake_poll()
        if event == "member.synced":
            # The lease may need a renewal heartbeat now (a join that took most of the
            # session timeout): let the heartbeat task recompute its wait.
            self._wake_hb()
        if event == "member.coordinator_lost":
            # Spec §4.0.3: the core forgot the coordinator first; now drop the connection so
            # every request in flight on it fails at once.
            self._on_coordinator_loop(self._drop_coordinator_connection)

    # -- crossing between the application's loop and the coordinator loop -----------------------

    def _wake_hb(self) -> None:
        if self._loop_thread is None:
            self._hb_wake.set()
        elif self._coord_loop is not None:
            set_event(self._hb_wake, self._coord_loop)

    def _wake_lease(self) -> None:
        if self._loop_thread is None:
            self._lease_wake.set()
        elif self._coord_loop is not None:
            set_event(self._lease_wake, self._coord_loop)

    def _wake_poll(self) -> None:
        if self._loop_thread is None:
            self._poll_wake.set()
        elif self._app_loop is not None:
            set_event(self._poll_wake, self._app_loop)

    def _on_coordinator_loop(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the coordinator loop: now if this is it, else soon."""
        thread = self._loop_thread
        if thread is None or _running_loop() is thread.loop:
            fn()
        else:
            thread.call(fn)

    async def _on_coordinator(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Await ``coro`` on the coordinator loop. Cancelling the caller cancels it there."""
        thread = self._loop_thread
        if thread is None:
            return await coro
        try:
            return await asyncio.wrap_future(thread.submit(coro))
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise  # the caller was cancelled (and so was the coroutine over there)
            # Cancelled over there, not here: the coordinator loop is shutting down.
            raise CoordinatorError("member is closed: the coordinator loop stopped") from None

    async def _wait_coordinator_task(
        self,
        get: Callable[[], asyncio.Task[Any] | None],
        deadline: float | None,
        *,
        starts_chain: bool = False,
    ) -> None:
        """Wait (never cancelling it) for the coordinator-loop task ``get()`` returns (run
        on that loop: it may start the task), up to ``deadline``. ``get`` runs even if the
        caller is cancelled first (``LoopThread.call``)."""
        thread = self._loop_thread
        if thread is None:
            task = get()
            if task is not None:
                await self._await_task(task, deadline)
            return

        def mirror() -> concurrent.futures.Future[Any] | None:
            task = get()
            return None if task is None else task_future(task)

        started = thread.call(mirror)
        if starts_chain:
            self._chain_start = started
        # Shielded: a cancelled caller must not mark ``started`` done before ``get`` ran
        # (AwaitJoin reads it to know whether the chain's start is still queued).
        hop = asyncio.wrap_future(started)
        hop.add_done_callback(_consume)
        try:
            done = await asyncio.shield(hop)
        except CoordinatorError:
            if self._lifecycle is _Lifecycle.OPEN:
                raise
            return  # closing: the loop is gone
        if done is None:
            return
        waiter = asyncio.wrap_future(done)
        waiter.add_done_callback(_consume)
        timeout = None if deadline is None else max(0.0, (deadline - self._now()) / 1000.0)
        await asyncio.wait({waiter}, timeout=timeout)  # never cancels the task

    # -- connections -----------------------------------------------------------------------------

    def _drop_coordinator_connection(self) -> None:
        conn, self._coord_conn, self._coord_for = self._coord_conn, None, None
        if conn is not None:
            fut = conn.close()
            self._closing_conns.add(fut)
            fut.add_done_callback(self._closing_conns.discard)

    async def _coordinator_connection(self) -> BrokerConnection:
        core = self._core
        if core is None or self._lifecycle is _Lifecycle.CLOSED:
            raise CoordinatorError("member is closed")
        async with self._coord_lock:
            coord = core.coordinator
            if coord is None:
                raise CoordinatorError("coordinator unknown")
            conn = self._coord_conn
            if conn is not None and self._coord_for is coord and conn.connected:
                return conn
            if conn is not None:
                self._drop_coordinator_connection()
            try:
                conn = await BrokerConnection.open(
                    coord.host,
                    coord.port,
                    client_id=self._config.client_id,
                    timeout_ms=self._config.request_timeout_ms,
                    security=self._security,
                )
            except CoordinatorError as exc:
                with self._lock:
                    if core.coordinator is coord:
                        core.on_coordinator_unreachable(self._now(), str(exc))
                raise
            if core.coordinator is not coord or self.closed:
                await conn.aclose()
                raise CoordinatorError("coordinator changed while connecting")
            self._coord_conn, self._coord_for = conn, coord
            return conn

    def _core_call(self, fn: Callable[[MemberCore], _T]) -> _T:
        """Run ``fn`` on the open member's core, under the core lock. Code outside this
        module (offsets, the records consumer) reads and changes the core only through
        here: in isolated mode the coordinator thread uses the core at the same time.
        ``fn`` must be synchronous and quick (it may not await)."""
        with self._lock:
            return fn(self._check_open())

    async def _coordinator_request(self, request: Any, timeout_ms: int) -> Any:
        """Send one request to the group coordinator and return its response value.

        The seam for request kinds the core does not drive itself (OffsetCommit, OffsetFetch):
        it raises ``CoordinatorError`` when the coordinator is unknown or unreachable and
        ``RemoteProtocolError`` for a malformed answer (the connection is dropped then).
        """
        if self._loop_thread is not None:
            # Isolated mode: the coordinator connection belongs to the coordinator loop.
            # Cancelling the caller cancels the request there (asyncio.wrap_future).
            return await self._on_coordinator(self._coordinator_request_here(request, timeout_ms))
        return await self._coordinator_request_here(request, timeout_ms)

    async def _coordinator_request_here(self, request: Any, timeout_ms: int) -> Any:
        conn = await self._coordinator_connection()
        return await conn.request(request, timeout_ms)

    def _ensure_lookup(self) -> asyncio.Task[None]:
        if self._lookup is None or self._lookup.done():
            self._lookup = self._tasks.spawn(self._lookup_once(), "kgroup-find-coordinator")
        return self._lookup

    async def _lookup_once(self) -> None:
        core = self._check_open()
        with self._lock:
            request = core.find_coordinator_request()
        try:
            response = await self._cluster.find_coordinator(request)
        except (CoordinatorError, RemoteProtocolError) as exc:
            with self._lock:
                core.on_find_coordinator_failed(self._now(), str(exc))
            return
        except KGroupError as exc:
            with self._lock:
                core.record_fatal(exc)
            return
        with self._lock:
            core.on_find_coordinator_response(response, self._now())
            found = core.coordinator is not None
        if found:
            self._wake_hb()

    # -- the heartbeat task ----------------------------------------------------------------------

    async def _wait(self, until: float | None) -> None:
        """Wait for ``_hb_wake`` until ``until`` (ms, the member's clock) or forever. In
        isolated mode at most one heartbeat interval, so the task notices an application
        loop that closed without close() (``_abandoned``)."""
        timeout = None if until is None else max(0.0, (until - self._now()) / 1000.0)
        if self._loop_thread is not None:
            cap = self._config.heartbeat_interval_ms / 1000.0
            timeout = cap if timeout is None else min(timeout, cap)
        try:
            await asyncio.wait_for(self._hb_wake.wait(), timeout)
        except TimeoutError:
            pass

    async def _heartbeat_loop(self) -> None:
        core = self._check_open()
        stats = self._hb_stats
        try:
            while self._lifecycle is _Lifecycle.OPEN:
                if self._abandoned():
                    return
                self._hb_wake.clear()
                now = self._now()
                with self._lock:
                    # First: did this run start late for a heartbeat that was due?
                    due = stats.due
                    lateness = stats.woke(now)
                    action = core.heartbeat_action(now)
                    if isinstance(action, HeartbeatWait):
                        stats.waiting(core.timers.heartbeat.deadline, now)
                    else:
                        stats.idle()
                if lateness is not None and due is not None and stats.is_late(lateness):
                    self._log_late(due, lateness)
                match action:
                    case HeartbeatDisabled(until=until):
                        await self._wait(until)
                    case HeartbeatFindCoordinator(until=until):
                        with self._lock:
                            retry_at = core.find_coordinator_retry_at()
                        if self._now() >= retry_at:
                            self._ensure_lookup()  # honour the lookup's exponential backoff
                        await self._wait(until)
                    case HeartbeatWait(until=until):
                        await self._wait(until)
                    case SendHeartbeat():
                        await self._send_heartbeat(core, action, now)
                    case PollTimeoutLeave(leave=leave):
                        logger.warning(
                            "member.poll_timeout_left",
                            group=self._config.group_id,
                            sent_leave_group=leave is not None,
                        )
                        if leave is not None:
                            await self._send_leave(leave)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in kgroup: surface it, never lose it silently
            logger.exception("member.heartbeat_task_crashed", group=self._config.group_id)
            with self._lock:
                core.record_fatal(
                    UnexpectedBrokerError(
                        f"heartbeat task crashed: {exc!r}", group_id=self._config.group_id
                    )
                )

    def _abandoned(self) -> bool:
        """Isolated mode: the application's loop closed without ``close()``. Then nobody
        will poll or close this member: stop heartbeating, close the connections and stop
        the coordinator thread instead of heartbeating until the process exits. (The group
        notices when the session times out, as after a crash.)"""
        app, thread = self._app_loop, self._loop_thread
        if thread is None or app is None or not app.is_closed():
            return False
        logger.warning(
            "member.abandoned",
            group=self._config.group_id,
            member_id=self.member_id,
            reason="the application's event loop closed without close() or abort()",
        )
        self._lifecycle = _Lifecycle.CLOSING

        async def stop() -> None:
            try:
                await self._shutdown_coordinator_side()
            finally:
                thread.stop_soon()
                self._lifecycle = _Lifecycle.CLOSED

        # Not owned by _tasks (it cancels them); the loop thread cancels/awaits it at stop.
        self._abandon_task = asyncio.get_running_loop().create_task(stop(), name="kgroup-abandon")
        return True

    def _log_late(self, due: float, lateness: float) -> None:
        generation = self.generation
        logger.warning(
            "heartbeat.late",
            group=self._config.group_id,
            member_id=generation.member_id,
            generation=generation.generation_id,
            lag_ms=round(lateness, 1),
            due=round(due, 1),
            threshold_ms=self._config.loop_stall_warn_ms,
            isolated=self._loop_thread is not None,
        )

    async def _lease_loop(self) -> None:
        """Check the member's lease at its deadline, even while the heartbeat task waits
        for an answer: a member cut off from its coordinator must stop trusting its
        assignment on time (``member.lease_expired``; the next poll() reports it lost)."""
        core = self._check_open()
        while self._lifecycle is _Lifecycle.OPEN:
            self._lease_wake.clear()
            with self._lock:
                expired = core.check_lease(self._now())
                until = None if expired else core.valid_until
            timeout = None if until is None else max(0.0, (until - self._now()) / 1000.0)
            try:
                await asyncio.wait_for(self._lease_wake.wait(), timeout)
            except TimeoutError:
                pass

    async def _send_heartbeat(self, core: MemberCore, action: SendHeartbeat, sent: float) -> None:
        stats = self._hb_stats
        with self._lock:
            stats.sending()
        try:
            conn = await self._coordinator_connection()
            response = await conn.request(action.request, action.timeout_ms)
        except (CoordinatorError, RemoteProtocolError) as exc:
            with self._lock:
                stats.lost()
                core.on_heartbeat_failed(self._now(), str(exc))
            return
        except KGroupError as exc:
            with self._lock:
                stats.lost()
                core.timers.failed(self._now())
                core.record_fatal(exc)
            return
        now = self._now()
        with self._lock:
            stats.answered(sent, now, ok=response.error_code in _ALIVE_CODES)
            core.on_heartbeat_response(action.generation, response, now)

    async def _send_leave(self, leave: LeaveGroupRequest, timeout_ms: float | None = None) -> None:
        """Best effort: sent once, never retried; errors are only logged (§4.5). ``timeout_ms``
        (default ``request_timeout_ms``): close() passes what is left of its budget, so a
        hung answer is reported as ``member.leave_group_failed`` naming the request and the
        broker, before close()'s own deadline."""
        try:
            conn = await self._coordinator_connection()
            response: LeaveGroupResponse = await conn.request(
                leave, self._config.request_timeout_ms if timeout_ms is None else timeout_ms
            )
        except KGroupError as exc:
            logger.info("member.leave_group_failed", group=leave.group_id, error=str(exc))
            return
        logger.info(
            "member.left_group",
            group=leave.group_id,
            member_id=leave.member_id,
            error_code=response.effective_error,
        )

    # -- the join chain task ---------------------------------------------------------------------

    async def _run_chain(self, core: MemberCore, action: SendJoinGroup) -> None:
        """JoinGroup, then (leader) assignment, then SyncGroup; every outcome reported to
        the core, which decides what happens next."""
        lock = self._lock
        try:
            conn = await self._coordinator_connection()
            join = await conn.request(action.request, action.timeout_ms)
            with lock:
                step = core.on_join_response(join, self._now())
                enabled = core.heartbeat_enabled
            if enabled:
                self._wake_hb()
            if isinstance(step, ComputeAssignment):
                topics = self._embedding.metadata_topics(step.members)
                counts = await self._cluster.partitions_for(topics)
                assignments = self._embedding.assign(step.protocol_name, step.members, counts)
                with lock:
                    step = core.assignment_computed(assignments, now=self._now())
            if isinstance(step, SendSyncGroup):
                conn = await self._coordinator_connection()
                sync = await conn.request(step.request, step.timeout_ms)
                with lock:
                    core.on_sync_response(sync, self._now())
        except (CoordinatorError, RemoteProtocolError) as exc:
            with lock:
                core.on_join_failed(self._now(), str(exc))
        except KGroupError as exc:
            with lock:
                core.chain_failed_fatal(exc)

    # -- poll ------------------------------------------------------------------------------------

    async def _await_task(self, task: asyncio.Task[Any], deadline: float | None) -> None:
        timeout = None if deadline is None else max(0.0, (deadline - self._now()) / 1000.0)
        await asyncio.wait({task}, timeout=timeout)  # never cancels the task

    async def _sleep_until(self, until: float, deadline: float | None) -> None:
        target = until if deadline is None else min(until, deadline)
        timeout = max(0.0, (target - self._now()) / 1000.0)
        try:
            await asyncio.wait_for(self._closed_event.wait(), timeout)
        except TimeoutError:
            pass

    async def _run_calls(
        self, calls: tuple[ListenerCall, ...], errors: list[ListenerError]
    ) -> None:
        """Run listener callbacks in order, in this task. A raising callback is logged and
        collected; the rest still run (membership stays consistent)."""
        # Partitions being revoked are still held until their callback returns (the
        # application may commit in it): the lease covers them until then.
        if self._interrupted:
            # A revoke callback was cancelled part-way (poll() cancelled, e.g. on SIGTERM):
            # the application never heard the end of it, and its commit may not have gone
            # out. Report those partitions as lost first: they are no longer this member's.
            calls = (ListenerCall("on_partitions_lost", self._interrupted), *calls)
            self._interrupted = frozenset()
        self._releasing = frozenset().union(
            *(c.partitions for c in calls if c.callback == "on_partitions_revoked")
        )
        try:
            await self._run_calls_in_order(calls, errors)
        except asyncio.CancelledError:
            self._interrupted = self._releasing
            raise
        finally:
            self._releasing = frozenset()

    async def _run_calls_in_order(
        self, calls: tuple[ListenerCall, ...], errors: list[ListenerError]
    ) -> None:
        for call in calls:
            logger.info(
                "member." + call.callback.removeprefix("on_"),
                group=self._config.group_id,
                member_id=self.member_id,
                generation=self.generation.generation_id,
                partitions=sorted(str(tp) for tp in call.partitions),
            )
            method = getattr(self._listener, call.callback, None)
            if method is None:
                continue
            try:
                result = method(frozenset(call.partitions))
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.exception(
                    "member.listener_error",
                    group=self._config.group_id,
                    callback=call.callback,
                    error=repr(exc),
                )
                error = ListenerError(call.callback, exc)
                error.__cause__ = exc
                errors.append(error)
            if call.callback == "on_partitions_revoked":
                self._releasing -= call.partitions  # released: its callback has returned

    async def poll(self, timeout: float | None = None) -> frozenset[TopicPartition]:
        """Keep the membership alive; return the assignment when it changes or at timeout.

        Runs any pending rebalance in this task (listener callbacks included) and returns as
        soon as one completes. When the member is stable with nothing pending, waits up to
        ``timeout`` seconds (``None``: without limit) for the next rebalance and runs it.
        ``timeout=0`` makes progress without waiting. A JoinGroup in flight when the timeout
        passes (or when the caller is cancelled) keeps going; the next call picks it up.

        Resets the poll timer, and keeps resetting it while it waits. Raises the fatal
        errors recorded since the last call (GroupError subclasses), and ListenerError if a
        callback raised (after the rebalance step completed).
        """
        core = self._check_open()
        with self._lock:
            due = core.poll(self._now())
        if due:
            self._wake_hb()
        deadline = None if timeout is None else self._now() + max(0.0, timeout) * 1000.0
        errors: list[ListenerError] = []
        completed = False
        while self._lifecycle is _Lifecycle.OPEN:
            self._poll_wake.clear()
            with self._lock:
                action = core.next_join_action(self._now())
            match action:
                case Idle():
                    if completed:
                        break
                    if not await self._wait_in_poll(core, deadline):
                        break
                case RaiseFatal(error=error):
                    self._wake_hb()
                    raise error
                case FindCoordinator():
                    await self._wait_coordinator_task(self._ensure_lookup, deadline)
                case AwaitLeaseProof(until=until):
                    # The assignment may be installed only once a heartbeat proves the
                    # session fresh: send one now, then wait for member.lease_renewed.
                    self._wake_hb()
                    wait_until = until if deadline is None else min(until, deadline)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(
                            self._poll_wake.wait(), max(0.0, (wait_until - self._now()) / 1000)
                        )
                case Sleep(until=until):
                    await self._sleep_until(until, deadline)
                case PrepareJoin(lost=lost):
                    await self._run_calls(self._embedding.prepare(lost=lost), errors)
                case SendJoinGroup():
                    await self._wait_coordinator_task(
                        functools.partial(self._start_chain, core, action),
                        deadline,
                        starts_chain=True,
                    )
                case AwaitJoin():
                    chain = self._chain
                    # Isolated mode: a poll() cancelled right after SendJoinGroup may have
                    # left the chain's start queued on the coordinator loop; then the chain
                    # is about to exist and the wait below (queued after it) finds it.
                    starting = self._chain_start is not None and not self._chain_start.done()
                    if not starting and (chain is None or chain.done()):
                        with self._lock:
                            core.abandon_chain()  # defensive: a chain always reports back
                    else:
                        await self._wait_coordinator_task(lambda: self._chain, deadline)
                case CompleteJoin(generation=generation, assignment=data):
                    await self._complete(core, generation, data, errors)
                    completed = True
            if deadline is not None and self._now() >= deadline:
                break
        if errors:
            raise errors[0]
        await asyncio.sleep(0)  # a poll loop always yields to the event loop
        return self._embedding.owned

    def _start_chain(self, core: MemberCore, action: SendJoinGroup) -> asyncio.Task[None]:
        """On the coordinator loop: start the join chain (owned by the member)."""
        self._chain = self._tasks.spawn(self._run_chain(core, action), "kgroup-join-chain")
        return self._chain

    async def _wait_in_poll(self, core: MemberCore, deadline: float | None) -> bool:
        """Stable and idle: wait for a rebalance trigger, a fatal error or the deadline,
        resetting the poll timer as the Java client's poll loop does. False at deadline."""
        now = self._now()
        if deadline is not None and now >= deadline:
            return False
        slice_ms = self._config.max_poll_interval_ms / 2
        until = now + slice_ms if deadline is None else min(deadline, now + slice_ms)
        try:
            await asyncio.wait_for(self._poll_wake.wait(), (until - now) / 1000.0)
        except TimeoutError:
            pass
        with self._lock:
            due = core.poll(self._now())
        if due:
            self._wake_hb()
        return True

    async def _complete(
        self, core: MemberCore, generation: Generation, data: bytes, errors: list[ListenerError]
    ) -> None:
        try:
            completion = self._embedding.complete(generation, data)
        except AssignmentError:
            with self._lock:
                core.join_completed(self._now())
                core.request_rejoin("invalid assignment")
            raise
        await self._run_calls(completion.calls, errors)
        with self._lock:
            if completion.rejoin_reason:
                core.request_rejoin(completion.rejoin_reason)
            core.join_completed(self._now())
        self._wake_hb()  # the installed assignment may want a lease-renewal heartbeat
        logger.info(
            "member.stable",
            group=self._config.group_id,
            member_id=self.member_id,
            generation=generation.generation_id,
            assignment=sorted(str(tp) for tp in self._embedding.owned),
            rebalance_ms=core.last_rebalance_ms,
        )

    # -- abort -----------------------------------------------------------------------------------

    async def abort(self) -> None:
        """Stop at once as if the process had died: no callbacks, no LeaveGroup. Every task
        and connection is still cleaned up. The group notices only when the session times
        out. Meant for tests and demos of crash handling."""
        if self._lifecycle in (_Lifecycle.CLOSED, _Lifecycle.CLOSING):
            return
        self._lifecycle = _Lifecycle.CLOSING
        await self._shutdown()
        logger.info("member.aborted", group=self._config.group_id)

    async def _shutdown(self) -> None:
        self._lifecycle = _Lifecycle.CLOSING
        self._closed_event.set()
        self._wake_hb()
        self._wake_lease()
        self._poll_wake.set()
        thread = self._loop_thread
        try:
            if thread is None:
                await self._shutdown_coordinator_side()
            else:
                try:
                    await asyncio.wrap_future(thread.submit(self._shutdown_coordinator_side()))
                except CoordinatorError:  # the loop is already gone
                    pass
                finally:
                    await thread.aclose()  # cancels whatever is left there; joins the thread
        finally:
            self._lifecycle = _Lifecycle.CLOSED

    async def _shutdown_coordinator_side(self) -> None:
        """On the coordinator loop: stop its tasks, close its connections."""
        await self._tasks.aclose()
        self._drop_coordinator_connection()
        await self._cluster.aclose()
        if self._closing_conns:
            await asyncio.gather(*self._closing_conns, return_exceptions=True)

    # -- close -----------------------------------------------------------------------------------

    async def _cancel_chain(self) -> None:
        """On the coordinator loop: cancel the join chain, if any, and wait for it."""
        chain = self._chain
        if chain is not None and not chain.done():
            chain.cancel()
            await asyncio.gather(chain, return_exceptions=True)
            # Its JoinGroup/SyncGroup may still be held by the coordinator, and a broker
            # reads a connection's next request only after answering the previous one: a
            # LeaveGroup on that connection would wait out the whole rebalance. Drop it; the
            # LeaveGroup goes out on a fresh one.
            self._drop_coordinator_connection()

    async def close(self) -> None:
        """Release the partitions (revoked, or lost if the generation is gone), leave the
        group (dynamic members), stop every task and close every connection. Idempotent;
        bounded by ``min(close_timeout_ms, request_timeout_ms)``."""
        if self._lifecycle in (_Lifecycle.CLOSED, _Lifecycle.CLOSING):
            return
        if self._lifecycle is _Lifecycle.UNOPENED or self._core is None:
            self._lifecycle = _Lifecycle.CLOSED
            await self._cluster.aclose()
            return
        core = self._core
        budget = min(self._config.close_timeout_ms, self._config.request_timeout_ms) / 1000.0
        errors: list[ListenerError] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        try:
            async with asyncio.timeout(budget):
                await self._on_coordinator(self._cancel_chain())
                with self._lock:
                    core.abandon_chain()
                    lost = core.generation.is_reset or core.state is not MemberState.STABLE
                await self._run_calls(self._embedding.release(lost=lost), errors)
                with self._lock:
                    leave = core.maybe_leave("the consumer is being closed")
                if leave is not None:
                    # Leave a little of the budget for the request's own timeout to fire.
                    left_ms = (deadline - loop.time()) * 1000.0 - _CLOSE_MARGIN_MS
                    await self._on_coordinator(self._send_leave(leave, max(1.0, left_ms)))
        except TimeoutError:
            logger.warning("member.close_timed_out", group=self._config.group_id)
        finally:
            await self._shutdown()
            logger.info("member.closed", group=self._config.group_id)
        if errors:
            raise errors[0]
