"""The simulated network and brokers: member connections (:class:`Conn`), the brokers and
the coordinator they host (:class:`Cluster`: placement, loading, crashes, the group model
of either protocol), and :class:`Network`, which carries every request and answer with
the schedule's message faults (drops, duplicates, delays, injected errors, cuts, black
holes). :class:`~._world.World` owns one of each.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kgroup._errors import ErrorCode
from kgroup.testing.messages import (
    ConsumerGroupHeartbeatRequest,
    DescribeConfigsRequest,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from ._model import ClassicGroupModel, GroupRecord, ModelError, Timers
from ._model_848 import BrokerConfig848, ConsumerGroupModel, GroupRecord848
from ._process import GROUP, Process
from ._sched import Failure, Future, Handle
from ._world848 import (
    describe_configs_response,
    error_response_848,
    metadata_response,
)

if TYPE_CHECKING:
    from ._world import World

__all__ = ["Cluster", "Conn", "KeyedTimers", "Network"]

E = ErrorCode
INF = math.inf


class Conn:
    """One member-to-broker TCP connection."""

    __slots__ = (
        "bbusy",
        "bclosed",
        "bqueue",
        "id",
        "inflight",
        "node",
        "open",
        "proc",
        "tail_down",
        "tail_up",
    )

    def __init__(self, cid: int, proc: Process, node: int) -> None:
        self.id = cid
        self.proc = proc
        self.node = node
        self.open = True
        self.inflight: dict[int, tuple[Future, Handle]] = {}
        self.tail_up = 0.0
        self.tail_down = 0.0
        self.bqueue: deque[tuple[int, Any, bool]] = deque()
        self.bbusy = False
        self.bclosed = False


class KeyedTimers(Timers):
    def __init__(self, world: World) -> None:
        self.world = world
        self.active = True
        self._handles: dict[str, Handle] = {}

    def schedule(self, key: str, delay_ms: float, fn: Callable[[], None]) -> None:
        self.cancel(key)
        self._handles[key] = self.world.sched.at(self.world.now + delay_ms, self._fire, key, fn)

    def cancel(self, key: str) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def now_ms(self) -> float:
        return self.world.now

    def _fire(self, key: str, fn: Callable[[], None]) -> None:
        self._handles.pop(key, None)
        if self.active:
            self.world.guard_model(fn)

    def stop(self) -> None:
        self.active = False
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()


class Cluster:
    """Brokers 0..n-1; one of them coordinates the group (after loading it)."""

    def __init__(self, world: World, nodes: int) -> None:
        self.world = world
        self.up = [True] * nodes
        self.coordinator = world.rng.randrange(nodes)
        self.loading_until = 0.0
        self.record: GroupRecord | GroupRecord848 | None = None
        self.stale_node: int | None = None
        self.stale_until = 0.0
        self.rebalances_before = 0
        self._ids = 0
        self.group: ClassicGroupModel | ConsumerGroupModel | None = None
        self._timers: KeyedTimers | None = None
        self._load()

    def _new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._ids:04d}"

    def _persist(self, record: GroupRecord | GroupRecord848) -> None:
        self.record = record
        if isinstance(record, GroupRecord848):
            return  # every change is persisted; the model's trace says what changed
        self.world.log(
            "broker",
            f"persist generation {record.generation} "
            f"members {[m.member_id for m in record.members]}",
        )

    def _load(self) -> None:
        self._timers = KeyedTimers(self.world)
        log = (lambda line: self.world.log("group", line)) if self.world.tracing else None
        params = self.world.params
        if params.kind.consumer_protocol:
            assert self.record is None or isinstance(self.record, GroupRecord848)
            self.group = ConsumerGroupModel.load(
                GROUP,
                self.record,
                config=BrokerConfig848(
                    session_timeout_ms=params.session_ms,
                    heartbeat_interval_ms=params.heartbeat_ms,
                    topics=dict(self.world.topics),
                    assignor=params.remote_assignor,
                    incarnations=dict(self.world.topic_recreations),
                ),
                timers=self._timers,
                persist=self._persist,
                log=log,
            )
            return
        assert self.record is None or isinstance(self.record, GroupRecord)
        self.group = ClassicGroupModel.load(
            GROUP,
            self.record,
            config=self.world.broker_config,
            timers=self._timers,
            persist=self._persist,
            new_id=self._new_id,
            log=log,
            on_generation=self.world.generation_formed,
        )

    def _drop_group(self, *, unload: bool) -> None:
        group, timers = self.group, self._timers
        self.group, self._timers = None, None
        if group is not None:
            self.rebalances_before += group.rebalances
            if unload:
                self.world.guard_model(group.unload)
        if timers is not None:
            timers.stop()

    @property
    def rebalances(self) -> int:
        return self.rebalances_before + (self.group.rebalances if self.group else 0)

    def active_group(self) -> ClassicGroupModel | ConsumerGroupModel | None:
        if self.group is None or self.world.now < self.loading_until:
            return None
        return self.group

    # -- topology changes --------------------------------------------------------------------------

    def move_coordinator(self, load_ms: float, *, crash_old: bool, down_ms: float) -> None:
        world = self.world
        old = self.coordinator
        new = world.rng.choice([n for n in range(len(self.up)) if n != old])
        world.log(
            "broker",
            f"coordinator moves {old} -> {new} (load {load_ms:.0f} ms"
            f"{', old broker restarts' if crash_old else ''})",
        )
        self._drop_group(unload=not crash_old)
        if crash_old:
            self.node_down(old, down_ms)
        self.coordinator = new
        self.stale_node = old
        self.stale_until = world.now + world.rng.uniform(0, 2 * world.params.heartbeat_ms)
        self.loading_until = world.now + load_ms
        world.echo(max(self.stale_until, self.loading_until))
        world.sched.at(self.loading_until, self._finish_load, new, self.loading_until)

    def _finish_load(self, node: int, until: float) -> None:
        if self.coordinator == node and self.loading_until == until and self.up[node]:
            self._drop_group(unload=False)
            self.world.guard_model(self._load)

    def node_down(self, node: int, down_ms: float) -> None:
        world = self.world
        self.up[node] = False
        world.echo(world.now + down_ms)
        world.log("broker", f"broker {node} down for {down_ms:.0f} ms")
        world.net.reset_node(node)
        world.sched.at(world.now + down_ms, self._node_up, node)

    def _node_up(self, node: int) -> None:
        self.up[node] = True
        self.world.log("broker", f"broker {node} up")
        if node == self.coordinator and self.group is None:
            self.world.guard_model(self._load)

    # -- requests --------------------------------------------------------------------------------

    def find_coordinator(self, node: int) -> FindCoordinatorResponse:
        world = self.world
        error = world.maybe_error(FindCoordinatorRequest)
        if error is not None:
            return FindCoordinatorResponse(error_code=error)
        target = self.coordinator
        if world.now < self.stale_until and self.stale_node is not None:
            roll = world.rng.random()
            if roll < 0.3:
                target = self.stale_node
            elif roll < 0.5:
                return FindCoordinatorResponse(error_code=E.COORDINATOR_NOT_AVAILABLE)
        if not self.up[target]:
            return FindCoordinatorResponse(error_code=E.COORDINATOR_NOT_AVAILABLE)
        return FindCoordinatorResponse(
            error_code=E.NONE, node_id=target, host=f"b{target}", port=9092
        )

    def handle(self, conn: Conn, msg: Any, reply: Callable[[Any], None]) -> None:
        """A group request read from ``conn`` on its broker; ``reply`` sends the answer."""
        world = self.world
        kind = type(msg)
        if kind is MetadataRequest:  # any broker answers Metadata
            reply(metadata_response(world, msg))
            return
        if kind is DescribeConfigsRequest:  # and DescribeConfigs for a group
            reply(world.guard_model(describe_configs_response, world, msg))
            return
        error: int | None = None
        group = None
        if conn.node != self.coordinator or not self.up[conn.node]:
            error = E.NOT_COORDINATOR
        else:
            group = self.active_group()
            if group is None:
                error = E.COORDINATOR_LOAD_IN_PROGRESS
            else:
                error = world.maybe_error(kind)
        if error is not None:
            reply(_error_response(msg, error))
            return
        assert group is not None
        client = conn.proc.slot
        if isinstance(group, ConsumerGroupModel):
            if kind is OffsetCommitRequest:
                if world.offsets_by_name:  # no v10: the wire layer sends v9, by name
                    msg = dataclasses.replace(msg, topic_ids=())
                answer, taken = world.guard_model(group.commit, msg)
                if any(code == E.UNKNOWN_TOPIC_ID for _, _, code in answer.results):
                    world.count_event("commit_unknown_topic_id")
                if taken:
                    world.commit_taken(conn.proc, msg, taken)
                reply(answer)
                return
            if kind is OffsetFetchRequest:
                if world.offsets_by_name:  # no v10: the wire layer sends v9, by name
                    msg = dataclasses.replace(msg, topic_ids=())
                world.fetch_asked(conn.proc, msg)
                reply(world.guard_model(group.fetch, msg, world.stored_offsets))
                return
            if kind is not ConsumerGroupHeartbeatRequest:
                raise ModelError(f"unexpected request {msg!r} to a consumer-protocol group")
            reply(world.guard_model(group.heartbeat, msg, client))
        elif kind is JoinGroupRequest:
            world.guard_model(group.join, msg, client, reply)
        elif kind is SyncGroupRequest:
            world.guard_model(group.sync, msg, reply)
        elif kind is HeartbeatRequest:
            reply(world.guard_model(group.heartbeat, msg))
        elif kind is LeaveGroupRequest:
            reply(world.guard_model(group.leave, msg))
        else:
            raise ModelError(f"unexpected request {msg!r}")


def _fences_itself(msg: Any) -> bool:
    """A second copy of a static member's first JoinGroup (member id "") is a second
    process with the same instance id: the broker replaces the member id the first copy got
    and fences it (FencedInstanceId, fatal by design). Not duplicated. Nor is a
    ConsumerGroupHeartbeat: its answer leaves out an assignment that did not change, so a
    second copy processed after the first can take the change into an answer the member
    never reads (one correlation id, answered once), which no broker does (a real resend
    has its own correlation id, after a failure that makes kgroup's next request full)."""
    if isinstance(msg, ConsumerGroupHeartbeatRequest):
        return True
    return (
        isinstance(msg, JoinGroupRequest)
        and msg.member_id == ""
        and msg.group_instance_id is not None
    )


def _error_response(msg: Any, error: int) -> Any:
    if isinstance(msg, JoinGroupRequest):
        return JoinGroupResponse(error_code=error, member_id=msg.member_id)
    if isinstance(msg, SyncGroupRequest):
        return SyncGroupResponse(error_code=error)
    if isinstance(msg, HeartbeatRequest):
        return HeartbeatResponse(error_code=error)
    if isinstance(msg, LeaveGroupRequest):
        return LeaveGroupResponse(error_code=error)
    if isinstance(msg, ConsumerGroupHeartbeatRequest):
        return error_response_848(msg, error)
    if isinstance(msg, OffsetCommitRequest):
        return OffsetCommitResponse(
            results=tuple((p.topic, p.partition, error) for p in msg.partitions)
        )
    if isinstance(msg, OffsetFetchRequest):
        return OffsetFetchResponse(error_code=error)
    raise ModelError(f"no error response for {msg!r}")


class Network:
    def __init__(self, world: World) -> None:
        self.world = world
        self._ids = 0
        self._conns: dict[int, Conn] = {}

    # -- the quiet period (invariant 5) --------------------------------------------------------
    #
    # An operation a fault touched (dropped, delayed, duplicated, black-holed, answered with
    # an injected error) has an effect until it resolves: the member hears the answer or
    # gives up on it. ``World.touches`` counts the touches; an operation whose count moved
    # while it was handled moves ``World.quiet_at`` to its resolution.

    def _touched_since(self, before: int, fut: Future | None) -> None:
        if fut is not None and self.world.touches != before:
            fut.on_done(self._resolved)

    def _resolved(self, _: Any) -> None:
        self.world.echo(self.world.now)

    def latency(self) -> float:
        world = self.world
        base = world.params.latency_ms
        delay = base + world.rng.expovariate(1.0 / base)
        if world.faulty and world.rng.random() < world.params.p_delay:
            world.count("delay")
            world.touches += 1
            delay += world.rng.uniform(50, world.params.session_ms)
        return delay

    def _lost(self, proc: Process) -> bool:
        """A message to or from ``proc`` is lost now (black hole or a random drop)."""
        world = self.world
        if proc.blackholed_until > world.now:
            world.touches += 1
            return True
        if world.faulty and world.rng.random() < world.params.p_drop:
            world.count("drop")
            world.touches += 1
            return True
        return False

    # -- connections -------------------------------------------------------------------------------

    def connect(self, proc: Process, node: int, timeout_ms: float) -> Future:
        fut = Future()
        world = self.world
        before = world.touches
        if self._lost(proc):
            proc.call_at(
                world.now + timeout_ms, fut.set, Failure(f"cannot connect to b{node}: timed out")
            )
        elif not world.cluster.up[node]:
            proc.call_at(
                world.now + self.latency(), fut.set, Failure(f"cannot connect to b{node}: refused")
            )
        else:
            self._ids += 1
            conn = Conn(self._ids, proc, node)
            self._conns[conn.id] = conn
            proc.conns = [c for c in proc.conns if c.open]
            proc.conns.append(conn)
            rtt = self.latency() + self.latency()
            proc.call_at(world.now + rtt, self._connected, conn, fut)
        self._touched_since(before, fut)
        return fut

    def _connected(self, conn: Conn, fut: Future) -> None:
        if not self.world.cluster.up[conn.node] or conn.bclosed:
            conn.open = False
            fut.set(Failure(f"connection to b{conn.node} reset"))
        else:
            fut.set(conn)

    def request(self, conn: Conn, msg: Any, timeout_ms: float) -> Future:
        fut = Future()
        world = self.world
        proc = conn.proc
        if not conn.open:
            fut.set(Failure(f"connection to b{conn.node} is closed"))
            return fut
        self._ids += 1
        corr = self._ids
        timer = proc.call_at(world.now + timeout_ms, self._timeout, conn, corr)
        conn.inflight[corr] = (fut, timer)
        before = world.touches
        if not self._lost(proc):
            arrival = max(world.now + self.latency(), conn.tail_up)
            conn.tail_up = arrival
            world.sched.at(arrival, self._arrive, conn, corr, msg, False)
            if (
                world.faulty
                and world.rng.random() < world.params.p_duplicate
                and not _fences_itself(msg)
            ):
                world.count("duplicate")
                world.touches += 1
                again = max(world.now + self.latency(), conn.tail_up)
                conn.tail_up = again
                world.sched.at(again, self._arrive, conn, corr, msg, True)
        self._touched_since(before, fut)
        return fut

    def close(self, conn: Conn, reason: str) -> None:
        """The member gives up on ``conn``: requests in flight fail at once.

        By default the connection is ABORTED (TCP RST, what the runtime is asked to do): the
        reset reaches the broker after one latency, and requests still in the network then
        are refused; requests the broker already read are processed as Kafka does (queued
        ones behind a parked request are dropped, parked ones stay parked). With
        ``ghosts=True`` (``KGROUP_SIM_GHOSTS=1``) the close is graceful (FIN after the data):
        a request delayed in the network still reaches the broker after the member moved on,
        and a stale JoinGroup then counts as the member's rejoin. See the report in
        test_simulation.py (seed 12182)."""
        if not conn.open:
            return
        conn.open = False
        inflight, conn.inflight = conn.inflight, {}
        for fut, timer in inflight.values():
            timer.cancel()
            fut.set(Failure(reason))
        world = self.world
        if world.ghosts:
            if not self._lost(conn.proc):
                fin = max(world.now + self.latency(), conn.tail_up)
                conn.tail_up = fin
                world.sched.at(fin, self._broker_close, conn)
        else:
            world.sched.at(world.now + world.params.latency_ms, self._broker_close, conn)

    def _timeout(self, conn: Conn, corr: int) -> None:
        if corr in conn.inflight:
            self.close(conn, "request timed out")

    def reset_node(self, node: int) -> None:
        """Broker ``node`` died: its side of every connection is gone; members see a reset."""
        for conn in list(self._conns.values()):
            if conn.node == node:
                self._broker_close(conn)
                if conn.open:
                    conn.proc.call_at(
                        self.world.now + self.latency(), self.close, conn, "connection reset"
                    )

    def _broker_close(self, conn: Conn) -> None:
        conn.bclosed = True
        conn.bqueue.clear()
        self._conns.pop(conn.id, None)

    # -- the broker side -------------------------------------------------------------------------

    def _arrive(self, conn: Conn, corr: int, msg: Any, duplicate: bool) -> None:
        if conn.bclosed or not self.world.cluster.up[conn.node]:
            return
        conn.bqueue.append((corr, msg, duplicate))
        if not conn.bbusy:
            self._process(conn)

    def _process(self, conn: Conn) -> None:
        world = self.world
        while conn.bqueue and not conn.bbusy and not conn.bclosed:
            corr, msg, duplicate = conn.bqueue.popleft()
            conn.bbusy = True
            replied = [False]

            def reply(
                resp: Any,
                conn: Conn = conn,
                corr: int = corr,
                replied: list[bool] = replied,
                duplicate: bool = duplicate,
            ) -> None:
                if replied[0]:
                    return
                replied[0] = True
                if duplicate:
                    world.echo(world.now)  # a duplicate's effect on the group ends here
                self._respond(conn, corr, resp)
                conn.bbusy = False
                if conn.bqueue:
                    self.world.sched.at(self.world.now, self._process, conn)

            before = world.touches
            world.cluster.handle(conn, msg, reply)  # an injected error touches the request
            entry = conn.inflight.get(corr)
            self._touched_since(before, entry[0] if entry is not None else None)

    def _respond(self, conn: Conn, corr: int, resp: Any) -> None:
        world = self.world
        before = world.touches
        if not conn.bclosed and not self._lost(conn.proc):
            arrival = max(world.now + self.latency(), conn.tail_down)
            conn.tail_down = arrival
            conn.proc.call_at(arrival, self._deliver, conn, corr, resp)
        entry = conn.inflight.get(corr)
        self._touched_since(before, entry[0] if entry is not None else None)

    def _deliver(self, conn: Conn, corr: int, resp: Any) -> None:
        if conn.proc.blackholed_until > self.world.now:
            entry = conn.inflight.get(corr)
            if entry is not None:
                entry[0].on_done(self._resolved)  # black-holed: resolves at its timeout
            return
        entry = conn.inflight.pop(corr, None)
        if entry is None or not conn.open:
            return
        fut, timer = entry
        timer.cancel()
        fut.set(resp)

    # -- FindCoordinator (a bootstrap broker, its own connection) ---------------------------------

    def find_coordinator(self, proc: Process, timeout_ms: float) -> Future:
        fut = Future()
        world = self.world
        up = [n for n, ok in enumerate(world.cluster.up) if ok]
        if not up:
            proc.call_at(world.now + self.latency(), fut.set, Failure("no broker reachable"))
            return fut
        node = world.rng.choice(up)
        timer = proc.call_at(world.now + timeout_ms, fut.set, Failure("lookup timed out"))
        before = world.touches
        if self._lost(proc):
            self._touched_since(before, fut)
            return fut
        there = world.now + self.latency()

        def answer() -> None:
            if not world.cluster.up[node]:
                return
            before = world.touches
            resp = world.cluster.find_coordinator(node)
            if not self._lost(proc):
                proc.call_at(world.now + self.latency(), deliver, resp)
            self._touched_since(before, fut)

        def deliver(resp: FindCoordinatorResponse) -> None:
            if proc.blackholed_until > world.now:
                fut.on_done(self._resolved)
                return
            timer.cancel()
            fut.set(resp)

        world.sched.at(there, answer)
        self._touched_since(before, fut)
        return fut
