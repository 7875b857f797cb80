"""What a schedule's members run (its *group kind*), and the kind's part of convergence.

A schedule's kind is drawn from its seed (:func:`draw_kind`, from a random stream of its
own, so the rest of a schedule's draws do not depend on it):

- ``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``: a consumer group, every
  member with that one assignor (``cooperative-sticky`` alone makes a member COOPERATIVE);
- ``upgrade``: a consumer group in the middle of a rolling upgrade (spec §7.6). Each slot
  starts with the old or the new assignor list, and a restarted slot comes back with the
  new one with probability ``upgrade_p``. Three upgrades: ``eager-to-bridge`` (``range``
  -> ``cooperative-sticky, range``: the broker keeps selecting range, all EAGER),
  ``bridge-to-cooperative`` (``cooperative-sticky, range`` -> ``cooperative-sticky``: the
  broker selects cooperative-sticky; EAGER and COOPERATIVE members mixed), and
  ``skipped-bridge`` (``range`` -> ``cooperative-sticky``, the misconfiguration: a member
  with no name in common with the group is refused with INCONSISTENT_GROUP_PROTOCOL, a
  documented fatal error; the application then restarts it with the bridge list);
- ``leader``: ``kgroup.LeaderElection`` (cooperative or eager);
- ``shards``: ``kgroup.WorkSharding`` over named resources (cooperative or eager; usually
  every member lists every resource, sometimes each lists a subset);
- ``consumer``: a consumer group on the KIP-848 ``consumer`` protocol (the broker assigns;
  ``_model_848.py``, ``_world848.py``). Drawn first, from a stream of its own, for
  ``CONSUMER_SHARE`` of the seeds; the other seeds draw a classic flavor as before, so a
  classic seed keeps the kind it always had.

Convergence per kind (:func:`kind_unstable`): every item (partition, ``LEADER``, resource)
held exactly once is checked by ``stable_state`` for all kinds; on top, for ``leader``
every member's ``LeaderElection.leader`` names the holder, and for ``shards`` the members'
counts differ by at most one.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kgroup import LEADER, LeaderElection, TopicPartition, WorkSharding

if TYPE_CHECKING:
    from ._process import Process

__all__ = [
    "BRIDGE",
    "CONSUMER",
    "FLAVORS",
    "GroupKind",
    "draw_kind",
    "kind_unstable",
    "member_cooperative",
    "plain_kind",
    "universe",
]

#: Relative weights of the classic-protocol flavors.
CLASSIC_FLAVORS: dict[str, int] = {
    "range": 15,
    "roundrobin": 10,
    "sticky": 10,
    "cooperative-sticky": 20,
    "upgrade": 15,
    "leader": 15,
    "shards": 15,
}

#: The KIP-848 ``consumer`` protocol's flavor, and its share of the seeds (out of 100).
CONSUMER = "consumer"
CONSUMER_SHARE = 20

#: Share of the default run per flavor (out of 100).
FLAVORS: dict[str, float] = {
    **{name: w * (100 - CONSUMER_SHARE) / 100 for name, w in CLASSIC_FLAVORS.items()},
    CONSUMER: CONSUMER_SHARE,
}

RANGE = ("range",)
BRIDGE = ("cooperative-sticky", "range")
COOPERATIVE = ("cooperative-sticky",)

#: name -> (old list, new list, weight)
UPGRADES: dict[str, tuple[tuple[str, ...], tuple[str, ...], int]] = {
    "eager-to-bridge": (RANGE, BRIDGE, 45),
    "bridge-to-cooperative": (BRIDGE, COOPERATIVE, 45),
    "skipped-bridge": (RANGE, COOPERATIVE, 10),
}

#: Assignors that support COOPERATIVE; a member is COOPERATIVE when all of its do (§7.5).
COOPERATIVE_ASSIGNORS = frozenset({"cooperative-sticky"})


@dataclass(frozen=True)
class GroupKind:
    flavor: str
    #: Consumer kinds: each slot's assignor list for its first incarnation.
    assignors: tuple[tuple[str, ...], ...] = ()
    upgrade: str | None = None
    #: A restarted slot runs this list with probability ``upgrade_p`` (upgrade only).
    upgrade_to: tuple[str, ...] = ()
    upgrade_p: float = 0.0
    #: leader and shards: COOPERATIVE (else EAGER).
    cooperative: bool = True
    #: shards: each slot's resource list.
    resources: tuple[tuple[str, ...], ...] = ()

    @property
    def consumer_protocol(self) -> bool:
        """A KIP-848 ``consumer``-protocol group."""
        return self.flavor == CONSUMER

    @property
    def protocol(self) -> bool:
        """Not a consumer group: the members run a GroupProtocol."""
        return self.flavor in ("leader", "shards")

    def describe(self) -> str:
        if self.flavor == "upgrade":
            starts = ";".join(",".join(a) for a in self.assignors)
            return (
                f"upgrade={self.upgrade} slots=[{starts}] to={','.join(self.upgrade_to)} "
                f"p_upgrade={self.upgrade_p}"
            )
        if self.flavor == "leader":
            return f"leader cooperative={self.cooperative}"
        if self.flavor == "shards":
            every = sorted({r for rs in self.resources for r in rs})
            subsets = any(len(rs) != len(every) for rs in self.resources)
            return (
                f"shards cooperative={self.cooperative} resources={len(every)}"
                f"{' (subsets)' if subsets else ''}"
            )
        if self.consumer_protocol:
            return "consumer protocol (KIP-848)"
        return f"assignor={self.flavor}"

    def make_protocol(self, slot_index: int) -> LeaderElection | WorkSharding:
        if self.flavor == "leader":
            return LeaderElection(cooperative=self.cooperative)
        return WorkSharding(self.resources[slot_index], cooperative=self.cooperative)


def plain_kind(flavor: str, members: int) -> GroupKind:
    """Every member with the one assignor ``flavor``."""
    return GroupKind(flavor, assignors=((flavor,),) * members)


def draw_flavor(seed: int) -> str:
    if random.Random(f"kgroup-sim-protocol-{seed}").random() * 100 < CONSUMER_SHARE:
        return CONSUMER
    rng = random.Random(f"kgroup-sim-flavor-{seed}")
    names = list(CLASSIC_FLAVORS)
    return rng.choices(names, weights=[CLASSIC_FLAVORS[n] for n in names])[0]


def draw_kind(seed: int, members: int, flavor: str | None = None) -> GroupKind:
    """The kind of schedule ``seed`` (``flavor`` forces the flavor). Drawn from a stream of
    its own: the schedule's other draws are the same whatever the kind."""
    if flavor is None:
        flavor = draw_flavor(seed)
    if flavor not in FLAVORS:
        raise ValueError(f"unknown flavor {flavor!r} (one of {', '.join(FLAVORS)})")
    rng = random.Random(f"kgroup-sim-kind-{seed}")
    if flavor == CONSUMER:
        return GroupKind(flavor)
    if flavor in ("range", "roundrobin", "sticky", "cooperative-sticky"):
        return plain_kind(flavor, members)
    if flavor == "upgrade":
        names = list(UPGRADES)
        name = rng.choices(names, weights=[UPGRADES[n][2] for n in names])[0]
        old, new, _ = UPGRADES[name]
        share = rng.choice((0.25, 0.5, 0.75))
        starts = tuple(new if rng.random() < share else old for _ in range(members))
        return GroupKind(
            flavor,
            assignors=starts,
            upgrade=name,
            upgrade_to=new,
            upgrade_p=rng.choice((0.0, 0.5, 1.0)),
        )
    cooperative = rng.random() < 0.8
    if flavor == "leader":
        return GroupKind(flavor, cooperative=cooperative)
    count = rng.randint(1, 16)
    every = tuple(f"r{i:02d}" for i in range(count))
    if rng.random() < 0.8:
        lists = (every,) * members
    else:
        # Each slot lists a random subset; every resource is listed by at least one slot.
        chosen: list[set[str]] = [{r for r in every if rng.random() < 0.5} for _ in range(members)]
        for r in every:
            if not any(r in c for c in chosen):
                chosen[rng.randrange(members)].add(r)
        lists = tuple(tuple(sorted(c)) for c in chosen)
    return GroupKind(flavor, cooperative=cooperative, resources=lists)


