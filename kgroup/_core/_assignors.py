"""Partition assignors for the embedded consumer protocol, and the rebalance-protocol choice.

The leader of a classic consumer group runs the assignor the broker selected (§7.4) over all
members' Subscriptions and hands each member an Assignment. This module holds the assignor
contract (:class:`Assignor`), the two built-in EAGER assignors of spec §7.3 of
``group-protocol-spec.md`` (``range`` and ``roundrobin``), the registry of built-in names
(``sticky`` and ``cooperative-sticky`` live in :mod:`kgroup._core._sticky`), and the
client-local choice between EAGER and COOPERATIVE rebalancing of §7.5. It is sans-I/O: pure
functions of their inputs.

Member order (both built-ins, §7.3): static members (``group_instance_id`` set) first,
ordered by instance id, then dynamic members ordered by member id, so static ids keep their
assignment across restarts; ids compare as Java strings do, by UTF-16 code unit. Topics are
processed in name order and every Assignment lists its partitions sorted by (topic,
partition), so the same input always gives the same output (a leader that produced a
different answer each time would cause needless partition moves).

Rack awareness (KIP-881): the leader passes a :class:`~kgroup._core._racks.TopicLayout` as
``partitions_per_topic``; ``range`` uses its replica racks as Kafka's does (below). The
sticky / cooperative-sticky assignors are in :mod:`kgroup._core._sticky`.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kgroup._core._consumer_protocol import Assignment, Subscription, TopicPartition
from kgroup._core._racks import member_rack, rack_aware, replica_racks
from kgroup._errors import AssignmentError, ConfigError

__all__ = [
    "Assignor",
    "BaseAssignor",
    "MemberSubscription",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "get_builtin_assignor",
    "select_rebalance_protocol",
    "sort_members",
]


class RebalanceProtocol(enum.IntEnum):
    """How a member gives up partitions in a rebalance (§7.5). Higher is preferred."""

    EAGER = 0
    """Revoke every owned partition before joining (§6.2, scenario G41)."""
    COOPERATIVE = 1
    """Keep owned partitions; revoke only the ones that move, then rejoin (KIP-429, §7.6)."""


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """One JoinGroup member as the leader sees it: ids plus its decoded Subscription."""

    member_id: str
    group_instance_id: str | None
    subscription: Subscription


@runtime_checkable
class Assignor(Protocol):
    """A partition assignor (Java's ``ConsumerPartitionAssignor``).

    ``name`` is what JoinGroup advertises and the broker selects (§7.4); it must be unique
    among a member's assignors. ``supported_protocols`` lists the rebalance protocols the
    assignor is correct under.

    ``user_data(topics)`` is called when the member builds its Subscription and returns the
    assignor-specific bytes to put in it (``None`` for none).

    ``assign(partitions_per_topic, members)`` runs on the leader only. It receives the
    partition count of every subscribed topic that has metadata (from the leader, a
    :class:`~kgroup.TopicLayout`, which also gives each partition's replica racks) and every
    member's Subscription, and MUST return an Assignment for **every** member (an empty one
    if it gets nothing). It must be deterministic and must not raise for any valid input.

    ``on_assignment(assignment, generation_id)`` is called on every member once its
    Assignment for ``generation_id`` arrives (§6.4 step 7).
    """

    # Read-only properties rather than plain attributes: a class attribute such as
    # ``supported_protocols = (RebalanceProtocol.EAGER,)`` (inferred as a 1-tuple) then still
    # satisfies the protocol under mypy, which treats mutable protocol attributes invariantly.
    @property
    def name(self) -> str: ...

    @property
    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]: ...

    def user_data(self, topics: Collection[str]) -> bytes | None: ...

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, Assignment]: ...

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None: ...


class BaseAssignor(abc.ABC):
    """Defaults for writing an assignor: EAGER only, no user data, ``on_assignment`` ignored.

    A subclass sets ``name`` and implements :meth:`assign`; :func:`sort_members` gives the
    conventional member order.
    """

    name: str
    supported_protocols: tuple[RebalanceProtocol, ...] = (RebalanceProtocol.EAGER,)

    def user_data(self, topics: Collection[str]) -> bytes | None:
        return None

    @abc.abstractmethod
    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, Assignment]: ...

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def sort_members(members: Iterable[MemberSubscription]) -> list[MemberSubscription]:
    """Members in assignment order (§7.3): static by instance id, then dynamic by member id.

    Raises :class:`AssignmentError` if two members share a member id.
    """
    ordered = sorted(members, key=_member_key)
    seen: set[str] = set()
    for m in ordered:
        if m.member_id in seen:
            raise AssignmentError(f"member id {m.member_id!r} appears twice in the group")
        seen.add(m.member_id)
    return ordered


def _java_order(value: str) -> bytes:
    """A key that sorts strings as Java's ``String.compareTo`` does: by UTF-16 code unit.

    Python compares code points, which differs where a character outside the BMP (a
    surrogate pair, D800-DFFF) meets one in U+E000-U+FFFF. Big-endian UTF-16 bytes compare
    like the code units they encode.
    """
    return value.encode("utf-16-be", "surrogatepass")


def _member_key(member: MemberSubscription) -> tuple[int, bytes, bytes]:
    """The sort key of :func:`sort_members`: Java's ``MemberInfo.compareTo`` (§7.3)."""
    if member.group_instance_id is not None:
        return (0, _java_order(member.group_instance_id), _java_order(member.member_id))
    return (1, _java_order(member.member_id), b"")


def _assignable_topics(
    partitions_per_topic: Mapping[str, int], subscribed: Iterable[frozenset[str]]
) -> list[str]:
    """Sorted union of subscribed topics that have metadata (others are skipped, §7.3)."""
    topics = sorted(set().union(*subscribed) & partitions_per_topic.keys())
    for topic in topics:
        count = partitions_per_topic[topic]
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise AssignmentError(f"invalid partition count {count!r} for topic {topic!r}")
    return topics


class RangeAssignor(BaseAssignor):
    """``range`` (§7.3): per topic, consecutive blocks of partitions in member order.

    For a topic with ``P`` partitions and ``C`` subscribers, the first ``P mod C`` subscribers
    get ``P div C + 1`` partitions and the rest ``P div C``. Topics with the same partition
    count and subscribers are therefore co-partitioned.

    Rack-aware (KIP-881), as Kafka's ``RangeAssignor``: when ``partitions_per_topic`` is a
    :class:`~kgroup.TopicLayout` and :func:`~kgroup._core._racks.rack_aware` holds for some
    topic (over its subscribers' racks and its partitions' replica racks), a first pass
    hands each member, within the same per-member counts, the partitions that have a
    replica on its rack (a member without a rack matches every partition): per topic in
    member order, the lowest such partitions; for topics with the same subscribers and
    partition count (co-partitioned, when some subscriber has a rack), partition by
    partition to the first member that matches it in all of them, so co-partitioning holds.
    A second pass deals the rest as above: each member in order takes the lowest partitions
    left, up to its count.
    """

    name = "range"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, Assignment]:
        ordered = sort_members(members)
        subscribed = [frozenset(m.subscription.topics) for m in ordered]
        result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ordered}
        states = [
            _RangeTopic(
                topic,
                partitions_per_topic,
                [m for m, s in zip(ordered, subscribed, strict=True) if topic in s],
            )
            for topic in _assignable_topics(partitions_per_topic, subscribed)
            if partitions_per_topic[topic] > 0
        ]
        if any(state.rack_aware for state in states):
            groups: dict[tuple[tuple[str, str | None], ...], dict[int, list[_RangeTopic]]] = {}
            for state in states:
                key = tuple(state.members.items())
                groups.setdefault(key, {}).setdefault(len(state.racks), []).append(state)
            for by_count in groups.values():
                for count, same in by_count.items():
                    if len(same) > 1:
                        _co_partitioned(same, count, result)
                    elif same[0].rack_aware:
                        same[0].deal(result, matching=True)
        for state in states:
            state.deal(result, matching=False)
        return {mid: Assignment(partitions=tuple(sorted(tps))) for mid, tps in result.items()}


