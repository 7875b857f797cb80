"""What every part of a member's runtime shares: the core behind its lock, the clock, the
Events, the task owner and the one place where the core's signals are applied.

The parts (:mod:`._link`, :mod:`._rebalance`, the protocol runtimes :mod:`._classic` and
:mod:`._kip848`, and the drivers they own) each get this object; :class:`~kgroup.GroupMember`
is the facade that owns them all.

Every call into the core goes through :meth:`Shared.step`: it takes the core lock (the core
is shared by two threads in isolated mode), and when the call returns it takes the core's
:class:`~kgroup._core._signals.Signals` and applies them, in one place: wake ``poll()``,
wake the heartbeat task, drop the coordinator connection. Log events and event hooks are
observation only (:meth:`Shared.observe`): a hook that raises is contained, counted and
logged once, and never changes what the member does.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from .._config import check_topic_pattern
from .._core._embedding import ConsumerEmbedding
from .._core._group_protocol import GroupProtocol, ProtocolEmbedding
from .._core._member import MemberCore
from .._core._signals import Signals
from .._core._timers import HeartbeatStats
from .._errors import ConfigError, InternalError, UsageError
from .._log import EventName, log_event, logger
from ._seam import LoopSeam
from ._tasks import TaskOwner

if TYPE_CHECKING:
    from .._config import GroupConfig
    from ..events._recorder import MemberRecorder
    from ._link import CoordinatorLink

__all__ = ["EventHook", "Lifecycle", "Shared"]

#: ``hook(event_name, fields)``: called for every membership event (see ``add_event_hook``).
EventHook = Callable[[str, Mapping[str, Any]], None]


class Lifecycle(enum.Enum):
    UNOPENED = "unopened"  # constructed; nothing started
    OPEN = "open"  # tasks running
    CLOSING = "closing"  # close() in progress
    CLOSED = "closed"  # everything stopped; the member cannot be reopened


class Shared:
    """The state the runtime's parts share (see the module docstring)."""

    def __init__(
        self,
        config: GroupConfig,
        *,
        listener: object | None,
        clock: Callable[[], float] | None,
        protocol: GroupProtocol | None = None,
    ) -> None:
        self.config = config
        self.listener = listener
        self._clock = clock
        self.embedding: ConsumerEmbedding | ProtocolEmbedding
        if protocol is None:
            consumer = ConsumerEmbedding(config.topics, config.assignors, rack_id=config.rack_id)
            if config.topic_pattern is not None:
                consumer.subscribe((), check_topic_pattern(config.topic_pattern))
            self.embedding = consumer
        else:
            if config.topics or config.topic_pattern is not None:
                raise ConfigError(
                    "topics",
                    "a member with a GroupProtocol subscribes to no topics: leave topics and "
                    "topic_pattern unset",
                )
            self.embedding = ProtocolEmbedding(protocol)
        self.lifecycle = Lifecycle.UNOPENED
        self.core: MemberCore | None = None
        #: Serialises every synchronous access to the core (two threads in isolated mode).
        self.lock = threading.RLock()
        self.tasks = TaskOwner(config.group_id, self.task_failed)
        self.seam: LoopSeam | None = None
        self.link: CoordinatorLink | None = None
        #: Woken when the heartbeat task must recompute its wait (coordinator loop).
        self.hb_wake = asyncio.Event()
        #: Woken when the metadata watch should refresh now (coordinator loop).
        self.metadata_wake = asyncio.Event()
        #: Woken when ``poll()`` has something new to do (application's loop).
        self.poll_wake = asyncio.Event()
        #: Woken like ``poll_wake``, for ``wait_rebalance_pending`` (application's loop).
        self.pending_wake = asyncio.Event()
        self.closed_event = asyncio.Event()
        self.hb_stats = HeartbeatStats(stall_warn_ms=config.loop_stall_warn_ms)
        self.hooks: list[EventHook] = []
        self._failed_hooks: set[int] = set()
        self.hook_failures = 0
        #: Partitions whose revoke callback is running: still held until it returns.
        self.releasing: frozenset[Any] = frozenset()
        #: The event log (``GroupConfig.event_log``), from start() on; None without one.
        self.recorder: MemberRecorder | None = None

    # -- time and state ----------------------------------------------------------------------

    def now(self) -> float:
        """The member's clock, in ms."""
        clock = self._clock
        if clock is None:
            try:
                clock = asyncio.get_running_loop().time
            except RuntimeError:  # stats() from a thread without a loop: the same clock
                clock = time.monotonic
        return clock() * 1000.0

    def wall_offset_ms(self) -> float:
        """The wall clock minus the member's clock, in ms (the heartbeat grid of the
        consumer protocol). 0 when the member's clock is not the machine's monotonic clock
        (a clock given for tests, an event loop with a virtual time): that clock is then
        taken as the wall clock, which keeps such runs deterministic."""
        if self._clock is None:
            try:
                loop_time = asyncio.get_running_loop().time()
            except RuntimeError:
                loop_time = time.monotonic()
            mono = time.monotonic()
            if abs(loop_time - mono) < 1.0:
                return (time.time() - mono) * 1000.0
        return 0.0

    @property
    def open(self) -> bool:
        return self.lifecycle is Lifecycle.OPEN

    def check_open(self) -> MemberCore:
        if self.lifecycle is not Lifecycle.OPEN or self.core is None:
            raise UsageError(
                f"GroupMember is {self.lifecycle.value}: use 'async with GroupMember(...)' "
                "or await start() first"
                if self.lifecycle is Lifecycle.UNOPENED
                else f"GroupMember is {self.lifecycle.value}"
            )
        return self.core

    # -- the core ------------------------------------------------------------------------------

    def step(self) -> _Step:
        """Use the core under its lock; its signals are applied when the block ends (also
        when it raises)."""
        core = self.core
        if core is None:
            raise UsageError("GroupMember is not started")
        return _Step(self, core)

    def apply(self, signals: Signals) -> None:
        """The one place where the core's signals turn into wake-ups and dropped
        connections."""
        if signals.wake_poll:
            self.wake_poll()
        if signals.wake_heartbeat:
            self.wake_hb()
        if signals.drop_coordinator and self.link is not None and self.seam is not None:
            # Spec §4.0.3: the core forgot the coordinator first; now drop the connection so
            # every request in flight on it fails at once.
            self.seam.to_coordinator(self.link.drop)

    def wake_hb(self) -> None:
        self._wake_coordinator(self.hb_wake)

    def wake_metadata(self) -> None:
        """Wake the metadata watch (a refresh now, not after ``metadata_max_age_ms``)."""
        self._wake_coordinator(self.metadata_wake)

    def _wake_coordinator(self, event: asyncio.Event) -> None:
        """Set ``event``, which a task of the coordinator loop waits on (from whichever
        thread runs this, in isolated mode)."""
        seam = self.seam
        if seam is None:
            event.set()
        else:
            seam.wake_coordinator(event)

    def wake_poll(self) -> None:
        seam = self.seam
        if seam is None:
            self.poll_wake.set()
            self.pending_wake.set()
        else:
            seam.wake_app(self.poll_wake)
            seam.wake_app(self.pending_wake)

    def task_failed(self, error: InternalError) -> None:
        """An owned task failed (a kgroup bug): the next ``poll()`` raises it."""
        core = self.core
        if core is None or self.lifecycle is not Lifecycle.OPEN:
            return
        with self.step() as core:
            core.record_fatal(error)

    # -- observation -------------------------------------------------------------------------

    def observe(self, event: str, **fields: Any) -> None:
        """The core's observer: log the event, then call the event hooks (on the
        application's loop). Runs inside a core call, under the lock."""
        self.log(cast(EventName, event), **fields)

    def log(self, event: EventName, **fields: Any) -> None:
        """Log a runtime event at its registered level, record it in the event log, and
        call the event hooks."""
        log_event(event, **fields)
        self.record(event, **fields)
        self.notify(event, fields)

    def announce(self, event: EventName, **fields: Any) -> None:
        """Log a runtime event at its registered level and call the event hooks (not
        recorded in the event log)."""
        log_event(event, **fields)
        self.notify(event, fields)

    def notify(self, event: str, fields: Mapping[str, Any]) -> None:
        """Call the event hooks with ``event`` (on the application's loop): every
        membership event the member logs reaches them, the core's and the runtime's."""
        if self.hooks:
            if self.seam is None:
                self.run_hooks(event, fields)
            else:
                self.seam.to_app(self.run_hooks, event, fields)

    def record(self, event: EventName, **fields: Any) -> None:
        """Record an event in the event log only (its log line is written otherwise)."""
        recorder = self.recorder
        if recorder is not None:
            recorder.record(event, fields)

    def run_hooks(self, event: str, fields: Mapping[str, Any]) -> None:
        for hook in list(self.hooks):
            try:
                hook(event, fields)
            except Exception as exc:
                self.hook_failures += 1
                if id(hook) in self._failed_hooks:
                    continue
                self._failed_hooks.add(id(hook))
                logger.exception(
                    "member.event_hook_failed",
                    group=self.config.group_id,
                    hook=getattr(hook, "__qualname__", repr(hook)),
                    error=repr(exc),
                )


class _Step:
    """:meth:`Shared.step`'s context manager (a class: it runs several times per heartbeat
    and per rebalance, and a generator-based one costs several microseconds more)."""

    __slots__ = ("_core", "_shared")

    def __init__(self, shared: Shared, core: MemberCore) -> None:
        self._shared = shared
        self._core = core

    def __enter__(self) -> MemberCore:
        self._shared.lock.acquire()
        return self._core

    def __exit__(self, *exc_info: object) -> None:
        shared = self._shared
        try:
            signals = self._core.take_signals()
        finally:
            shared.lock.release()
        if signals:
            shared.apply(signals)