def member_cooperative(kind: GroupKind, protocol_names: tuple[str, ...]) -> bool:
    """Whether a member with these JoinGroup protocol names rebalances COOPERATIVE."""
    if kind.protocol:
        return kind.cooperative
    return bool(protocol_names) and all(n in COOPERATIVE_ASSIGNORS for n in protocol_names)


def universe(kind: GroupKind, topics: tuple[tuple[str, int], ...]) -> frozenset[Hashable]:
    """Everything the group shares out once every slot is a member."""
    if kind.flavor == "leader":
        return frozenset({LEADER})
    if kind.flavor == "shards":
        return frozenset(r for rs in kind.resources for r in rs)
    return frozenset(TopicPartition(t, p) for t, n in topics for p in range(n))


def kind_unstable(kind: GroupKind, members: Mapping[str, Process]) -> str | None:
    """The kind's own convergence conditions, given every member (member id -> process)
    of a stable group where every item is held exactly once. None when they hold."""
    if kind.flavor == "leader":
        holders = [mid for mid, p in members.items() if LEADER in p.owned]
        if len(holders) != 1:
            return f"LEADER held by {sorted(holders)}"
        for proc in members.values():
            election = proc.protocol
            assert isinstance(election, LeaderElection)
            if election.leader != holders[0]:
                return (
                    f"{proc.holder}'s LeaderElection.leader is {election.leader}, not {holders[0]}"
                )
    elif kind.flavor == "shards":
        counts = [len(p.owned) for p in members.values()]
        if counts and max(counts) - min(counts) > 1:
            return f"resources not balanced: counts {sorted(counts)}"
    return None