class _RangeTopic:
    """One topic's range assignment in progress: its members (in order, with their racks),
    the partitions left, and each member's count so far."""

    def __init__(
        self, topic: str, layout: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> None:
        self.topic = topic
        self.members = {m.member_id: member_rack(m.subscription.rack_id) for m in members}
        count = layout[topic]
        self.left = dict.fromkeys(range(count))  # insertion-ordered set
        self.assigned = dict.fromkeys(self.members, 0)
        self.quota, self.extra = divmod(count, len(members))
        member_racks = {r for r in self.members.values() if r is not None}
        self.racks: list[frozenset[str]] = (
            [replica_racks(layout, topic, p) for p in range(count)] if member_racks else []
        )
        self.rack_aware = rack_aware(member_racks, self.racks)

    def matches(self, member_id: str, partition: int) -> bool:
        rack = self.members[member_id]
        return rack is None or rack in self.racks[partition]

    def room(self, member_id: str) -> int:
        """How many more partitions the member may get."""
        most = self.quota + (1 if self.extra > 0 else 0)
        return max(0, most - self.assigned[member_id])

    def give(
        self, member_id: str, partitions: Sequence[int], result: dict[str, list[TopicPartition]]
    ) -> None:
        result[member_id].extend(TopicPartition(self.topic, p) for p in partitions)
        self.assigned[member_id] += len(partitions)
        if self.assigned[member_id] > self.quota:
            self.extra -= 1
        for p in partitions:
            del self.left[p]

    def deal(self, result: dict[str, list[TopicPartition]], *, matching: bool) -> None:
        """Each member in order takes the lowest partitions left (that match its rack,
        when ``matching``), up to its room."""
        for member_id in self.members:
            if not self.left:
                return
            room = self.room(member_id)
            chosen = [p for p in self.left if not matching or self.matches(member_id, p)][:room]
            if chosen:
                self.give(member_id, chosen, result)


def _co_partitioned(
    states: Sequence[_RangeTopic], count: int, result: dict[str, list[TopicPartition]]
) -> None:
    """Rack matching for topics with the same members and partition count: partition ``p``
    of all of them goes to the first member that matches it in every topic and has room in
    every topic; a member with room in none is done."""
    remaining = list(states[0].members)
    for p in range(count):
        chosen = next(
            (m for m in remaining if all(s.matches(m, p) and s.room(m) > 0 for s in states)),
            None,
        )
        if chosen is None:
            continue
        for state in states:
            state.give(chosen, [p], result)
        if all(s.room(chosen) == 0 for s in states):
            remaining.remove(chosen)
            if not remaining:
                return


class RoundRobinAssignor(BaseAssignor):
    """``roundrobin`` (§7.3): all partitions dealt one by one around the member circle.

    Partitions of all subscribed topics are sorted by (topic, partition). For each, the
    circle advances to the next member subscribed to its topic, which gets it; the circle
    then steps past that member. Balanced when every member has the same subscription;
    with differing subscriptions it can be uneven, exactly as in the Java reference.
    """

    name = "roundrobin"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, Assignment]:
        ordered = sort_members(members)
        subscribed = [frozenset(m.subscription.topics) for m in ordered]
        result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ordered}
        pos = 0
        for topic in _assignable_topics(partitions_per_topic, subscribed):
            for partition in range(partitions_per_topic[topic]):
                # Terminates: the topic comes from the union, so some member subscribes to it.
                while topic not in subscribed[pos]:
                    pos = (pos + 1) % len(ordered)
                result[ordered[pos].member_id].append(TopicPartition(topic, partition))
                pos = (pos + 1) % len(ordered)
        return {mid: Assignment(partitions=tuple(tps)) for mid, tps in result.items()}


