"""Rebalance scenarios for the assignor differential test, and what is measured on them.

A :class:`Scenario` is one leader-side input: partition counts, and the members with their
subscriptions and what each claims to have owned before (a previous assignment perturbed by
members joining and leaving, stale members from older generations, now and then a
same-generation double claim). :func:`scenario` builds one from any source of choices: a
Hypothesis ``draw`` (which shrinks) or a seeded :class:`random.Random` (for batches).

:func:`subscriptions` encodes a scenario for one assignor the way Java members send it:
``sticky`` puts the previous assignment and generation in V1 user data (V0 for old
members); ``cooperative-sticky`` sends ``owned_partitions`` + ``generation_id`` and the bare
int32 generation as user data (old members: the generation only in the user data).

The measures: :func:`problems` (validity), :func:`moves`, :func:`sum_of_squares`,
:func:`spreads`, :func:`evenness`, :func:`withheld`; :func:`withhold_contested` applies
kgroup's rule for contested partitions to another assignor's cooperative output.
"""

from __future__ import annotations

import random
import struct
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from kgroup._core._assignors import MemberSubscription
from kgroup._core._consumer_protocol import Subscription, TopicPartition
from kgroup._core._racks import TopicLayout

__all__ = [
    "GONE",
    "RACKS",
    "Choices",
    "Member",
    "Output",
    "RandomChoices",
    "Scenario",
    "alignment",
    "assignable",
    "counts",
    "current_owner",
    "evenness",
    "layout",
    "minimize",
    "moves",
    "prior_owner",
    "problems",
    "rack_aware",
    "scenario",
    "spreads",
    "sticky_user_data",
    "subscriptions",
    "sum_of_squares",
    "summary",
    "withheld",
    "withhold_contested",
]

T = TypeVar("T")
TP = TopicPartition
Output = Mapping[str, Sequence[TopicPartition]]

#: Client ids that dynamic member ids start with (the broker makes ``<client.id>-<uuid>``):
#: mixed case, punctuation, non-ASCII, a character outside the BMP and one in
#: U+E000-U+FFFF, which Java's UTF-16 compareTo and Python's code-point order sort
#: differently (the assignors sort like Java).
CLIENT_IDS = ("c", "C", "app", "a-b", "z", "é", "中", "\U0001f600", "\ue000")
#: Static ids use the characters the broker accepts for group.instance.id.
INSTANCE_IDS = ("i", "I", "pod", "a.b", "z_", "0")
#: A topic members subscribe to (and once owned) that has no metadata: deleted.
GONE = "gone"
#: The racks of replicas and members.
RACKS = ("r0", "r1", "r2")


class Choices(Protocol):
    """Where a scenario's choices come from. ``flag(p)`` is true with probability ``p``
    and shrinks to false; ``integer`` shrinks towards ``lo``."""

    def integer(self, lo: int, hi: int) -> int: ...

    def flag(self, p: float) -> bool: ...


