"""The rebalance listener: what a member tells the application when partitions move.

Guarantees (spec §6.2, §6.4):

- Callbacks run only inside ``poll()`` (and ``close()``), in the task that called it, one
  at a time and never concurrently with each other.
- Under eager rebalancing, ``on_partitions_revoked`` is called with everything owned before
  every rejoin (even an empty set), then ``on_partitions_assigned`` with what was added
  (even an empty set) once the rebalance completes.
- ``on_partitions_lost`` replaces revoked when the member already lost its generation
  (session expiry, fencing, poll timeout): another member may own those partitions now, so
  do not commit for them.
- Each callback receives a fresh ``frozenset`` of :class:`TopicPartition`.
- A callback may be a plain function or a coroutine function. If it raises, kgroup logs
  ``member.listener_error`` with the traceback, finishes the rebalance step anyway (the
  partitions are released or installed as if it had returned) and raises
  :class:`ListenerError` from ``poll()`` afterwards.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol, runtime_checkable

from ._core._consumer_protocol import TopicPartition

__all__ = ["ItemListener", "RebalanceListener"]


@runtime_checkable
class RebalanceListener(Protocol):
    """What a member tells the application when partitions move.

    Subclass it and override any subset of the methods (each may be sync or async; the
    defaults do nothing), or pass any object with all three methods. kgroup also accepts an
    object with only some of them (a missing one is skipped), but a type checker accepts
    that only for a subclass.
    """

    def on_partitions_revoked(
        self, partitions: frozenset[TopicPartition]
    ) -> Awaitable[None] | None:
        """These partitions are moving away: finish and commit their work."""
        return None

    def on_partitions_assigned(
        self, partitions: frozenset[TopicPartition]
    ) -> Awaitable[None] | None:
        """These partitions are now this member's (called even when the set is empty)."""
        return None

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> Awaitable[None] | None:
        """These partitions were lost: another member may own them already; do not commit."""
        return None


@runtime_checkable
class ItemListener(Protocol):
    """The listener of a :class:`~kgroup.GroupProtocol` member: the same three callbacks
    with the same guarantees, called with item names instead of partitions."""

    def on_partitions_revoked(self, items: frozenset[str]) -> Awaitable[None] | None:
        """These items are moving away: finish their work."""
        return None

    def on_partitions_assigned(self, items: frozenset[str]) -> Awaitable[None] | None:
        """These items are now this member's (called even when the set is empty)."""
        return None

    def on_partitions_lost(self, items: frozenset[str]) -> Awaitable[None] | None:
        """These items were lost: another member may hold them already."""
        return None
