"""The consumer protocol (KIP-848) in the simulated world: what ``_world.py`` adds for a
``consumer`` schedule.

- The coordinator runs :class:`~._model_848.ConsumerGroupModel` (loaded from the persisted
  record when it moves, with the same placement, loading, crashes and injected errors as a
  classic group); every broker answers Metadata by topic id for the schedule's topics.
- Members run ``GroupMember(GroupConfig(..., group_protocol="consumer"))`` with the broker's
  session timeout as ``consumer_session_timeout_ms`` (the lease; kgroup also reads it with
  DescribeConfigs, which every broker answers here) and the schedule's
  ``max_poll_ms`` as the poll timer (and so the rebalance timeout); the heartbeat interval
  comes from the model's answers.
- Member ids are client-generated UUIDs (KIP-1082): :func:`deterministic_member_ids` makes
  them a function of the schedule, so that a seed replays byte for byte.
- :func:`stable_state_848` is invariant 2 for these groups; :func:`stable_bound_848_ms`
  its bound.
"""

from __future__ import annotations

import contextlib
import random
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from kgroup import GroupConfig, MemberState, TopicPartition
from kgroup._core._kip848_member import ConsumerProtocolMember
from kgroup._core._kip848_state import ConsumerState, IdPartition
from kgroup._errors import ErrorCode
from kgroup._runtime._kip848 import ConsumerProtocolRuntime
from kgroup.testing.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribedConfig,
    DescribedConfigs,
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
)

from ._model import ModelError
from ._model_848 import REGEX_REFRESH_MIN_MS, ConsumerGroupModel, MemberState848, topic_id

if TYPE_CHECKING:
    from ._process import Process
    from ._world import Params, World

__all__ = [
    "INJECTED_848",
    "assigned_topic_ids",
    "consumer_config",
    "core_848",
    "describe_configs_response",
    "deterministic_member_ids",
    "error_response_848",
    "metadata_response",
    "plan_offsets_version",
    "plan_topic_creation",
    "plan_topic_deletion",
    "plan_topic_growth",
    "plan_topic_recreation",
    "spin_guard",
    "stable_bound_848_ms",
    "stable_state_848",
    "topic_ids",
]

E = ErrorCode

#: Metadata's UNKNOWN_TOPIC_ID (not in kgroup.ErrorCode).
UNKNOWN_TOPIC_ID = 100

#: Error codes the broker may answer a ConsumerGroupHeartbeat with, leaving the group as it
#: is: the coordinator errors, and a fenced answer (Kafka answers FENCED_MEMBER_EPOCH and
#: UNKNOWN_MEMBER_ID without removing the member, e.g. to a stale epoch; the member then
#: rejoins at epoch 0 under its member id).
INJECTED_848: tuple[int, ...] = (
    E.COORDINATOR_LOAD_IN_PROGRESS,
    E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_COORDINATOR,
    E.FENCED_MEMBER_EPOCH,
    E.UNKNOWN_MEMBER_ID,
)


def consumer_config(
    params: Params, slot: str, instance_id: str | None, *, handoff: bool = False
) -> GroupConfig:
    """A consumer-protocol member of schedule ``params`` (GroupConfig refuses the classic
    fields: the broker owns the session, the interval and the assignment); ``handoff``:
    close() waits for the group's next heartbeat tick (deviations.md row 22)."""
    names = tuple(t for t, _ in params.topics) + (
        (params.later_topic[0],) if params.later_topic else ()
    )
    return GroupConfig(
        bootstrap_servers="b0:9092",
        group_id="sim-group",
        topics=() if params.topic_pattern else names,
        topic_pattern=params.topic_pattern,
        group_protocol="consumer",
        group_instance_id=instance_id,
        # Uniform is the broker's default: asked for by name only when it is range.
        group_remote_assignor=None
        if params.remote_assignor == "uniform"
        else params.remote_assignor,
        consumer_session_timeout_ms=params.session_ms,
        max_poll_interval_ms=params.max_poll_ms,
        request_timeout_ms=params.request_timeout_ms,
        client_id=slot,
        handoff_on_close=handoff,
    )


def core_848(proc: Process) -> ConsumerProtocolMember:
    return cast(ConsumerProtocolMember, proc.member._core)


