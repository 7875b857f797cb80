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
6. ``cooperative-sticky``: a member whose user data carries the leaving mark (a kgroup member
   handing off before it leaves; deviations.md row 14) gets nothing, the others are balanced
   as if it were absent, and what it owns is withheld like any other move.

Algorithm. The assignment is decided as counts per (member, topic) of three kinds: claims
kept, free partitions (nobody claims them) and moved ones (another member claims them; under
``cooperative-sticky`` they are withheld this generation). :class:`~kgroup._core._sticky_plan.Plan`
optimises the counts exactly, as a min-cost flow solved by cancelling negative cycles, for
(1) balance: the minimal sum of squares of the member counts, (2) the most claims kept, then
the tie-breaks (3) equal counts for members with the same subscription and (4) a balanced
first round (the sum of squares of kept + free). The start is a greedy fill balanced along
chains of members. Equal counts within a subscription are a subset-sum choice, which
:class:`_TieBreak` searches with a bounded number of runs. The counts then become
partitions: each member keeps its first claims, and free then moved partitions are dealt
round-robin in member order. Every choice follows member order
(:func:`~kgroup._core._assignors.sort_members`) and (topic, partition) order, never hash
order, so equal input gives equal output. A compatible implementation need not reproduce
Java's placement: only the leader's output matters (§7.3).
"""

from __future__ import annotations

import abc
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
from kgroup._core._racks import RackPools, member_rack
from kgroup._core._sticky_plan import Plan, initial_counts
from kgroup._core._sticky_user_data import (
    NO_GENERATION,
    cooperative_sticky_leaving,
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

    @abc.abstractmethod
    def _claim(self, member: MemberSubscription) -> _Claim:
        """The member's previous ownership, as this assignor's members send it."""

    def _withhold_moves(self) -> bool:
        return False

    def _leaving(self, member: MemberSubscription) -> bool:
        """Whether the member asks to be given nothing because it is leaving."""
        return False

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, Assignment]:
        ordered = sort_members(members)
        claims = [self._claim(m) for m in ordered]
        owners = _resolve_claims(claims)
        leaving = [self._leaving(m) for m in ordered]
        if any(leaving):
            # DEVIATION (spec §7.6; deviations.md row 14): a member handing off before it
            # leaves gets nothing, and what it owns moves (withheld below) this generation.
            target = _target_without(partitions_per_topic, ordered, owners, leaving)
        else:
            target = _sticky_target(partitions_per_topic, ordered, owners)
        if self._withhold_moves():
            # §7.6: a partition goes only to its previous owner, or to nobody while another
            # member (any claimant but the unique highest-generation one) still holds it.
            # DEVIATION (spec §7.6): Java lets a stale claimant keep a contested partition it
            # lists as owned, while the newer owner revokes it.
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
        #: Set by a member that hands its partitions off before it leaves (deviations.md
        #: row 14): its user data then carries the leaving mark, and a kgroup leader
        #: gives it nothing and withholds what it owns until it has revoked and left.
        self.leaving = False

    def user_data(self, topics: Collection[str]) -> bytes | None:
        """The generation of the latest assignment, -1 before the first one (§7.2); then
        the leaving mark while the member hands off before it leaves (:attr:`leaving`)."""
        return encode_cooperative_sticky_user_data(self._generation, leaving=self.leaving)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._generation = generation_id

    def _withhold_moves(self) -> bool:
        return True

    def _leaving(self, member: MemberSubscription) -> bool:
        return cooperative_sticky_leaving(member.subscription.user_data)

    def _claim(self, member: MemberSubscription) -> _Claim:
        subscription = member.subscription
        generation = subscription.generation_id
        if generation < 0:  # Subscription v0/v1 (kafka-python sends v1 with empty user data)
            generation = decode_cooperative_sticky_user_data(subscription.user_data)
        return generation, subscription.owned_partitions


# --- previous ownership -------------------------------------------------------------------------


def _resolve_claims(claims: Sequence[_Claim]) -> dict[TopicPartition, int]:
    """Every claimed partition -> index of its unique highest-generation claimant, or _TIE.

    The result does not depend on the order of the claims (§7.3 rule 4). DEVIATION (spec
    §7.3): an uncontested claim counts whatever its generation; Java, when all subscriptions
    are equal, drops every claim of a member older than the newest generation.
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