# ---------------------------------------------------------------------------------------------
# Invariant 5: a cooperative group converges within two rebalances
# ---------------------------------------------------------------------------------------------

#: The most generations a cooperative group may form once its membership is settled.
COOPERATIVE_REBALANCES = 2


@dataclass(frozen=True)
class Formed:
    """A generation a join phase formed (the model's ``on_generation``)."""

    generation: int
    at: float
    protocol: str
    #: member id -> the protocol names it listed in its JoinGroup
    members: Mapping[str, tuple[str, ...]]

    def describe(self) -> str:
        return f"gen {self.generation} at {self.at:.0f} {sorted(self.members)}"


def cooperative_rebalances(
    kind: GroupKind, formed: list[Formed], faults_stop: float
) -> tuple[int | None, str | None]:
    """Invariant 5 for a schedule that became stable: ``(count, problem)``.

    The counted generations are those formed after the faults stopped, from the last one
    whose member ids differ from the generation before it (a member joined, left, was
    expired or removed, or came back under a new member id; the generation before the first
    one after the faults is the last one formed before them) to the last one, the
    generation the group is stable in. When every member of every counted generation is
    COOPERATIVE there are at most two: the one that takes in the membership (moving
    partitions withheld; their owners revoke them and rejoin at once) and the follow-up one
    that hands them over. ``count`` is None when some member is EAGER (not checked), and
    for consumer-protocol groups (no generations: invariant 5 is classic only)."""
    if kind.consumer_protocol:
        return None, None
    before = [g for g in formed if g.at <= faults_stop]
    after = [g for g in formed if g.at > faults_stop]
    previous = set(before[-1].members) if before else None
    start = 0
    for i, g in enumerate(after):
        if set(g.members) != previous:
            start = i
        previous = set(g.members)
    counted = after[start:]
    if not all(member_cooperative(kind, names) for g in counted for names in g.members.values()):
        return None, None
    if len(counted) <= COOPERATIVE_REBALANCES:
        return len(counted), None
    return len(counted), (
        f"{len(counted)} rebalances after the faults stopped with the same members "
        f"(at most {COOPERATIVE_REBALANCES}): " + "; ".join(g.describe() for g in counted)
    )
