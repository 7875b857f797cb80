"""The unit-test harness: the sans-I/O :class:`MemberCore` driven step by step, and the
runtime's real heartbeat task around it in virtual time.

:class:`Harness` owns a clock (``now``, in ms) and a core. The **join path** is stepped by
hand, one core action at a time, the way ``GroupMember.poll()`` steps it (the listener
decisions come from a real :class:`ConsumerEmbedding`), with the broker responses the test
scripts: :meth:`Harness.poll`, :meth:`Harness.expect`, :meth:`Harness.find_coordinator`,
:meth:`Harness.prepare`, :meth:`Harness.send_join`, :meth:`Harness.join_response`,
:meth:`Harness.sync_response`, :meth:`Harness.complete`. Single heartbeat steps are core
calls too: :meth:`Harness.hb`, :meth:`Harness.hb_send`, :meth:`Harness.hb_respond`,
:meth:`Harness.hb_fail`.

:meth:`Harness.run_heartbeats` does not imitate the heartbeat loop: it runs the runtime's own
``HeartbeatDriver`` and ``CoordinatorLink`` on the harness's core, over a scripted
``MockTransport``, on a :class:`~kgroup.testing.VirtualTimeLoop`. Nothing reads a real clock
or touches a socket, so every scenario is deterministic and quick.

Jitter is deterministic: ``uniform(lo, hi)`` returns ``lo + (hi - lo) * jitter_at``
(``jitter_at=0.5`` means no jitter).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from kgroup._config import GroupConfig
from kgroup._core._assignors import (
    BaseAssignor,
    MemberSubscription,
    RangeAssignor,
    RebalanceProtocol,
)
from kgroup._core._consumer_protocol import Assignment, Subscription, TopicPartition
from kgroup._core._embedding import Completion, ConsumerEmbedding, ListenerCall
from kgroup._core._member import (
    CompleteJoin,
    ComputeAssignment,
    FindCoordinator,
    HeartbeatAction,
    HeartbeatDisabled,
    JoinAction,
    MemberCore,
    PollTimeoutLeave,
    PrepareJoin,
    SendHeartbeat,
    SendJoinGroup,
    SendSyncGroup,
    Sleep,
)
from kgroup._core._messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupResponse,
)
from kgroup._core._state import MemberState
from kgroup._errors import AssignmentError, CoordinatorError, ErrorCode, KGroupError
from kgroup._runtime._heartbeat import HeartbeatDriver
from kgroup._runtime._link import CoordinatorLink
from kgroup._runtime._seam import LoopSeam
from kgroup._runtime._shared import Lifecycle, Shared
from kgroup.testing import MockTransport, VirtualTimeLoop

GROUP = "g"
TP = TopicPartition
A = TypeVar("A")


def make_config(**overrides: Any) -> GroupConfig:
    """A GroupConfig with Kafka's defaults, group ``g``, subscribed to ``t``."""
    fields: dict[str, Any] = {"bootstrap_servers": "b0:9092", "group_id": GROUP, "topics": ("t",)}
    fields.update(overrides)
    return GroupConfig(**fields)


def tps(topic: str, *partitions: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, p) for p in partitions)


def assignment_bytes(partitions: Iterable[TopicPartition]) -> bytes:
    return Assignment(partitions=tuple(sorted(partitions))).encode()


def member_entry(
    member_id: str, topics: Sequence[str], *, instance: str | None = None
) -> JoinGroupMember:
    """A JoinGroup response member as the leader sees it."""
    metadata = Subscription(topics=tuple(topics)).encode()
    return JoinGroupMember(member_id=member_id, group_instance_id=instance, metadata=metadata)


class CooperativeRange(BaseAssignor):
    """Range under the COOPERATIVE protocol (no built-in cooperative assignor exists): lets
    tests own partitions across a rebalance."""

    name = "coop-range"
    supported_protocols = (RebalanceProtocol.COOPERATIVE,)

    def assign(
        self, partitions_per_topic: Any, members: Sequence[MemberSubscription]
    ) -> dict[str, Assignment]:
        return RangeAssignor().assign(partitions_per_topic, members)


@dataclass
class HeartbeatLog:
    """What :meth:`Harness.run_heartbeats` saw."""

    sent: list[tuple[float, SendHeartbeat]]
    lookups: list[float]
    leave: PollTimeoutLeave | None = None
    disabled_at: float | None = None

    @property
    def send_times(self) -> list[float]:
        return [t for t, _ in self.sent]