@contextlib.contextmanager
def deterministic_member_ids(seed: int) -> Iterator[None]:
    """``uuid.uuid4`` (the member ids kgroup generates) as a counter of the schedule while
    it runs, so that a seed replays byte for byte (restored after)."""
    saved = uuid.uuid4
    counter = [0]

    def next_id() -> uuid.UUID:
        counter[0] += 1
        return uuid.UUID(int=((seed & 0xFFFFFFFF) << 64) | counter[0], version=4)

    uuid.uuid4 = next_id
    try:
        yield
    finally:
        uuid.uuid4 = saved


#: Rounds of ConsumerProtocolRuntime._wait_in_poll at one virtual instant after which
#: :func:`spin_guard` declares the member stuck.
SPIN_ROUNDS = 10_000


@contextlib.contextmanager
def spin_guard(world: World) -> Iterator[None]:
    """A consumer-protocol runtime that waits in its poll path at one virtual instant
    ``SPIN_ROUNDS`` times fails the schedule (``livelock``) instead of hanging it: such a
    loop may never yield to the scheduler (a close() after a poll() cancelled mid-callback
    did, before kgroup fixed it)."""
    from ._world import SimulationFailure

    original = ConsumerProtocolRuntime._wait_in_poll
    seen = {"at": -1.0, "rounds": 0}

    async def wait_in_poll(
        self: ConsumerProtocolRuntime, until: float | None, deadline: float | None
    ) -> None:
        if world.now != seen["at"]:
            seen["at"], seen["rounds"] = world.now, 0
        seen["rounds"] += 1
        if seen["rounds"] > SPIN_ROUNDS:
            message = f"a member's poll path waited {SPIN_ROUNDS} times at {world.now:.3f} ms"
            world.fail(SimulationFailure("livelock", message))
            raise RuntimeError(message)
        await original(self, until, deadline)

    ConsumerProtocolRuntime._wait_in_poll = wait_in_poll  # type: ignore[method-assign]
    try:
        yield
    finally:
        ConsumerProtocolRuntime._wait_in_poll = original  # type: ignore[method-assign]


#: The group config that bounds a consumer-protocol member's lease (kgroup reads it).
SESSION_TIMEOUT_KEY = "consumer.session.timeout.ms"
RESOURCE_GROUP = 32
CONFIG_SOURCE_DEFAULT = 5


def describe_configs_response(world: World, msg: DescribeConfigsRequest) -> DescribeConfigsResponse:
    """DescribeConfigs from any broker: a GROUP's ``consumer.session.timeout.ms`` is the
    schedule's session timeout (the broker default here: no group overrides)."""
    results = []
    for query in msg.resources:
        if query.resource_type != RESOURCE_GROUP:
            raise ModelError(f"DescribeConfigs for resource type {query.resource_type}")
        entry = DescribedConfig(
            name=SESSION_TIMEOUT_KEY,
            value=str(world.params.session_ms),
            source=CONFIG_SOURCE_DEFAULT,
        )
        wanted = query.keys is None or SESSION_TIMEOUT_KEY in query.keys
        results.append(
            DescribedConfigs(
                error_code=E.NONE,
                resource_type=RESOURCE_GROUP,
                resource_name=query.resource_name,
                configs=(entry,) if wanted else (),
            )
        )
    return DescribeConfigsResponse(results=tuple(results))


#: How likely a consumer-protocol schedule grows its first topic in the fault window.
GROWTH_PROBABILITY = 0.3


def plan_topic_growth(world: World, seed: int, start: float, end: float) -> None:
    """With :data:`GROWTH_PROBABILITY`, topic ``t0`` gains 1 to 3 partitions at a random
    time in the fault window. Drawn from a stream of its own, so the schedule's other draws
    are the same with it or without."""
    rng = random.Random(f"kgroup-sim-topics-{seed}")
    if rng.random() < GROWTH_PROBABILITY:
        world.sched.at(rng.uniform(start, end), grow_topic, world, "t0", rng.randint(1, 3))


def plan_topic_creation(world: World, seed: int, start: float, end: float) -> None:
    """A schedule whose members subscribe to a topic that does not exist yet
    (``Params.later_topic``) creates it at a random time in the fault window (a stream of
    its own)."""
    later = world.params.later_topic
    if later is not None:
        rng = random.Random(f"kgroup-sim-creation-{seed}")
        world.sched.at(rng.uniform(start, end), create_topic, world, *later)