def _sticky() -> Assignor:
    from kgroup._core._sticky import StickyAssignor  # imported late: it builds on this module

    return StickyAssignor()


def _cooperative_sticky() -> Assignor:
    from kgroup._core._sticky import CooperativeStickyAssignor

    return CooperativeStickyAssignor()


_BUILTIN_ASSIGNORS: dict[str, Callable[[], Assignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    "sticky": _sticky,
    "cooperative-sticky": _cooperative_sticky,
}


def get_builtin_assignor(name: str) -> Assignor:
    """A new instance of the built-in assignor called ``name``."""
    factory = _BUILTIN_ASSIGNORS.get(name)
    if factory is None:
        known = ", ".join(sorted(_BUILTIN_ASSIGNORS))
        raise ConfigError("assignors", f"unknown assignor {name!r}; built-in assignors: {known}")
    return factory()


def select_rebalance_protocol(assignors: Sequence[Assignor]) -> RebalanceProtocol:
    """The highest rebalance protocol every assignor supports (§7.5, scenario G44).

    ``[range, cooperative-sticky]`` gives EAGER, ``[cooperative-sticky]`` COOPERATIVE.
    Raises :class:`ConfigError` (field ``assignors``) for an empty list, duplicate names, or
    no protocol in common.
    """
    if not assignors:
        raise ConfigError("assignors", "at least one assignor is required")
    names = [a.name for a in assignors]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError("assignors", f"duplicate assignor name(s): {', '.join(duplicates)}")
    common = set(RebalanceProtocol)
    for assignor in assignors:
        try:
            common &= {RebalanceProtocol(p) for p in assignor.supported_protocols}
        except ValueError as exc:
            raise ConfigError(
                "assignors", f"assignor {assignor.name!r} lists an unknown rebalance protocol"
            ) from exc
    if not common:
        listing = "; ".join(
            f"{a.name}: {', '.join(RebalanceProtocol(p).name for p in a.supported_protocols)}"
            for a in assignors
        )
        raise ConfigError(
            "assignors", f"no rebalance protocol is supported by every assignor ({listing})"
        )
    return max(common)