class RandomChoices:
    """:class:`Choices` from a seeded :class:`random.Random`."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def flag(self, p: float) -> bool:
        return self.rng.random() < p


def _pick(c: Choices, items: Sequence[T]) -> T:
    return items[c.integer(0, len(items) - 1)]


@dataclass(frozen=True)
class Member:
    """A current member: ids, subscription, and its claim on a previous assignment."""

    member_id: str
    instance_id: str | None
    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...] = ()
    generation: int = -1
    """The generation ``owned`` was assigned in; -1: none (a new member)."""
    legacy: bool = False
    """Sent the way older Java clients do (sticky: V0 user data; cooperative: the
    generation in the user data only)."""
    rack: str | None = None
    """``client.rack``."""


@dataclass(frozen=True)
class Scenario:
    """One leader-side assignment input."""

    partitions: dict[str, int]
    members: tuple[Member, ...]
    racks: dict[str, tuple[tuple[str, ...], ...]] | None = None
    """Per topic, per partition: the racks of its replicas (None: no rack information)."""

    def as_seen_by(self, assignor: str) -> Scenario:
        """The scenario with the generations ``assignor`` can know: ``sticky`` V0 user data
        carries none, so those claims count as generation -1."""
        if assignor != "sticky":
            return self
        members = tuple(replace(m, generation=-1) if m.legacy else m for m in self.members)
        return replace(self, members=members)

    def __str__(self) -> str:
        lines = [f"partitions={self.partitions}"]
        if self.racks is not None:
            lines.append(f"racks={self.racks}")
        for m in self.members:
            owned: dict[str, list[int]] = defaultdict(list)
            for tp in m.owned:
                owned[tp.topic].append(tp.partition)
            lines.append(
                f"  {m.member_id!r} instance={m.instance_id!r} topics={list(m.topics)} "
                f"generation={m.generation}{' legacy' if m.legacy else ''} owned={dict(owned)}"
                + ("" if m.rack is None else f" rack={m.rack!r}")
            )
        return "\n".join(lines)


def _subset(c: Choices, topics: Sequence[str]) -> tuple[str, ...]:
    first = c.integer(0, len(topics) - 1)
    chosen = {topics[first]} | {t for i, t in enumerate(topics) if i != first and c.flag(0.5)}
    return tuple(sorted(chosen))


def _unique(c: Choices, make: Callable[[], str], taken: set[str]) -> str:
    value = make()
    while value in taken:
        value += "'"
    taken.add(value)
    return value


def scenario(
    c: Choices, *, max_members: int = 10, max_partitions: int = 24, rack_share: float = 0.4
) -> Scenario:
    """A random rebalance input: 1-4 topics of 0-``max_partitions`` partitions,
    1-``max_members`` members (some static), equal or unequal subscriptions, and prior
    ownership from a previous generation perturbed by joins, leaves and stale members; in
    ``rack_share`` of them, member racks and replica racks."""
    topics = [f"t{i}" for i in range(c.integer(1, 4))]
    partitions = {t: c.integer(0, max_partitions) for t in topics}
    prior_counts = {t: n if not c.flag(0.2) else c.integer(0, n) for t, n in partitions.items()}
    if c.flag(0.1):
        prior_counts[GONE] = c.integer(1, 4)
    known = [*topics, *([GONE] if GONE in prior_counts else [])]

    n = c.integer(1, max_members)
    taken: set[str] = set()
    ids = [
        _unique(c, lambda: f"{_pick(c, CLIENT_IDS)}-{c.integer(0, 99):02d}", taken)
        for _ in range(n)
    ]
    instances = [
        _unique(c, lambda: f"{_pick(c, INSTANCE_IDS)}{c.integer(0, 9)}", taken)
        if c.flag(0.3)
        else None
        for _ in range(n)
    ]
    equal = c.flag(0.5)
    base = _subset(c, known)
    subs = [base if equal else _subset(c, known) for _ in range(n)]

    # The previous generation: most current members, plus some that have left since.
    generation = c.integer(1, 50)
    previous = [i for i in range(n) if not c.flag(0.25)]
    leavers = c.integer(0, 3)
    prior_subs = [subs[i] if not c.flag(0.1) else _subset(c, known) for i in previous]
    prior_subs += [_subset(c, known) for _ in range(leavers)]
    claims: list[list[TopicPartition]] = [[] for _ in prior_subs]
    balanced = c.flag(0.5)
    for topic in known:
        subscribers = [k for k, s in enumerate(prior_subs) if topic in s]
        offset = c.integer(0, 9)
        for p in range(prior_counts[topic]):
            if not subscribers or c.flag(0.1):
                continue  # unowned: new, or its owner's claim was lost
            k = subscribers[(p + offset) % len(subscribers)] if balanced else _pick(c, subscribers)
            claims[k].append(TP(topic, p))
    owned: dict[int, list[TopicPartition]] = {i: claims[k] for k, i in enumerate(previous)}
    generations = {i: generation for i in previous}

    # Stale members: back from an older generation, claiming what they had then.
    for i in previous:
        if c.flag(0.15):
            generations[i] = generation - c.integer(1, 3)
            owned[i] = [
                TP(t, p)
                for t in prior_subs[previous.index(i)]
                for p in range(prior_counts[t])
                if c.flag(0.3)
            ]
    # Rarely, two members of the same generation claim one partition.
    current = [i for i in previous if generations[i] == generation]
    if len(current) >= 2 and c.flag(0.05):
        a, b = _pick(c, current), _pick(c, current)
        if a != b and owned[a]:
            owned[b] = [*owned[b], _pick(c, owned[a])]

    members = tuple(
        Member(
            member_id=ids[i],
            instance_id=instances[i],
            topics=subs[i],
            owned=tuple(sorted(set(owned.get(i, ())))),
            generation=generations.get(i, -1),
            legacy=c.flag(0.15),
        )
        for i in range(n)
    )
    # Drawn last, so the draws before them (and the scenarios of a seed) stay as they were.
    racks = _racks(c, partitions) if c.flag(rack_share) else None
    if racks is not None:
        members = tuple(replace(m, rack=_member_rack(c)) for m in members)
    return Scenario(partitions=partitions, members=members, racks=racks)


def _racks(c: Choices, partitions: Mapping[str, int]) -> dict[str, tuple[tuple[str, ...], ...]]:
    """Replica racks: mostly one or two of three racks, now and then all three (when every
    partition has all, Java turns rack awareness off) or none."""
    everywhere = c.flag(0.15)
    result: dict[str, tuple[tuple[str, ...], ...]] = {}
    for topic, n in partitions.items():
        parts: list[tuple[str, ...]] = []
        for _ in range(n):
            if everywhere:
                parts.append(RACKS)
                continue
            chosen = [r for r in RACKS if c.flag(0.4)]
            parts.append(tuple(chosen[: c.integer(0, 2)] if c.flag(0.1) else chosen[:2]))
        result[topic] = tuple(parts)
    return result


def _member_rack(c: Choices) -> str | None:
    """Mostly a replica rack; sometimes none, or one without replicas."""
    if c.flag(0.15):
        return None
    return _pick(c, (*RACKS, "r9")) if c.flag(0.1) else _pick(c, RACKS)


# --- encoding ------------------------------------------------------------------------------


def _topic_partitions(owned: Iterable[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in owned:
        by_topic[tp.topic].append(tp.partition)
    out = struct.pack(">i", len(by_topic))
    for topic in sorted(by_topic):
        name = topic.encode()
        parts = sorted(by_topic[topic])
        out += struct.pack(">h", len(name)) + name
        out += struct.pack(f">i{len(parts)}i", len(parts), *parts)
    return out


def sticky_user_data(owned: Iterable[TopicPartition], generation: int | None) -> bytes:
    """Java StickyAssignor user data: V1 (with ``generation``) or V0 (``None``)."""
    out = _topic_partitions(owned)
    return out if generation is None else out + struct.pack(">i", generation)


def subscriptions(s: Scenario, assignor: str) -> list[MemberSubscription]:
    """Each member's Subscription as a Java member would send it to ``assignor``."""
    result = []
    for m in s.members:
        if assignor == "sticky":
            if m.generation < 0 and not m.owned:
                user_data = None  # Java sends null before the first assignment
            else:
                user_data = sticky_user_data(m.owned, None if m.legacy else m.generation)
            sub = Subscription(topics=m.topics, user_data=user_data, generation_id=m.generation)
        else:  # cooperative-sticky; range and roundrobin ignore the extra fields
            sub = Subscription(
                topics=m.topics,
                user_data=struct.pack(">i", m.generation),
                owned_partitions=m.owned,
                generation_id=-1 if m.legacy else m.generation,
            )
        result.append(MemberSubscription(m.member_id, m.instance_id, replace(sub, rack_id=m.rack)))
    return result