def create_topic(world: World, topic: str, partitions: int) -> None:
    """CreateTopics of a topic the members subscribe to: Metadata names it (a new topic
    id the members must look up), and the group's coordinator bumps the group epoch; the
    next target shares its partitions out too. Like :func:`grow_topic`, the change waits
    for a coordinator that has the group."""
    group = world.cluster.group
    if not isinstance(group, ConsumerGroupModel):
        world.sched.at(world.now + 50.0, create_topic, world, topic, partitions)
        return
    world.count("create_topic")
    world.topics[topic] = partitions
    world.log("fault", f"topic {topic} created with {partitions} partitions")
    world.guard_model(group.topics_changed, dict(world.topics), dict(world.topic_recreations))


#: How likely a consumer-protocol schedule with a second topic deletes it in the fault
#: window.
DELETION_PROBABILITY = 0.3


def plan_topic_deletion(world: World, seed: int, start: float, end: float) -> None:
    """With :data:`DELETION_PROBABILITY`, a schedule with a second topic (``t1``) deletes it
    at a random time in the fault window (the members stay subscribed to it by name).
    Drawn from a stream of its own, like the growth."""
    rng = random.Random(f"kgroup-sim-deletion-{seed}")
    if "t1" in world.topics and rng.random() < DELETION_PROBABILITY:
        world.sched.at(rng.uniform(start, end), delete_topic, world, "t1")


def delete_topic(world: World, topic: str) -> None:
    """DeleteTopics: Metadata no longer names the topic (its id is UNKNOWN_TOPIC_ID), and
    the group's coordinator bumps the group epoch; the next target leaves its partitions
    out, and each owner revokes them as it would any partition (Kafka 4.4.0 waits for the
    owner to report them gone: the ``deletion`` script of ``test_model_vs_kafka_848.py``).
    Like :func:`grow_topic`, the change waits for a coordinator that has the group."""
    group = world.cluster.group
    if not isinstance(group, ConsumerGroupModel):
        world.sched.at(world.now + 50.0, delete_topic, world, topic)
        return
    world.count("delete_topic")
    del world.topics[topic]
    world.log("fault", f"topic {topic} deleted")
    world.guard_model(group.topics_changed, dict(world.topics), dict(world.topic_recreations))


#: How likely a consumer-protocol schedule deletes its first topic in the fault window and
#: creates it again under its name.
RECREATION_PROBABILITY = 0.2


#: The share of consumer-protocol schedules whose broker lacks OffsetCommit v10 (Kafka 4.0
#: and 4.1): kgroup's commits then go by name (the wire layer's fallback, modelled in
#: ``_network``).
OFFSETS_BY_NAME_PROBABILITY = 0.25


def plan_offsets_version(world: World, seed: int) -> None:
    """Whether the broker has OffsetCommit v10 (by topic id): with
    :data:`OFFSETS_BY_NAME_PROBABILITY` it has not. A stream of its own."""
    rng = random.Random(f"kgroup-sim-offsets-version-{seed}")
    world.offsets_by_name = rng.random() < OFFSETS_BY_NAME_PROBABILITY
    if world.offsets_by_name:
        world.count_event("offsets_by_name")


def plan_topic_recreation(world: World, seed: int, start: float, end: float) -> None:
    """With :data:`RECREATION_PROBABILITY`, topic ``t0`` is deleted at a random time in the
    fault window and created again under its name 0 to 2 s later, with as many partitions
    or up to two more (the members stay subscribed to it by name). A stream of its own,
    like the growth."""
    rng = random.Random(f"kgroup-sim-recreation-{seed}")
    if rng.random() < RECREATION_PROBABILITY:
        at = rng.uniform(start, end)
        gap, more = rng.uniform(0.0, 2_000.0), rng.randint(0, 2)
        world.sched.at(at, recreate_topic, world, "t0", gap, more)


def recreate_topic(world: World, topic: str, gap_ms: float, more: int) -> None:
    """DeleteTopics of ``topic`` (:func:`delete_topic`), then CreateTopics under the same
    name ``gap_ms`` later with ``more`` partitions more than it had: a new topic id
    (:func:`topic_ids`). To Kafka the new partitions are other partitions than the old
    ones of the same names (``test_topic_changes.py`` shows a member given one while the
    old one's owner still revokes it), so invariant 1 tells holds of the two apart
    (``Hold.topic_id``). Waits, like the others, for a coordinator that has the group."""
    group = world.cluster.group
    if not isinstance(group, ConsumerGroupModel) or topic not in world.topics:
        world.sched.at(world.now + 50.0, recreate_topic, world, topic, gap_ms, more)
        return
    world.count("recreate_topic")
    partitions = world.topics[topic] + more
    delete_topic(world, topic)
    world.sched.at(world.now + gap_ms, _create_again, world, topic, partitions)


