"""Rack information for rack-aware assignment (KIP-881, spec §7.3).

A member's rack is its ``client.rack`` (``GroupConfig.rack_id``, sent in Subscription v3); a
partition's replica racks are the ``broker.rack`` values of the brokers holding its replicas,
from the leader's Metadata response. The leader hands the assignor a :class:`TopicLayout`:
the partition counts it always had (a ``Mapping[str, int]``) that also answer
:meth:`TopicLayout.replica_racks`. An assignor that reads only the counts works unchanged; a
plain ``dict`` of counts means "no rack information".

:func:`rack_aware` is the condition under which Kafka's assignors turn rack awareness on;
:func:`replica_racks` reads the racks of a partition from either kind of mapping. Sans-I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence

__all__ = ["RackPools", "TopicLayout", "member_rack", "rack_aware", "replica_racks"]

_NO_RACKS: frozenset[str] = frozenset()


class TopicLayout(Mapping[str, int]):
    """Partition counts per topic, with the racks of each partition's replicas.

    ``TopicLayout({"orders": [{"r1", "r2"}, {"r2"}, set()]})`` is a topic of three
    partitions: partition 0 has replicas on racks ``r1`` and ``r2``, partition 1 on ``r2``
    only, partition 2 on brokers without a rack (or racks unknown). As a mapping it is the
    partition counts (``layout["orders"] == 3``), so it can be passed wherever
    ``partitions_per_topic`` is expected; equality with another mapping compares the counts
    only.
    """

    __slots__ = ("_racks",)

    def __init__(self, racks: Mapping[str, Sequence[Iterable[str]]]) -> None:
        self._racks: dict[str, tuple[frozenset[str], ...]] = {
            topic: tuple(frozenset(partition) for partition in partitions)
            for topic, partitions in racks.items()
        }

    @classmethod
    def without_racks(cls, partitions_per_topic: Mapping[str, int]) -> TopicLayout:
        """Counts only: every partition's replica racks are unknown."""
        return cls({t: [()] * n for t, n in partitions_per_topic.items()})

    def __getitem__(self, topic: str) -> int:
        return len(self._racks[topic])

    def __iter__(self) -> Iterator[str]:
        return iter(self._racks)

    def __len__(self) -> int:
        return len(self._racks)

    def replica_racks(self, topic: str, partition: int) -> frozenset[str]:
        """The racks of the brokers holding the partition's replicas; empty when none of
        them has a rack, or the partition is unknown."""
        partitions = self._racks.get(topic, ())
        if 0 <= partition < len(partitions):
            return partitions[partition]
        return _NO_RACKS

    def __repr__(self) -> str:
        shown = {t: [sorted(r) for r in parts] for t, parts in self._racks.items()}
        return f"TopicLayout({shown!r})"


def replica_racks(layout: Mapping[str, int], topic: str, partition: int) -> frozenset[str]:
    """:meth:`TopicLayout.replica_racks` for a layout; no racks for a plain mapping."""
    if isinstance(layout, TopicLayout):
        return layout.replica_racks(topic, partition)
    return _NO_RACKS


def member_rack(rack_id: str | None) -> str | None:
    """A member's rack: ``client.rack``, where an empty string means none (as in Java)."""
    return rack_id or None


def rack_aware(member_racks: Collection[str], partition_racks: Iterable[frozenset[str]]) -> bool:
    """Kafka's condition for rack-aware assignment (KIP-881), over the members and the
    partitions in question: some member has a rack, some partition has a replica on a
    member's rack, and the partitions do not all have replicas on every rack that any of
    them has (then every member would be as close to every partition as it can be)."""
    if not member_racks:
        return False
    per_partition = list(partition_racks)
    every: set[str] = set().union(*per_partition)
    if every.isdisjoint(member_racks):
        return False
    return any(racks != every for racks in per_partition)


class RackPools:
    """The pools of the sticky count model (:data:`~kgroup._core._sticky_plan.Pool`): the
    partitions of a topic split by which member racks their replicas are on, so that
    within a pool every member is equally aligned with every partition.

    Rack-aware under Kafka's condition (:func:`rack_aware`, over all members and all the
    assigned topics' partitions, as Java's sticky assignors decide it); otherwise every
    topic is a single pool and no member is aligned with anything.
    """

    def __init__(
        self,
        layout: Mapping[str, int],
        topics: Sequence[str],
        racks: Sequence[str | None],
    ) -> None:
        self.racks = racks
        known = {r for r in racks if r is not None}
        replicas = {t: [replica_racks(layout, t, p) for p in range(layout[t])] for t in topics}
        self.enabled = rack_aware(known, (r for parts in replicas.values() for r in parts))
        self.of_partition: dict[str, list[int]] = {}
        self.pools: dict[str, list[tuple[str, int]]] = {}
        self._near: dict[tuple[str, int], frozenset[str]] = {}
        for topic in topics:
            classes: dict[frozenset[str], int] = {}
            near = [r & known if self.enabled else _NO_RACKS for r in replicas[topic]]
            self.of_partition[topic] = [classes.setdefault(k, len(classes)) for k in near]
            if not classes:
                classes[_NO_RACKS] = 0
            self.pools[topic] = [(topic, k) for k in classes.values()]
            for key, k in classes.items():
                self._near[(topic, k)] = key

    def pool(self, topic: str, partition: int) -> tuple[str, int]:
        return (topic, self.of_partition[topic][partition])

    def aligned(self, member: int) -> frozenset[tuple[str, int]]:
        """The pools with a replica on the rack of member ``member`` (by index)."""
        rack = self.racks[member]
        return frozenset(pool for pool, near in self._near.items() if rack in near)
