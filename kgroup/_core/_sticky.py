"""The ``sticky`` and ``cooperative-sticky`` assignors (spec §7.2, §7.3, §7.6).

Both compute the same target assignment; they differ in where a member's previous partitions
come from and in what happens to a partition that changes hands.

Contract (§7.3):

1. Balanced as subscriptions allow: the member partition counts minimise the sum of their
   squares, so members with identical subscriptions differ by at most one partition.
2. Sticky: as many partitions as possible stay with their previous owner.
3. Previous ownership: ``sticky`` (EAGER) reads it from its user data, because under EAGER the
   Subscription's ``owned_partitions`` is empty at join time; ``cooperative-sticky`` reads
   ``owned_partitions`` with the Subscription's ``generation_id`` (or, for Subscriptions older
   than v2, the generation in its user data).
4. Conflicting claims: when several members claim one partition, the claim with the highest
   generation wins; if two claims share the highest generation, the partition is dropped from
   all of them. A surviving claim counts only if the partition still exists and its owner
   still subscribes to its topic.
5. ``cooperative-sticky`` then withholds every partition the target moves to a member that is
   not its previous owner while some other member still claims it: it stays unassigned this
   generation, its owner revokes it and rejoins, and the follow-up rebalance hands it out
   (§7.6). Under EAGER (``[cooperative-sticky, range]``) members claim nothing, so nothing is
   withheld.

Algorithm. Valid claims are kept first. When every member has the same subscription, the
quotas are ``floor``/``ceil`` of the average and the ``ceil`` ones go to the members that
claim the most (which keeps the most claims); free partitions are then dealt round-robin to
the members below quota. Otherwise the assignment is computed as counts per (member, topic):
free partitions go one by one to the eligible member holding the fewest, then units are
shifted along chains of members (``u`` hands a partition to ``w``, ``w`` one to ``v``, ...)
from a member to one holding at least two fewer until no such chain exists, which is the
optimum of the sum of squares. Chains that move only unclaimed units are exhausted before any
claim is broken, so a claim moves only when balance needs it. Every choice follows member order
(:func:`~kgroup._core._assignors.sort_members`) and (topic, partition) order, never hash
order, so equal input gives equal output. A compatible implementation need not reproduce
Java's placement: only the leader's output matters (§7.3).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Collection, Mapping, Sequence

from kgroup._core._assignors import (
    BaseAssignor,
    MemberSubscription,
    RebalanceProtocol,
    _assignable_topics,
    sort_members,
)
from kgroup._core._consumer_protocol import Assignment, TopicPartition
from kgroup._core._sticky_user_data import (
    NO_GENERATION,
    decode_cooperative_sticky_user_data,
    decode_sticky_user_data,
    encode_cooperative_sticky_user_data,
    encode_sticky_user_data,
)

__all__ = ["CooperativeStickyAssignor", "StickyAssignor"]

_Claim = tuple[int, tuple[TopicPartition, ...]]
"""A member's previous ownership: (generation, partitions)."""

_TIE = -1
"""Owner index of a partition claimed by two members in its highest generation."""


class _AbstractStickyAssignor(BaseAssignor):
    """The shared leader side: resolve claims, compute the sticky balanced target."""

    def _claim(self, member: MemberSubscription) -> _Claim:
        raise NotImplementedError

    def _withhold_moves(self) -> bool:
        return False

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, Assignment]:
        ordered = sort_members(members)
        claims = [self._claim(m) for m in ordered]
        owners = _resolve_claims(claims)
        target = _sticky_target(partitions_per_topic, ordered, claims, owners)
        if self._withhold_moves():
            # §7.6: a partition goes only to its previous owner, or to nobody while another
            # member (any claimant but the unique highest-generation one) still holds it.
            target = [[tp for tp in tps if owners.get(tp, i) == i] for i, tps in enumerate(target)]
        return {
            m.member_id: Assignment(partitions=tuple(sorted(tps)), user_data=None)
            for m, tps in zip(ordered, target, strict=True)
        }