def _target_without(
    partitions_per_topic: Mapping[str, int],
    ordered: Sequence[MemberSubscription],
    owners: Mapping[TopicPartition, int],
    leaving: Sequence[bool],
) -> list[list[TopicPartition]]:
    """The target when some members are leaving (deviations.md row 14): balanced among the
    others as if the leavers were absent, a leaver gets nothing, and a partition a leaver
    won stays claimed by nobody the target may keep it for (so it counts as moving, and the
    caller withholds it this generation)."""
    staying = [i for i, gone in enumerate(leaving) if not gone]
    index = {old: new for new, old in enumerate(staying)}
    remapped = {tp: index.get(i, _TIE) for tp, i in owners.items()}
    sub = _sticky_target(partitions_per_topic, [ordered[i] for i in staying], remapped)
    target: list[list[TopicPartition]] = [[] for _ in ordered]
    for new, old in enumerate(staying):
        target[old] = sub[new]
    return target


def _sticky_target(
    partitions_per_topic: Mapping[str, int],
    ordered: Sequence[MemberSubscription],
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
    racks = [member_rack(m.subscription.rack_id) for m in ordered]
    pools = RackPools(partitions_per_topic, topics, racks)
    plan = _start(topics, partitions_per_topic, subscribed, valid, owners, pools)
    groups: dict[frozenset[str], list[int]] = {}
    for index, topics_wanted in enumerate(wanted):
        groups.setdefault(topics_wanted, []).append(index)
    plan = _TieBreak(plan, list(groups.values())).run()
    return _partitions(plan, topics, partitions_per_topic, valid, owners, pools)


def _start(
    topics: Sequence[str],
    partitions_per_topic: Mapping[str, int],
    subscribed: Sequence[frozenset[str]],
    valid: Sequence[Sequence[TopicPartition]],
    owners: Mapping[TopicPartition, int],
    pools: RackPools,
) -> Plan:
    """Balanced counts that keep claims, split into kinds: each member keeps as many of its
    claims as its count holds, and the free partitions go to the lowest outputs first.
    Then per pool: a member keeps its first claims, and its free and moved units fill the
    pools of the topic in order (rack alignment is left to :meth:`Plan.optimise`)."""
    held = initial_counts(topics, partitions_per_topic, subscribed, valid)
    members = range(len(subscribed))
    claims = [dict.fromkeys(sorted(s), 0) for s in subscribed]
    for index, tps in enumerate(valid):
        for tp in tps:
            claims[index][tp.topic] += 1
    kept = [{t: min(held[i][t], n) for t, n in claims[i].items()} for i in members]
    free = [dict.fromkeys(claims[i], 0) for i in members]
    moved = [dict.fromkeys(claims[i], 0) for i in members]
    output = [sum(k.values()) for k in kept]
    for topic in topics:
        unclaimed = sum(
            1 for p in range(partitions_per_topic[topic]) if TopicPartition(topic, p) not in owners
        )
        open_ = [(output[i], i) for i in members if held[i].get(topic, 0) > kept[i].get(topic, 0)]
        heapq.heapify(open_)
        for _ in range(unclaimed):
            _, i = heapq.heappop(open_)
            free[i][topic] += 1
            output[i] += 1
            if held[i][topic] > kept[i][topic] + free[i][topic]:
                heapq.heappush(open_, (output[i], i))
        for i in members:
            if topic in subscribed[i]:
                moved[i][topic] = held[i][topic] - kept[i][topic] - free[i][topic]
    return _by_pool(
        topics, partitions_per_topic, subscribed, valid, owners, pools, kept, free, moved
    )


def _by_pool(
    topics: Sequence[str],
    partitions_per_topic: Mapping[str, int],
    subscribed: Sequence[frozenset[str]],
    valid: Sequence[Sequence[TopicPartition]],
    owners: Mapping[TopicPartition, int],
    pools: RackPools,
    kept: Sequence[Mapping[str, int]],
    free: Sequence[Mapping[str, int]],
    moved: Sequence[Mapping[str, int]],
) -> Plan:
    """The per-topic counts as a :class:`Plan` over pools."""
    members = range(len(subscribed))
    mine = [sorted(p for t in sorted(s) for p in pools.pools[t]) for s in subscribed]
    p_claims = [dict.fromkeys(mine[i], 0) for i in members]
    p_kept = [dict.fromkeys(mine[i], 0) for i in members]
    p_free = [dict.fromkeys(mine[i], 0) for i in members]
    p_moved = [dict.fromkeys(mine[i], 0) for i in members]
    for i, tps in enumerate(valid):
        taken = dict.fromkeys(kept[i], 0)
        for tp in tps:
            pool = pools.pool(tp.topic, tp.partition)
            p_claims[i][pool] += 1
            if taken[tp.topic] < kept[i][tp.topic]:
                taken[tp.topic] += 1
                p_kept[i][pool] += 1
    for topic in topics:
        unclaimed = dict.fromkeys(pools.pools[topic], 0)
        claimed = dict.fromkeys(pools.pools[topic], 0)
        for p in range(partitions_per_topic[topic]):
            side = claimed if TopicPartition(topic, p) in owners else unclaimed
            side[pools.pool(topic, p)] += 1
        for i in members:
            for pool in pools.pools[topic] if topic in subscribed[i] else ():
                claimed[pool] -= p_kept[i][pool]
        for sizes, units, out in ((unclaimed, free, p_free), (claimed, moved, p_moved)):
            for i in members:  # fill the pools in order, as many units as each holds
                need = units[i].get(topic, 0)
                for pool in pools.pools[topic]:
                    share = min(need, sizes[pool])
                    if share:
                        out[i][pool] += share
                        sizes[pool] -= share
                        need -= share
    every = [pool for t in topics for pool in pools.pools[t]]
    aligned = [pools.aligned(i) for i in members] if pools.enabled else None
    subscribed_pools = [frozenset(m) for m in mine]
    return Plan(every, subscribed_pools, p_claims, p_kept, p_free, p_moved, aligned)


class _TieBreak:
    """Where balance and stickiness leave the choice open: members with the same
    subscription get equal counts where possible, in the target first, then in the first
    round's output (``cooperative-sticky``), whose sum of squares is minimal.

    Which members with equal subscriptions can all get the larger share is a subset-sum
    question: the optimiser is run again with candidate preferences (an unequal group first
    or last, or first with another group last, or the groups whose sizes add up to the
    number of larger shares at a count level), and the best plan by (spreads of the
    targets within groups, output sum of squares, spreads of the outputs within groups,
    each set of spreads compared worst first) wins. The number of runs is bounded by the
    size of the group, so on large groups with many distinct subscriptions the search is a
    best effort, or skipped.
    """

    def __init__(self, plan: Plan, groups: list[list[int]]) -> None:
        self.plan = plan
        self.groups = groups
        self.shared = [g for g in groups if len(g) > 1]
        self.members = sum(len(g) for g in groups)
        size = self.members * max(1, len(plan.pools))
        self.budget = min(200, 40000 // size)

    def run(self) -> Plan:
        plan = self.plan.copy()
        plan.optimise(None, self._output_rank(([], [])))
        best = self._score(plan)
        preference: _Preference | None = None
        if len(self.groups) > 1 and best[0] and best[0][0]:
            plan, best, preference = self._search(plan, best, None, use_targets=True)
        if best[2] and best[2][0]:
            plan, best, _ = self._search(plan, best, preference, use_targets=False)
        return plan

    def _search(
        self,
        plan: Plan,
        best: _Score,
        preference: _Preference | None,
        *,
        use_targets: bool,
    ) -> tuple[Plan, _Score, _Preference | None]:
        """Rounds of candidates from the current best; each round keeps its best."""
        tried: set[tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]] = set()
        while self.budget > 0:
            found: tuple[Plan, _Score, _Preference] | None = None
            counts = plan.targets() if use_targets else plan.outputs()
            for candidate in self._candidates(counts):
                key = (tuple(map(tuple, candidate[0])), tuple(map(tuple, candidate[1])))
                if key in tried or self.budget <= 0:
                    continue
                tried.add(key)
                self.budget -= 1
                trial = plan.copy()
                target_pref = candidate if use_targets else preference
                trial.optimise(self._target_rank(target_pref), self._output_rank(candidate))
                score = self._score(trial)
                if score < best and (found is None or score < found[1]):
                    found = (trial, score, candidate)
            if found is None:
                break
            plan, best = found[0], found[1]
            if use_targets:
                preference = found[2]
        return plan, best, preference

    def _candidates(self, counts: Sequence[int]) -> list[_Preference]:
        """(groups preferred, groups last): each unequal group first, then last; the sets
        of groups, at a count level, whose sizes add up to the larger shares there; then
        each unequal group first with each other group last."""
        uneven = [g for g in self.shared if len({counts[i] for i in g}) > 1]
        found: list[_Preference] = []
        for group in uneven:
            found += [([group], []), ([], [group])]
        for low in sorted({min(counts[i] for i in g) for g in uneven}):
            pool = [g for g in self.groups if {counts[i] for i in g} <= {low, low + 1}]
            larger = sum(1 for g in pool for i in g if counts[i] == low + 1)
            for chosen in _subsets_with_sum([len(g) for g in pool], larger, limit=64):
                first = [pool[k] for k in chosen]
                found.append((first, [g for g in pool if g not in first]))
        # Where no group can be made equal, a spread can still move to a smaller one.
        for group in uneven:
            found += [([group], [other]) for other in self.groups if other is not group]
        return found

    def _target_rank(self, preference: _Preference | None) -> list[int] | None:
        if preference is None:
            return None
        rank = [1] * self.members
        for value, groups in ((0, preference[0]), (2, preference[1])):
            for group in groups:
                for i in group:
                    rank[i] = value
        return rank

    def _output_rank(self, preference: _Preference) -> list[int]:
        """Groups in preference order (first, the rest, last), then member order."""
        first, last = preference
        order = first + [g for g in self.groups if g not in first and g not in last] + last
        rank = [0] * self.members
        for position, group in enumerate(order):
            for i in group:
                rank[i] = position * self.members + i
        return rank

    def _score(self, plan: Plan) -> _Score:
        targets, outputs = plan.targets(), plan.outputs()
        return (self._spreads(targets), sum(o * o for o in outputs), self._spreads(outputs))

    def _spreads(self, counts: Sequence[int]) -> tuple[int, ...]:
        """Per group of equal subscriptions, max - min count, largest first."""
        spreads = (max(counts[i] for i in g) - min(counts[i] for i in g) for g in self.shared)
        return tuple(sorted(spreads, reverse=True))


_Preference = tuple[list[list[int]], list[list[int]]]
_Score = tuple[tuple[int, ...], int, tuple[int, ...]]


def _subsets_with_sum(sizes: Sequence[int], total: int, limit: int) -> list[list[int]]:
    """Up to ``limit`` sets of indexes into ``sizes`` whose sizes add up to ``total``."""
    found: list[list[int]] = []
    after = [0] * (len(sizes) + 1)
    for k in range(len(sizes) - 1, -1, -1):
        after[k] = after[k + 1] + sizes[k]

    def extend(k: int, left: int, chosen: list[int]) -> None:
        if len(found) >= limit:
            return
        if left == 0:
            found.append(list(chosen))
            return
        if k == len(sizes) or left > after[k]:
            return
        chosen.append(k)
        extend(k + 1, left - sizes[k], chosen)
        chosen.pop()
        extend(k + 1, left, chosen)

    extend(0, total, [])
    return found


def _partitions(
    plan: Plan,
    topics: Sequence[str],
    partitions_per_topic: Mapping[str, int],
    valid: Sequence[Sequence[TopicPartition]],
    owners: Mapping[TopicPartition, int],
    pools: RackPools,
) -> list[list[TopicPartition]]:
    """The counts as partitions, pool by pool: a member keeps its first claims in (topic,
    partition) order; free, then moved partitions are dealt round-robin in member order."""
    result: list[list[TopicPartition]] = [[] for _ in valid]
    for topic in topics:
        for pool in pools.pools[topic]:
            kept: set[TopicPartition] = set()
            for index, tps in enumerate(valid):
                mine = [tp for tp in tps if pools.pool(tp.topic, tp.partition) == pool]
                own = mine[: plan.kept[index].get(pool, 0)]
                result[index].extend(own)
                kept.update(own)
            everything = [
                TopicPartition(topic, p)
                for p in range(partitions_per_topic[topic])
                if pools.pool(topic, p) == pool
            ]
            free = [tp for tp in everything if tp not in owners]
            moved = [tp for tp in everything if tp in owners and tp not in kept]
            for kind_pool, kind in ((free, plan.free), (moved, plan.moved)):
                wanted = {i: kind[i].get(pool, 0) for i in range(len(valid))}
                left = deque(i for i, n in wanted.items() if n)
                for tp in kind_pool:
                    index = left.popleft()
                    result[index].append(tp)
                    wanted[index] -= 1
                    if wanted[index]:
                        left.append(index)
    return result