def layout(s: Scenario) -> Mapping[str, int]:
    """What the leader passes the assignor: a TopicLayout with the replica racks, or the
    plain counts when the scenario has none."""
    if s.racks is None:
        return dict(s.partitions)
    return TopicLayout({t: s.racks.get(t, ((),) * n) for t, n in s.partitions.items()})


def rack_aware(s: Scenario) -> bool:
    """Kafka's condition for the sticky assignors' rack awareness, over every member and
    every partition of a subscribed topic (KIP-881)."""
    if s.racks is None:
        return False
    subscribed = {t for m in s.members for t in m.topics}
    member_racks = {m.rack for m in s.members if m.rack}
    per_partition = [frozenset(r) for t, parts in s.racks.items() if t in subscribed for r in parts]
    every: set[str] = set().union(*per_partition)
    if not member_racks or every.isdisjoint(member_racks):
        return False
    return any(r != every for r in per_partition)


def alignment(s: Scenario, out: Output) -> int:
    """Partitions whose member's rack is among their replica racks (0 without racks)."""
    if s.racks is None:
        return 0
    rack = {m.member_id: m.rack for m in s.members}
    return sum(
        1
        for member, tps in out.items()
        for tp in tps
        if rack.get(member) in s.racks.get(tp.topic, ((),) * (tp.partition + 1))[tp.partition]
    )


# --- measures ------------------------------------------------------------------------------