def _create_again(world: World, topic: str, partitions: int) -> None:
    group = world.cluster.group
    if not isinstance(group, ConsumerGroupModel):
        world.sched.at(world.now + 50.0, _create_again, world, topic, partitions)
        return
    world.topic_recreations[topic] += 1
    world.topics[topic] = partitions
    world.log("fault", f"topic {topic} created again with {partitions} partitions (a new id)")
    world.guard_model(group.topics_changed, dict(world.topics), dict(world.topic_recreations))


def topic_ids(world: World) -> dict[str, uuid.UUID]:
    """Every topic's current id, by name (a topic created again has a new one)."""
    return {t: topic_id(t, world.topic_recreations[t]) for t in world.topics}


def grow_topic(world: World, topic: str, extra: int) -> None:
    """CreatePartitions: Metadata names the new partitions at once, and the group's
    coordinator bumps the group epoch (:meth:`ConsumerGroupModel.topics_changed`). While no
    coordinator has the group loaded, the change waits for one (a broker's metadata update
    and a group load come in some order; a load from a record of the old partitions would
    not know they changed)."""
    group = world.cluster.group
    if not isinstance(group, ConsumerGroupModel) or topic not in world.topics:
        # (A topic being created again: it grows once it exists.)
        world.sched.at(world.now + 50.0, grow_topic, world, topic, extra)
        return
    world.count("grow_topic")
    world.topics[topic] += extra
    world.log("fault", f"topic {topic} grows to {world.topics[topic]} partitions")
    world.guard_model(group.topics_changed, dict(world.topics), dict(world.topic_recreations))


def metadata_response(world: World, msg: MetadataRequest) -> MetadataResponse:
    """Metadata from any broker: the schedule's topics, by id (v12+) or by name."""
    topics = dict(world.topics)
    ids = topic_ids(world)
    by_id = {tid: t for t, tid in ids.items()}
    nodes = world.cluster.up
    brokers = tuple(
        MetadataBroker(node_id=n, host=f"b{n}", port=9092) for n, ok in enumerate(nodes) if ok
    )
    found: list[MetadataTopic] = []
    if msg.topic_ids is not None:
        wanted: list[tuple[uuid.UUID, str | None]] = [(t, by_id.get(t)) for t in msg.topic_ids]
    else:
        names = msg.topics if msg.topics is not None else tuple(topics)
        wanted = [(ids.get(n) or topic_id(n), n if n in topics else None) for n in names]
    for tid, name in wanted:
        if name is None:
            found.append(MetadataTopic(error_code=UNKNOWN_TOPIC_ID, name=None, topic_id=tid))
            continue
        parts = tuple(
            MetadataPartition(partition=p, leader_id=p % len(nodes)) for p in range(topics[name])
        )
        found.append(MetadataTopic(error_code=E.NONE, name=name, topic_id=tid, partitions=parts))
    return MetadataResponse(brokers=brokers, cluster_id="sim", topics=tuple(found))


def error_response_848(msg: ConsumerGroupHeartbeatRequest, error: int) -> Any:
    return ConsumerGroupHeartbeatResponse(error_code=error, member_epoch=0)


def stable_bound_848_ms(params: Params) -> float:
    """How long after the faults stop a consumer-protocol group must be stable (invariant 2).

    After the faults stop (F): every request sent before F has resolved within the request
    timeout T, and every coordinator load begun before F has ended within S (a load takes
    at most one session timeout S here), which re-arms every member's session timer. So a
    dead incarnation's member id (dynamic, or static without its -2) is removed by F + 2S;
    a slow poll begun before F ends within 1.5 R (R = max_poll, the rebalance timeout),
    after which its member leaves (poll timer) and rejoins. Once the membership is final
    (by F + 2S + 1.5R), the group converges in a bounded number of heartbeat rounds: the
    target is recomputed at the next heartbeat (H), owners revoke at their next poll and
    acknowledge at once (H), the new owners get the partitions at their next heartbeat (H),
    and acknowledge (H); a member the broker fenced on the way rejoins (H). A second
    of latency and backoff (a static member retrying UNRELEASED_INSTANCE_ID waits up to
    ``retry_backoff_max_ms``). Hence ``T + 2S + 1.5R + 6H + 2 s``. With a regex
    subscription, a topic created under the faults is resolved at the first heartbeat
    after the last resolution plus :data:`~._model_848.REGEX_REFRESH_MIN_MS` (G): add
    ``G + H``.
    """
    regex = REGEX_REFRESH_MIN_MS + params.heartbeat_ms if params.topic_pattern else 0.0
    return (
        params.request_timeout_ms
        + 2 * params.session_ms
        + 1.5 * params.max_poll_ms
        + 6 * params.heartbeat_ms
        + 2_000
        + regex
    )