class StickyAssignor(_AbstractStickyAssignor):
    """``sticky`` (KIP-54, §7.3): balanced, and partitions stay with their previous owner.

    EAGER only. Each member sends its latest assignment and generation as user data
    (§7.2, V1), since under EAGER it has revoked everything before it joins.
    """

    name = "sticky"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def __init__(self) -> None:
        self._partitions: tuple[TopicPartition, ...] | None = None
        self._generation = NO_GENERATION

    def user_data(self, topics: Collection[str]) -> bytes | None:
        """V1 user data of the latest assignment; ``None`` before the first one (§7.2)."""
        if self._partitions is None:
            return None
        return encode_sticky_user_data(self._partitions, self._generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._partitions = tuple(sorted(set(assignment.partitions)))
        self._generation = generation_id

    def _claim(self, member: MemberSubscription) -> _Claim:
        partitions, generation = decode_sticky_user_data(member.subscription.user_data)
        return generation, partitions


class CooperativeStickyAssignor(_AbstractStickyAssignor):
    """``cooperative-sticky`` (KIP-429, §7.3, §7.6): ``sticky`` with the two-phase revoke.

    Supports COOPERATIVE and EAGER (in that order, as Java lists them): alone in
    ``GroupConfig.assignors`` it makes the member COOPERATIVE. A partition that must change
    hands is left out of this generation's assignment and handed out in the follow-up
    rebalance, once its owner has revoked it. The user data is the bare generation (§7.2).
    """

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def __init__(self) -> None:
        self._generation = NO_GENERATION

    def user_data(self, topics: Collection[str]) -> bytes | None:
        """The generation of the latest assignment, -1 before the first one (§7.2)."""
        return encode_cooperative_sticky_user_data(self._generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._generation = generation_id

    def _withhold_moves(self) -> bool:
        return True

    def _claim(self, member: MemberSubscription) -> _Claim:
        subscription = member.subscription
        generation = subscription.generation_id
        if generation < 0:  # Subscription v0/v1 (kafka-python sends v1 with empty user data)
            generation = decode_cooperative_sticky_user_data(subscription.user_data)
        return generation, subscription.owned_partitions


# --- previous ownership -------------------------------------------------------------------------


def _resolve_claims(claims: Sequence[_Claim]) -> dict[TopicPartition, int]:
    """Every claimed partition -> index of its unique highest-generation claimant, or _TIE.

    The result does not depend on the order of the claims (§7.3 rule 4).
    """
    best: dict[TopicPartition, tuple[int, int]] = {}
    for index, (generation, partitions) in enumerate(claims):
        for tp in partitions:
            current = best.get(tp)
            if current is None or generation > current[0]:
                best[tp] = (generation, index)
            elif generation == current[0] and current[1] != index:
                best[tp] = (generation, _TIE)
    return {tp: index for tp, (_, index) in best.items()}


def _valid_claims(
    partitions_per_topic: Mapping[str, int],
    subscribed: Sequence[frozenset[str]],
    owners: Mapping[TopicPartition, int],
) -> list[list[TopicPartition]]:
    """Per member, sorted: the partitions it won that still exist and that it subscribes to."""
    valid: list[list[TopicPartition]] = [[] for _ in subscribed]
    for tp, index in owners.items():
        if index == _TIE or tp.topic not in subscribed[index]:
            continue
        partition = tp.partition
        if isinstance(partition, int) and 0 <= partition < partitions_per_topic[tp.topic]:
            valid[index].append(tp)
    for tps in valid:
        tps.sort()
    return valid


# --- the target --------------------------------------------------------------------------------


def _sticky_target(
    partitions_per_topic: Mapping[str, int],
    ordered: Sequence[MemberSubscription],
    claims: Sequence[_Claim],
    owners: Mapping[TopicPartition, int],
) -> list[list[TopicPartition]]:
    """The balanced, sticky assignment: one partition list per member, in member order."""
    if not ordered:
        return []
    wanted = [frozenset(m.subscription.topics) for m in ordered]
    topics = _assignable_topics(partitions_per_topic, wanted)
    assignable = frozenset(topics)
    subscribed = [s & assignable for s in wanted]
    valid = _valid_claims(partitions_per_topic, subscribed, owners)
    if all(s == subscribed[0] for s in subscribed):
        everything = [
            TopicPartition(t, p)
            for t in sorted(subscribed[0])
            for p in range(partitions_per_topic[t])
        ]
        return _equal_target(everything, valid)
    return _general_target(topics, partitions_per_topic, subscribed, valid)


def _equal_target(
    everything: Sequence[TopicPartition], valid: Sequence[Sequence[TopicPartition]]
) -> list[list[TopicPartition]]:
    """Identical subscriptions: floor/ceil quotas, the ceil ones to the biggest claimants."""
    count = len(valid)
    base, extra = divmod(len(everything), count)
    quota = [base] * count
    for index in sorted(range(count), key=lambda i: (-len(valid[i]), i))[:extra]:
        quota[index] += 1
    result = [list(tps[: quota[i]]) for i, tps in enumerate(valid)]
    taken = {tp for tps in result for tp in tps}
    below = deque(i for i in range(count) if len(result[i]) < quota[i])
    for tp in everything:  # round-robin over the members below quota spreads the topics
        if tp in taken:
            continue
        index = below.popleft()
        result[index].append(tp)
        if len(result[index]) < quota[index]:
            below.append(index)
    return result


class _Counts:
    """Partition counts per (member, topic), and the chain search that balances them."""

    def __init__(
        self,
        topics: Sequence[str],
        partitions_per_topic: Mapping[str, int],
        subscribed: Sequence[frozenset[str]],
        valid: Sequence[Sequence[TopicPartition]],
    ) -> None:
        members = range(len(subscribed))
        self.subscribed = subscribed
        self.eligible = {t: [i for i in members if t in subscribed[i]] for t in topics}
        # Per member, its topics in name order: claimed units, and held units (claimed or not).
        self.claimed = [dict.fromkeys(sorted(s), 0) for s in subscribed]
        for index, tps in enumerate(valid):
            for tp in tps:
                self.claimed[index][tp.topic] += 1
        self.held = [dict(c) for c in self.claimed]
        self.total = [len(tps) for tps in valid]
        self.active = [i for i in members if subscribed[i]]
        # Topics with the fewest subscribers first: they have the least choice.
        for topic in sorted(topics, key=lambda t: (len(self.eligible[t]), t)):
            self._fill(topic, partitions_per_topic[topic])

    def _fill(self, topic: str, partitions: int) -> None:
        """Each unclaimed partition to the eligible member holding the fewest (member order)."""
        free = partitions - sum(self.held[i][topic] for i in self.eligible[topic])
        heap = [(self.total[i], i) for i in self.eligible[topic]]
        heapq.heapify(heap)
        for _ in range(free):
            total, index = heapq.heappop(heap)
            self.held[index][topic] += 1
            self.total[index] = total + 1
            heapq.heappush(heap, (total + 1, index))

    def _spare(self, index: int, topic: str, claims_too: bool) -> int:
        """Units of ``topic`` that ``index`` may hand on: unclaimed ones, or all of them."""
        held = self.held[index][topic]
        return held if claims_too else held - self.claimed[index][topic]

    def balance(self) -> None:
        """Shift units along chains until no member can give to one holding 2+ fewer.

        Chains of unclaimed units first; claims move only when no such chain is left.
        """
        for claims_too in (False, True):
            while self._shift_once(claims_too):
                pass

    def _shift_once(self, claims_too: bool) -> bool:
        """Find one improving chain and move as many units along it as it allows."""
        if not self.active:
            return False
        lowest = min(self.total[i] for i in self.active)
        visited = [False] * len(self.total)
        # Sources by count, highest first. Whatever an earlier source reached holds at least
        # its count - 1, so it is no target for a later (smaller) source: skip it.
        for source in sorted(self.active, key=lambda i: (-self.total[i], i)):
            limit = self.total[source] - 2
            if limit < lowest:
                return False
            if visited[source]:
                continue
            chain = self._search(source, limit, visited, claims_too)
            if chain is not None:
                self._apply(chain, claims_too)
                return True
        return False

    def _search(
        self, source: int, limit: int, visited: list[bool], claims_too: bool
    ) -> list[tuple[int, int, str]] | None:
        """Breadth-first from ``source``: the chain to the member with the fewest units at
        most ``limit`` (then the shortest chain, then member order), as (giver, taker, topic)."""
        parent: dict[int, int] = {}
        depth = {source: 0}
        visited[source] = True
        unvisited = [i for i in self.active if not visited[i]]
        queue = deque([source])
        best: tuple[int, int, int] | None = None
        while queue and unvisited:
            giver = queue.popleft()
            # A set, but only tested against, never iterated: the order stays deterministic.
            spare = {t for t in self.held[giver] if self._spare(giver, t, claims_too) > 0}
            if not spare:
                continue
            still = []
            for taker in unvisited:
                if spare.isdisjoint(self.subscribed[taker]):
                    still.append(taker)
                    continue
                visited[taker] = True
                parent[taker] = giver
                depth[taker] = depth[giver] + 1
                queue.append(taker)
                key = (self.total[taker], depth[taker], taker)
                if self.total[taker] <= limit and (best is None or key < best):
                    best = key
            unvisited = still
        if best is None:
            return None
        chain: list[tuple[int, int, str]] = []
        node = best[2]
        while node != source:
            giver = parent[node]
            chain.append((giver, node, self._topic(giver, node, claims_too)))
            node = giver
        chain.reverse()
        return chain

    def _topic(self, giver: int, taker: int, claims_too: bool) -> str:
        """The topic ``giver`` hands ``taker``: one with unclaimed units first, then by name."""
        held, claimed = self.held[giver], self.claimed[giver]
        return min(
            (t for t in held if t in self.subscribed[taker] and self._spare(giver, t, claims_too)),
            key=lambda t: (held[t] <= claimed[t], t),
        )

    def _apply(self, chain: Sequence[tuple[int, int, str]], claims_too: bool) -> None:
        source, target = chain[0][0], chain[-1][1]
        amount = (self.total[source] - self.total[target]) // 2
        for giver, _, topic in chain:
            amount = min(amount, self._spare(giver, topic, claims_too))
        for giver, taker, topic in chain:
            self.held[giver][topic] -= amount
            self.held[taker][topic] += amount
        self.total[source] -= amount
        self.total[target] += amount


def _general_target(
    topics: Sequence[str],
    partitions_per_topic: Mapping[str, int],
    subscribed: Sequence[frozenset[str]],
    valid: Sequence[Sequence[TopicPartition]],
) -> list[list[TopicPartition]]:
    """Differing subscriptions: balance counts per (member, topic), then pick partitions."""
    counts = _Counts(topics, partitions_per_topic, subscribed, valid)
    counts.balance()
    result: list[list[TopicPartition]] = [[] for _ in subscribed]
    for topic in topics:
        # Each member keeps as many of its claims on the topic as its count allows ...
        kept: set[int] = set()
        need: list[tuple[int, int]] = []
        for index in counts.eligible[topic]:
            own = [tp for tp in valid[index] if tp.topic == topic][: counts.held[index][topic]]
            result[index].extend(own)
            kept.update(tp.partition for tp in own)
            need.append((index, counts.held[index][topic] - len(own)))
        # ... and the rest of the topic fills the remaining counts, in member order.
        free = (p for p in range(partitions_per_topic[topic]) if p not in kept)
        for index, missing in need:
            result[index].extend(TopicPartition(topic, next(free)) for _ in range(missing))
    return result
