"""Ownership intervals and the invariant that no partition is held by two members at once.

A member *holds* a partition from the moment its ``on_partitions_assigned`` callback starts
until the first of:

* the END of its ``on_partitions_revoked`` callback (work done inside the callback, such as
  a final commit, still happens while the member holds the partition);
* the START of its ``on_partitions_lost`` callback (a member that lost a partition must not
  touch it any more);
* its lease deadline (``member.lease_expired``): the moment after which kgroup no longer
  vouches for the assignment, because the broker may have given it to someone else;
* the member's death (a crash ends every hold at once).

:class:`OwnershipLog` records these events (from any number of members, all on one clock)
and :meth:`OwnershipLog.check` raises :class:`OwnershipViolation` naming every pair of holds
of one partition that overlap in time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .._core._consumer_protocol import TopicPartition

__all__ = ["Hold", "OwnershipLog", "OwnershipViolation"]


@dataclass
class Hold:
    """One member's hold of one partition: ``[start, end)``; ``end`` is None while open."""

    member: str
    partition: TopicPartition
    generation: int
    start: float
    end: float | None = None
    ended_by: str | None = None

    def overlaps(self, other: Hold) -> bool:
        """Whether the two holds share an instant (open holds last forever)."""
        inf = float("inf")
        self_end = inf if self.end is None else self.end
        other_end = inf if other.end is None else other.end
        return self.start < other_end and other.start < self_end

    def __str__(self) -> str:
        end = "open" if self.end is None else f"{self.end:.3f} ({self.ended_by})"
        return f"{self.member} gen {self.generation} held {self.partition} {self.start:.3f}..{end}"


class OwnershipViolation(AssertionError):
    """Two members held one partition at the same time."""


@dataclass
class OwnershipLog:
    """Ownership intervals of every member of a group, built from listener events."""

    holds: list[Hold] = field(default_factory=list)
    _open: dict[tuple[str, TopicPartition], Hold] = field(default_factory=dict)

    def assigned(
        self, member: str, partitions: Iterable[TopicPartition], generation: int, at: float
    ) -> None:
        """``on_partitions_assigned`` started."""
        for tp in partitions:
            key = (member, tp)
            if key in self._open:
                continue  # still held (assigned again in a new generation): one hold
            hold = Hold(member, tp, generation, at)
            self._open[key] = hold
            self.holds.append(hold)

    def _end(self, member: str, partitions: Iterable[TopicPartition], at: float, how: str) -> None:
        for tp in partitions:
            hold = self._open.pop((member, tp), None)
            if hold is not None:
                hold.end = max(at, hold.start)
                hold.ended_by = how

    def revoked(self, member: str, partitions: Iterable[TopicPartition], at: float) -> None:
        """``on_partitions_revoked`` RETURNED (the member held them until then)."""
        self._end(member, partitions, at, "revoked")

    def lost(self, member: str, partitions: Iterable[TopicPartition], at: float) -> None:
        """``on_partitions_lost`` STARTED."""
        self._end(member, partitions, at, "lost")

    def lease_expired(self, member: str, deadline: float) -> None:
        """The member's lease ran out at ``deadline``: every hold it had then ends there,
        including holds already closed later than that (a revoke callback that was still
        running at the deadline: the event may be reported after it returned)."""
        for (who, tp), hold in list(self._open.items()):
            if who == member and hold.start <= deadline:
                self._end(member, [tp], deadline, "lease_expired")
        for hold in self.holds:
            if hold.member == member and hold.end is not None and hold.start <= deadline < hold.end:
                hold.end, hold.ended_by = deadline, "lease_expired"

    def died(self, member: str, at: float) -> None:
        """The member crashed or was closed: everything it still held ends."""
        for who, tp in list(self._open):
            if who == member:
                self._end(member, [tp], at, "died")

    def holders(self) -> dict[TopicPartition, list[str]]:
        """Who holds each partition now (open holds)."""
        result: dict[TopicPartition, list[str]] = {}
        for (member, tp), _hold in sorted(self._open.items(), key=lambda kv: kv[1].start):
            result.setdefault(tp, []).append(member)
        return result

    def overlaps(self) -> list[tuple[Hold, Hold]]:
        """Every pair of holds of the same partition by different members that overlap."""
        by_partition: dict[TopicPartition, list[Hold]] = {}
        for hold in self.holds:
            by_partition.setdefault(hold.partition, []).append(hold)
        found: list[tuple[Hold, Hold]] = []
        for holds in by_partition.values():
            holds.sort(key=lambda h: h.start)
            for i, a in enumerate(holds):
                for b in holds[i + 1 :]:
                    if a.end is not None and b.start >= a.end:
                        continue  # sorted by start: b and later ones may still overlap others
                    if a.member != b.member and a.overlaps(b):
                        found.append((a, b))
        return found

    def check(self) -> None:
        """Raise :class:`OwnershipViolation` if any partition had two holders at once."""
        found = self.overlaps()
        if found:
            lines = [f"  {a}\n    overlaps {b}" for a, b in found[:20]]
            more = f"\n  ... and {len(found) - 20} more" if len(found) > 20 else ""
            raise OwnershipViolation(
                f"{len(found)} overlapping hold(s) of a partition by two members:\n"
                + "\n".join(lines)
                + more
            )