class Harness:
    """One member core plus the fake runtime around it. See the module docstring."""

    # Value helpers, reachable from tests through the fixture (``h.tps("t", 0, 1)``).
    tps = staticmethod(tps)
    assignment_bytes = staticmethod(assignment_bytes)
    member_entry = staticmethod(member_entry)

    def __init__(
        self,
        *,
        start: float = 0.0,
        jitter_at: float = 0.5,
        partitions: dict[str, int] | None = None,
        runtime_holding: bool = True,
        **config: Any,
    ) -> None:
        self.config = make_config(**config)
        self.embedding = ConsumerEmbedding(
            self.config.topics, self.config.assignors, rack_id=self.config.rack_id
        )
        self.now = float(start)
        self.jitter_at = jitter_at
        self.partitions = partitions if partitions is not None else {"t": 4}
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.calls: list[ListenerCall] = []  # every listener call, in order
        self.joins: list[JoinGroupRequest] = []  # every JoinGroup the core asked to send
        self.actions: list[JoinAction] = []  # every join-driver action, in order
        self.last_join: SendJoinGroup | None = None  # the last SendJoinGroup (for timeout_ms)
        self.core = MemberCore(
            self.config,
            protocol_type=self.embedding.protocol_type,
            protocols=self.embedding.metadata,
            now=self.now,
            observer=self._observe,
            uniform=self._uniform,
            # As the runtime: held while the embedding owns partitions (a COOPERATIVE member
            # keeps them across PrepareJoin); ``runtime_holding=False``: the core's default.
            holds_assignment=(lambda: bool(self.embedding.owned)) if runtime_holding else None,
        )

    # -- plumbing --------------------------------------------------------------------------------

    def _observe(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    def _uniform(self, lo: float, hi: float) -> float:
        return lo + (hi - lo) * self.jitter_at

    def advance(self, ms: float) -> None:
        self.now += ms

    def at(self, t: float) -> None:
        assert t >= self.now, f"time goes forward: {t} < {self.now}"
        self.now = t

    def events_named(self, name: str) -> list[dict[str, Any]]:
        return [fields for event, fields in self.events if event == name]

    @property
    def state(self) -> MemberState:
        return self.core.state

    @property
    def member_id(self) -> str:
        return self.core.generation.member_id

    @property
    def generation_id(self) -> int:
        return self.core.generation.generation_id

    # -- the join driver (GroupMember.poll) ------------------------------------------------------

    def poll(self) -> bool:
        """The application enters poll(): resets the poll timer."""
        return self.core.poll(self.now)

    def action(self) -> JoinAction:
        action = self.core.next_join_action(self.now)
        self.actions.append(action)
        return action

    def expect(self, cls: type[A]) -> A:
        action = self.action()
        assert isinstance(action, cls), f"expected {cls.__name__}, the core asked for {action!r}"
        return action

    def find_coordinator(
        self, node_id: int = 1, *, error: int = ErrorCode.NONE
    ) -> FindCoordinatorRequest:
        """Expect FindCoordinator and answer it (``error`` or broker ``node_id``)."""
        self.expect(FindCoordinator)
        return self.lookup(node_id, error=error)

    def lookup(self, node_id: int = 1, *, error: int = ErrorCode.NONE) -> FindCoordinatorRequest:
        """Run one lookup (either driver) and answer it."""
        request = self.core.find_coordinator_request()
        response = FindCoordinatorResponse(
            error_code=error,
            node_id=node_id if error == ErrorCode.NONE else -1,
            host=f"b{node_id}" if error == ErrorCode.NONE else "",
            port=9092 if error == ErrorCode.NONE else -1,
        )
        self.core.on_find_coordinator_response(response, self.now)
        return request

    def prepare(self, *, lost: bool) -> tuple[ListenerCall, ...]:
        """Expect PrepareJoin(lost=...) and run the pre-join hook's listener decisions."""
        action = self.expect(PrepareJoin)
        assert action.lost is lost, f"PrepareJoin.lost is {action.lost}, expected {lost}"
        calls = self.embedding.prepare(lost=action.lost)
        self.calls.extend(calls)
        return calls

    def send_join(self) -> JoinGroupRequest:
        """Expect SendJoinGroup now (no sleep, no hook before it) and return its request."""
        action = self.expect(SendJoinGroup)
        self.joins.append(action.request)
        self.last_join = action
        return action.request

    def join_response(
        self,
        error_code: int = ErrorCode.NONE,
        *,
        generation: int = -1,
        member_id: str = "",
        leader: str = "",
        protocol_name: str | None = None,
        protocol_type: str | None = None,
        members: Sequence[JoinGroupMember] = (),
        skip_assignment: bool = False,
    ) -> SendSyncGroup | None:
        """Report a JoinGroup response; as leader, run the assignor as the runtime does.
        Returns the SyncGroup the core asks to send, if any."""
        step = self.core.on_join_response(
            JoinGroupResponse(
                error_code=error_code,
                generation_id=generation,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
                leader=leader,
                skip_assignment=skip_assignment,
                member_id=member_id,
                members=tuple(members),
            ),
            self.now,
        )
        if isinstance(step, ComputeAssignment):
            topics = self.embedding.metadata_topics(step.members)
            counts = {t: self.partitions[t] for t in topics if t in self.partitions}
            try:
                assignments = self.embedding.assign(step.protocol_name, step.members, counts)
            except KGroupError as exc:  # as _run_chain: the chain fails fatally, no SyncGroup
                self.core.chain_failed_fatal(exc)
                return None
            step = self.core.assignment_computed(assignments)
        assert step is None or isinstance(step, SendSyncGroup), step
        return step

    def sync_response(
        self,
        error_code: int = ErrorCode.NONE,
        *,
        assignment: bytes = b"",
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> None:
        self.core.on_sync_response(
            SyncGroupResponse(
                error_code=error_code,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
                assignment=assignment,
            ),
            self.now,
        )

    def complete(self) -> Completion:
        """Expect CompleteJoin and run it exactly as ``GroupMember._complete`` does."""
        action = self.expect(CompleteJoin)
        try:
            completion = self.embedding.complete(action.generation, action.assignment)
        except AssignmentError:
            self.core.join_completed(self.now)
            self.core.request_rejoin("invalid assignment")
            raise
        self.calls.extend(completion.calls)
        self.core.join_completed(
            self.now, follow_up=completion.follow_up, rejoin=completion.rejoin_reason
        )
        return completion

    def stable(
        self,
        member_id: str = "m-1",
        generation: int = 1,
        owned: Iterable[TopicPartition] = (),
        *,
        node_id: int = 1,
        protocol: str | None = None,
    ) -> None:
        """Setup shortcut: run whatever the join driver asks (lookup, hook, sleeps) up to
        JoinGroup, then join as a follower in ``generation`` owning ``owned``."""
        protocol = protocol or self.embedding.assignors[0].name
        self.poll()
        while True:
            action = self.action()
            if isinstance(action, FindCoordinator):
                self.lookup(node_id)
            elif isinstance(action, PrepareJoin):
                self.calls.extend(self.embedding.prepare(lost=action.lost))
            elif isinstance(action, Sleep):
                self.at(action.until)
            elif isinstance(action, SendJoinGroup):
                self.joins.append(action.request)
                break
            else:
                raise AssertionError(f"unexpected join action {action!r}")
        sync = self.join_response(
            generation=generation,
            member_id=member_id,
            leader="leader-0",
            protocol_name=protocol,
            protocol_type="consumer",
        )
        assert sync is not None
        self.sync_response(
            assignment=assignment_bytes(owned), protocol_type="consumer", protocol_name=protocol
        )
        self.complete()
        assert self.state is MemberState.STABLE
        assert not self.core.rejoin_needed

    # -- the heartbeat driver (GroupMember._heartbeat_loop) ---------------------------------------

    def hb(self) -> HeartbeatAction:
        return self.core.heartbeat_action(self.now)

    def hb_expect(self, cls: type[A]) -> A:
        action = self.hb()
        assert isinstance(action, cls), f"expected {cls.__name__}, heartbeat driver got {action!r}"
        return action

    def hb_send(self) -> SendHeartbeat:
        return self.hb_expect(SendHeartbeat)

    def hb_respond(self, sent: SendHeartbeat, error_code: int = ErrorCode.NONE) -> None:
        self.core.on_heartbeat_response(
            sent.generation, HeartbeatResponse(error_code=error_code), self.now
        )

    def hb_fail(self, reason: str = "connection closed") -> None:
        self.core.on_heartbeat_failed(self.now, reason)

    def run_heartbeats(
        self,
        until: float,
        *,
        answer: int | Callable[[float, SendHeartbeat], int | None] = ErrorCode.NONE,
        lookup: int | Callable[[float], int | None] = 1,
        app_polls_every: float | None = None,
    ) -> HeartbeatLog:
        """Run the runtime's own heartbeat task (``kgroup/_runtime/_heartbeat.py``, with its
        coordinator link and the lookup task) on this core, in virtual time, until ``until``
        (ms) or until the core disables heartbeats or the poll timer leaves.

        ``answer``: the error code each heartbeat gets (a callable may return ``None`` for a
        transport failure). ``lookup``: the node FindCoordinator answers (a callable may
        return ``None`` for a failed lookup). ``app_polls_every``: the application also calls
        ``poll()`` that often (resetting the poll timer). Times in the log are ms, rounded
        to the microsecond of the virtual clock.
        """
        log = HeartbeatLog(sent=[], lookups=[])
        if self.now >= until:
            return log
        loop = VirtualTimeLoop(start=self.now / 1000.0)
        try:
            loop.run_until_complete(
                self._heartbeat_task(log, until, answer, lookup, app_polls_every)
            )
        finally:
            loop.close()
        return log

    async def _heartbeat_task(
        self,
        log: HeartbeatLog,
        until: float,
        answer: int | Callable[[float, SendHeartbeat], int | None],
        lookup: int | Callable[[float], int | None],
        app_polls_every: float | None,
    ) -> None:
        core = self.core
        shared = Shared(self.config, listener=None, clock=None)
        shared.core = core
        shared.seam = LoopSeam(asyncio.get_running_loop(), None)

        def now() -> float:
            return round(shared.now(), 3)

        stop = asyncio.Event()
        sent_by_request: dict[int, SendHeartbeat] = {}
        ask = core.heartbeat_action

        def watched(at: float) -> HeartbeatAction:
            """What the heartbeat task is told to do, recorded until the run stops."""
            action = ask(at)
            if stop.is_set():
                return action
            if isinstance(action, SendHeartbeat):
                log.sent.append((now(), action))
                sent_by_request[id(action.request)] = action
            elif isinstance(action, HeartbeatDisabled):
                log.disabled_at = now()
                stop.set()
            elif isinstance(action, PollTimeoutLeave):
                log.leave = action
                stop.set()
            return action

        def broker(request: Any) -> Any:
            at = now()
            if isinstance(request, FindCoordinatorRequest):
                log.lookups.append(at)
                node = lookup(at) if callable(lookup) else lookup
                if node is None:
                    raise CoordinatorError("no broker reachable")
                return FindCoordinatorResponse(
                    error_code=ErrorCode.NONE, node_id=node, host=f"b{node}", port=9092
                )
            if isinstance(request, HeartbeatRequest):
                sent = sent_by_request[id(request)]
                code = answer(at, sent) if callable(answer) else answer
                if code is None:
                    raise CoordinatorError("connection closed")
                return HeartbeatResponse(error_code=code)
            if isinstance(request, LeaveGroupRequest):
                return LeaveGroupResponse(error_code=ErrorCode.NONE)
            raise AssertionError(f"the heartbeat task sent {request!r}")

        async def app_polls(every: float) -> None:
            while True:
                with shared.step() as stepped:
                    stepped.poll(shared.now())
                await asyncio.sleep(every / 1000.0)

        core.heartbeat_action = watched  # type: ignore[method-assign, assignment]
        link = CoordinatorLink(shared, MockTransport(broker))
        shared.link = link
        shared.lifecycle = Lifecycle.OPEN
        shared.tasks.spawn(HeartbeatDriver(shared, link).run(lambda: False), "kgroup-heartbeat")
        if app_polls_every is not None:
            shared.tasks.spawn(app_polls(app_polls_every), "app-polls")
        try:
            async with asyncio.timeout((until - shared.now()) / 1000.0):
                await stop.wait()
        except TimeoutError:
            pass
        finally:
            del core.heartbeat_action
            shared.lifecycle = Lifecycle.CLOSING
            await shared.tasks.aclose()
            await link.aclose()
            self.now = now()
        assert not shared.tasks.failures, shared.tasks.failures


@pytest.fixture
def make_harness() -> Callable[..., Harness]:
    """``make_harness(**config)`` -> a :class:`Harness` (``jitter_at``, ``partitions``,
    ``start``, ``runtime_holding`` are harness options; anything else goes to GroupConfig)."""
    return Harness


@pytest.fixture
def coop_assignor() -> CooperativeRange:
    """A COOPERATIVE assignor (range underneath), for tests that keep partitions across a
    rebalance."""
    return CooperativeRange()