def assignable(s: Scenario) -> set[TopicPartition]:
    """Partitions of topics that have metadata and at least one subscriber."""
    subscribed = {t for m in s.members for t in m.topics}
    return {TP(t, p) for t, n in s.partitions.items() if t in subscribed for p in range(n)}


def _winners(claims: Iterable[tuple[Member, int]]) -> dict[TopicPartition, str]:
    best: dict[TopicPartition, tuple[int, list[str]]] = {}
    for m, generation in claims:
        for tp in m.owned:
            gen, owners = best.get(tp, (generation, []))
            if generation > gen:
                best[tp] = (generation, [m.member_id])
            elif generation == gen:
                best[tp] = (gen, [*owners, m.member_id])
    return {tp: owners[0] for tp, (_, owners) in best.items() if len(owners) == 1}


def prior_owner(s: Scenario) -> dict[TopicPartition, str]:
    """Valid previous owners (spec §7.3): per partition the claim of the highest
    generation wins; two claims of the same generation invalidate each other."""
    return _winners((m, m.generation) for m in s.members)


def current_owner(s: Scenario) -> dict[TopicPartition, str]:
    """Owners that a cooperative assignment must not bypass: the claims of the members of
    the group's newest generation (Java discards older members' claims wholesale)."""
    newest = max(m.generation for m in s.members)
    return _winners((m, m.generation) for m in s.members if m.generation == newest)


def _owners(out: Output) -> dict[TopicPartition, list[str]]:
    owners: dict[TopicPartition, list[str]] = defaultdict(list)
    for member, tps in out.items():
        for tp in tps:
            owners[tp].append(member)
    return owners


def problems(s: Scenario, out: Output, *, cooperative: bool) -> list[str]:
    """Why ``out`` is not a valid assignment for ``s`` (empty: valid).

    Every member gets an entry; only existing partitions of subscribed topics; none twice.
    EAGER: every assignable partition is assigned. COOPERATIVE: a partition left out must
    be one some member still claims, and no partition goes to another member while a
    member of the newest generation still owns it (spec §7.6).
    """
    found: list[str] = []
    ids = {m.member_id for m in s.members}
    if set(out) != ids:
        found.append(f"members {sorted(set(out) ^ ids)} missing or unknown")
    topics = {m.member_id: set(m.topics) for m in s.members}
    for member, tps in out.items():
        for tp in tps:
            if not 0 <= tp.partition < s.partitions.get(tp.topic, 0):
                found.append(f"{member} got {tp}, which does not exist")
            elif tp.topic not in topics.get(member, ()):
                found.append(f"{member} got {tp} of a topic it does not subscribe to")
    owners = _owners(out)
    found += [f"{tp} assigned to {names}" for tp, names in owners.items() if len(names) > 1]
    missing = assignable(s) - owners.keys()
    if not cooperative:
        found += [f"{tp} assigned to nobody" for tp in sorted(missing)]
    else:
        claimed = {tp for m in s.members for tp in m.owned}
        found += [f"{tp} withheld, but nobody owns it" for tp in sorted(missing - claimed)]
        for tp, owner in current_owner(s).items():
            taken = [name for name in owners.get(tp, ()) if name != owner]
            if taken:
                found.append(f"{tp} given to {taken} while {owner!r} still owns it")
    return found


def moves(s: Scenario, out: Output) -> int:
    """Assigned partitions whose owner differs from their valid previous owner."""
    prior = prior_owner(s)
    return sum(
        1 for member, tps in out.items() for tp in tps if tp in prior and prior[tp] != member
    )


def spreads(s: Scenario, out: Output) -> tuple[dict[tuple[str, ...], int], int]:
    """(max - min partition count among members with the same subscription, per
    subscription; max - min over all members)."""
    counts = {member: len(tps) for member, tps in out.items()}
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for m in s.members:
        groups[m.topics].append(counts.get(m.member_id, 0))
    per_group = {topics: max(c) - min(c) for topics, c in groups.items()}
    values = list(counts.values()) or [0]
    return per_group, max(values) - min(values)


def sum_of_squares(out: Output) -> int:
    """The sum of the squared partition counts: the smaller, the more balanced (spec §7.3;
    for a fixed total it is smallest when the counts are as equal as subscriptions allow)."""
    return sum(len(tps) ** 2 for tps in out.values())


def evenness(s: Scenario, out: Output) -> tuple[int, ...]:
    """The spreads (max - min count) within each group of members with the same
    subscription, largest first: compared as a tuple, the worst group counts first."""
    return tuple(sorted(spreads(s, out)[0].values(), reverse=True))