def stable_state_848(world: World) -> str | None:
    """None when the consumer-protocol group is stable: every member slot live and in the
    group (no other member: no dead incarnation, no static member gone with -2), the target
    up to date (assignment epoch = group epoch), every member STABLE on the broker at the
    target epoch, kgroup's member STABLE at the same epoch with nothing pending, its lease
    valid, holding exactly its target, and every partition held exactly once."""
    cluster = world.cluster
    group = cluster.active_group()
    if group is None or not cluster.up[cluster.coordinator]:
        return "coordinator not loaded"
    assert isinstance(group, ConsumerGroupModel)
    procs = world.live()
    if len(procs) != len(world.slots) or any(p.closing for p in procs):
        return "members not all live"
    if not all(p.started for p in procs):
        return "members not all started"
    ids = {core_848(p).member_id: p for p in procs}
    if set(ids) != set(group.members):
        return f"members {sorted(group.members)} != {sorted(ids)}"
    if group.assignment_epoch != group.group_epoch:
        return f"target at epoch {group.assignment_epoch}, group at {group.group_epoch}"
    if group.regexes_pending():
        return f"regexes not resolved against the topics now: {dict(group.resolved)}"
    union: set[Any] = set()
    count = 0
    names = {tid: t for t, tid in topic_ids(world).items()}
    for member_id, proc in ids.items():
        broker = group.members[member_id]
        if broker.state is not MemberState848.STABLE or broker.epoch != group.group_epoch:
            return f"{proc.holder} {broker.state.name} at epoch {broker.epoch} on the broker"
        core = core_848(proc)
        if core.state is not ConsumerState.STABLE or proc.member.state is not MemberState.STABLE:
            return f"{proc.holder} {core.state.name}"
        if core.member_epoch != broker.epoch:
            return f"{proc.holder} at epoch {core.member_epoch}, broker {broker.epoch}"
        if core.rebalance_pending() or core.owned != broker.assigned:
            return f"{proc.holder} not done reconciling"
        if proc.completed_generation != broker.epoch:
            return f"{proc.holder} has not polled at epoch {broker.epoch}"
        valid = core.valid_until
        if valid is not None and valid <= world.now:
            return f"{proc.holder} lease lapsed"
        owned = proc.owned
        expected = {_named(p, names) for p in group.target.get(member_id, frozenset())}
        if owned != expected:
            return f"{proc.holder} owns {sorted(map(str, owned))} != its target"
        union |= owned
        count += len(owned)
    everything = {_named(p, names) for p in group.universe}
    if union != everything or count != len(everything):
        return "partitions not each held exactly once"
    return None


def assigned_topic_ids(proc: Process, partitions: frozenset[Any]) -> dict[Any, uuid.UUID]:
    """The topic id behind each partition an assign callback of a consumer-protocol member
    is given: the member's reconciliation installs them by id (``owned_after``), so a
    topic created again under its name is told apart from the old one (invariant 1).
    A partition it cannot find there gets the topic's current id."""
    core = core_848(proc)
    action = core._reconciling
    found: dict[Any, uuid.UUID] = {}
    if action is not None:
        for part in action.owned_after - core.owned:
            name = core.names.get(part.topic_id)
            if name is not None:
                found[TopicPartition(name, part.partition)] = part.topic_id
    current = topic_ids(proc.world)
    for tp in partitions:
        if tp not in found and tp.topic in current:
            found[tp] = current[tp.topic]
    return found


def _named(part: IdPartition, names: dict[uuid.UUID, str]) -> Any:
    return TopicPartition(names[part.topic_id], part.partition)
