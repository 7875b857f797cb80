"""The server assignors of the simulated consumer-group coordinator (KIP-848).

- :func:`sticky_assign` stands for Kafka's ``uniform`` (its default): balanced over every
  partition, and sticky.
- :func:`range_assign` is Kafka 4.4.0's ``range`` for a group whose members all subscribe
  to the same topics, without racks: per topic, the members in order (static members first,
  by instance id, then the others by member id) take consecutive ranges, the first ``n % m``
  one partition more. It is not sticky: a member that sorts earlier takes the low partitions
  from whoever had them. ``test_model_vs_kafka_848.py`` compares it with the broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from kgroup._core._kip848_state import IdPartition

__all__ = ["range_assign", "sticky_assign"]


def sticky_assign(
    members: list[str],
    universe: list[IdPartition],
    previous: Mapping[str, frozenset[IdPartition]],
) -> dict[str, frozenset[IdPartition]]:
    """A sticky, balanced target: counts differ by at most one; each member keeps what its
    previous target gave it up to its quota (members keeping more get the larger quotas
    first), the rest go to the members below quota. Deterministic in the member ids."""
    if not members:
        return {}
    inside = set(universe)
    kept = {m: sorted(p for p in previous.get(m, ()) if p in inside) for m in members}
    base, extra = divmod(len(universe), len(members))
    order = sorted(members, key=lambda m: (-len(kept[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    new: dict[str, list[IdPartition]] = {}
    taken: set[IdPartition] = set()
    for m in members:
        keep = [p for p in kept[m] if p not in taken][: quota[m]]
        new[m] = keep
        taken.update(keep)
    free = [p for p in universe if p not in taken]
    for m in sorted(members, key=lambda m: (len(new[m]), m)):
        while len(new[m]) < quota[m]:
            new[m].append(free.pop(0))
    return {m: frozenset(ps) for m, ps in new.items()}


def range_assign(
    members: Mapping[str, str | None], universe: list[IdPartition]
) -> dict[str, frozenset[IdPartition]]:
    """``range``: ``members`` maps each member id to its instance id (None: dynamic);
    ``universe`` is every partition of the subscribed topics."""
    if not members:
        return {}
    order = sorted(
        members,
        key=lambda m: (0, members[m] or "", m) if members[m] is not None else (1, "", m),
    )
    topics: dict[uuid.UUID, int] = {}
    for part in universe:
        topics[part.topic_id] = max(topics.get(part.topic_id, 0), part.partition + 1)
    new: dict[str, set[IdPartition]] = {m: set() for m in order}
    for topic, count in topics.items():
        base, extra = divmod(count, len(order))
        start = 0
        for i, m in enumerate(order):
            size = base + (1 if i < extra else 0)
            new[m].update(IdPartition(topic, p) for p in range(start, start + size))
            start += size
    inside = set(universe)
    return {m: frozenset(p for p in parts if p in inside) for m, parts in new.items()}