def withhold_contested(s: Scenario, out: Output) -> dict[str, list[TopicPartition]]:
    """``out`` without the partitions it gives to a member that is not their unique
    highest-generation claimant while another member claims them too: what kgroup's
    cooperative-sticky withholds by design (docs/design/deviations.md, row 7)."""
    claims: dict[TopicPartition, list[Member]] = defaultdict(list)
    for m in s.members:
        for tp in m.owned:
            claims[tp].append(m)

    def kept(member: str, tp: TopicPartition) -> bool:
        claimants = claims.get(tp, [])
        if all(m.member_id == member for m in claimants):
            return True
        top = max(m.generation for m in claimants)
        return [m.member_id for m in claimants if m.generation == top] == [member]

    return {member: [tp for tp in tps if kept(member, tp)] for member, tps in out.items()}


def withheld(s: Scenario, out: Output) -> set[TopicPartition]:
    """Assignable partitions that nobody got (cooperative: revoked, handed out next round)."""
    return assignable(s) - _owners(out).keys()


def summary(out: Output) -> dict[str, list[str]]:
    """Readable form for failure messages: member -> sorted ``topic-partition`` strings."""
    return {member: [str(tp) for tp in sorted(tps)] for member, tps in sorted(out.items())}


def counts(out: Output) -> Counter[str]:
    """Partition count per member."""
    return Counter({member: len(tps) for member, tps in out.items()})


# --- minimizing ----------------------------------------------------------------------------


def _smaller(s: Scenario) -> Iterator[Scenario]:
    """Scenarios one simplification away from ``s``, the biggest cuts first."""
    members = list(s.members)

    def with_member(i: int, member: Member) -> Scenario:
        return replace(s, members=(*members[:i], member, *members[i + 1 :]))

    for i in range(len(members)):
        if len(members) > 1:
            yield replace(s, members=(*members[:i], *members[i + 1 :]))
    if s.racks is not None:
        yield replace(s, racks=None, members=tuple(replace(m, rack=None) for m in members))
    for topic, n in s.partitions.items():
        others = {t: c for t, c in s.partitions.items() if t != topic}
        if others:
            racks = None if s.racks is None else {t: r for t, r in s.racks.items() if t != topic}
            yield replace(s, partitions=others, racks=racks)
        for smaller in sorted({0, n // 2, n - 1}):
            if 0 <= smaller < n:
                trimmed = tuple(
                    replace(
                        m,
                        owned=tuple(
                            tp for tp in m.owned if tp.topic != topic or tp.partition < smaller
                        ),
                    )
                    for m in members
                )
                racks = s.racks
                if racks is not None:
                    racks = {**racks, topic: racks[topic][:smaller]}
                yield Scenario({**s.partitions, topic: smaller}, trimmed, racks)
    for i, m in enumerate(members):
        if m.owned:
            yield with_member(i, replace(m, owned=()))
        for k in range(len(m.owned)):
            yield with_member(i, replace(m, owned=(*m.owned[:k], *m.owned[k + 1 :])))
        for k in range(len(m.topics)):
            if len(m.topics) > 1:
                yield with_member(i, replace(m, topics=(*m.topics[:k], *m.topics[k + 1 :])))
        if m.instance_id is not None:
            yield with_member(i, replace(m, instance_id=None))
        if m.legacy:
            yield with_member(i, replace(m, legacy=False))
        if not m.owned and m.generation != -1:
            yield with_member(i, replace(m, generation=-1))
        if m.generation > 1:
            yield with_member(i, replace(m, generation=m.generation - 1))
        if m.rack is not None:
            yield with_member(i, replace(m, rack=None))
    if s.racks is not None:
        for topic, parts in s.racks.items():
            for p, racks_of in enumerate(parts):
                for k in range(len(racks_of)):
                    fewer = (*racks_of[:k], *racks_of[k + 1 :])
                    yield replace(s, racks={**s.racks, topic: (*parts[:p], fewer, *parts[p + 1 :])})
    renamed = tuple(replace(m, member_id=f"m{i}") for i, m in enumerate(members))
    if renamed != s.members:
        yield replace(s, members=renamed)


def minimize(s: Scenario, fails: Callable[[Scenario], bool]) -> Scenario:
    """A locally minimal scenario that still ``fails`` (greedy, one cut at a time)."""
    progress = True
    while progress:
        progress = False
        for candidate in _smaller(s):
            if fails(candidate):
                s, progress = candidate, True
                break
    return s
