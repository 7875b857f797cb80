"""The count model of the sticky assignors: how many partitions of each pool each member gets,
and of which kind (spec §7.3, §7.6).

A pool is a topic, or under rack-aware assignment the partitions of a topic whose replica
racks include the same member racks (:data:`Pool`): within a pool, partitions are
interchangeable. A member's units of a pool are of three kinds: claims it keeps (``kept``),
partitions nobody claims (``free``), and partitions another member claims, or two members
claim in the same generation, or a claimant that no longer subscribes claims (``moved``).
Under ``cooperative-sticky`` the ``moved`` ones are withheld this generation, so a member's
first output is ``kept + free`` and its target ``kept + free + moved``.

:class:`Plan` finds the counts that minimise, in this order of priority:

1. the sum of squares of the targets (balance: identical subscriptions differ by at most
   one, and no chain of members can pass a partition to one holding two fewer).
   DEVIATION (spec §7.3): Java's general path stops when no single partition can move to
   a member holding two fewer, and can keep claims a chain of moves would take;
1a. under rack-aware assignment, minus the units of pools ``aligned`` with their member
   (rack alignment: partitions with a replica on their member's rack), as Java ranks it:
   after balance, before stickiness. DEVIATION (spec §7.3; deviations.md row 13): Java
   aligns greedily, kgroup reaches the most aligned balanced assignment;
2. minus the claims kept (stickiness: fewest moves, fewest withheld);
3. a linear preference over the targets (``target_rank``), which the caller uses to choose
   which members get the larger share where balance leaves the choice open;
4. the sum of squares of the outputs (the first round of a cooperative rebalance);
5. a linear preference over the outputs (``output_rank``).

These are one min-cost flow: a source feeds each member's target node (priorities 1 and
3), which feeds the member's output node (4 and 5) or takes ``moved`` units of a pool; the
output node takes ``free`` units or the member's own claims (2); a unit of an aligned pool
earns 1a. The priorities become one
integer cost, with weights far enough apart that a higher one always decides, and
:meth:`Plan.optimise` cancels negative cycles of the residual graph (Bellman-Ford with a
predecessor-graph cycle check after each pass), moving as many units along each cycle as
keep it negative, until none is left: then the counts are optimal (the negative-cycle
optimality condition of min-cost flow). The start is :func:`initial_counts`, a greedy
fill balanced along chains, already optimal for 1.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping, Sequence

from kgroup._core._consumer_protocol import TopicPartition

__all__ = ["Plan", "Pool", "initial_counts"]

Pool = tuple[str, int]
"""(topic, rack class): partitions of a topic that are interchangeable for the assignment.
Without rack awareness every topic is one pool, class 0."""

_INFINITE = 1 << 62

# What an arc of the residual graph changes when flow goes along it.
_NOTHING, _TAKE_MOVED, _GIVE_MOVED, _TAKE_FREE, _GIVE_FREE, _KEEP, _RELEASE = range(7)

# An arc: (tail, head, cost of the next unit, capacity, slope, kind, member, pool). A
# convex arc's cost grows by 2 * slope per unit; the others have slope 0.
_Arc = tuple[int, int, int, int, int, int, int, Pool]
_NO_POOL: Pool = ("", -1)


class Plan:
    """Per member and pool: ``kept`` claims, ``free`` units and ``moved`` units.

    ``subscribed[u]`` are the pools member ``u`` may take, ``aligned[u]`` those whose
    partitions have a replica on its rack (``None``: rack awareness off)."""

    def __init__(
        self,
        pools: Sequence[Pool],
        subscribed: Sequence[frozenset[Pool]],
        claims: Sequence[Mapping[Pool, int]],
        kept: list[dict[Pool, int]],
        free: list[dict[Pool, int]],
        moved: list[dict[Pool, int]],
        aligned: Sequence[frozenset[Pool]] | None = None,
    ) -> None:
        self.pools = pools
        self.subscribed = subscribed
        self.claims = claims
        self.kept, self.free, self.moved = kept, free, moved
        self.aligned = aligned
        self._member_pools = [
            [(index, t) for index, t in enumerate(pools) if t in s] for s in subscribed
        ]
        self._units = sum(sum(d.values()) for part in (kept, free, moved) for d in part)

    def copy(self) -> Plan:
        return Plan(
            self.pools,
            self.subscribed,
            self.claims,
            [dict(d) for d in self.kept],
            [dict(d) for d in self.free],
            [dict(d) for d in self.moved],
            self.aligned,
        )

    def outputs(self) -> list[int]:
        """Per member: kept + free (its first-round assignment under cooperative-sticky)."""
        return [
            sum(k.values()) + sum(f.values()) for k, f in zip(self.kept, self.free, strict=True)
        ]

    def targets(self) -> list[int]:
        """Per member: all its units (its assignment once the moves are through)."""
        return [o + sum(m.values()) for o, m in zip(self.outputs(), self.moved, strict=True)]

    def optimise(self, target_rank: Sequence[int] | None, output_rank: Sequence[int]) -> None:
        """Cancel negative cycles until the counts are optimal for the priorities of the
        module docstring. ``target_rank`` values are 0, 1 or 2 (lower: preferred for the
        larger share; ``None``: no preference); ``output_rank`` values are small
        non-negative integers (lower: preferred)."""
        n = self._units
        w_output_rank = max(output_rank, default=0) + 1
        w_output = w_output_rank * (n + 1) + 1
        w_target_rank = w_output * (n * n + 1) + 1
        w_kept = w_target_rank * (2 * n + 3)
        w_align = 0 if self.aligned is None else w_kept * (n + 2)
        w_target = max(w_kept, w_align) * (n + 2)
        target_cost = [0] * len(self.kept) if target_rank is None else target_rank
        ranks = ([r * w_target_rank for r in target_cost], output_rank)
        weights = (w_target, w_align, w_kept, w_output)
        members = range(len(self.kept))
        per_member = [self._arcs(u, weights, ranks) for u in members]
        # Distances carry over from one search to the next: a push changes few arcs, and
        # any labels that no arc can lower prove that no negative cycle is left.
        distance = [0] * (1 + 2 * len(self.kept) + 2 * len(self.pools))
        while True:
            cycle = _negative_cycle(distance, [arc for arcs in per_member for arc in arcs])
            if cycle is None:
                return
            for u in self._push(cycle):
                per_member[u] = self._arcs(u, weights, ranks)

    def _arcs(
        self,
        u: int,
        weights: tuple[int, int, int, int],
        ranks: tuple[Sequence[int], Sequence[int]],
    ) -> list[_Arc]:
        """Member ``u``'s arcs of the residual graph. Nodes: 0 the source, then per member
        its target node and its output node, then per pool its free node and its moved
        node. ``take`` arcs run from a member to a pool, ``give`` arcs back; a unit of a
        pool aligned with the member earns ``w_align``."""
        w_target, w_align, w_kept, w_output = weights
        target_rank, output_rank = ranks[0][u], ranks[1][u]
        members, pools = len(self.kept), len(self.pools)
        free_pool, moved_pool = 1 + 2 * members, 1 + 2 * members + pools
        aligned = frozenset() if self.aligned is None else self.aligned[u]
        arcs: list[_Arc] = []
        add = arcs.append
        target, output = 1 + u, 1 + members + u
        kept, free, moved, claims = self.kept[u], self.free[u], self.moved[u], self.claims[u]
        o = sum(kept.values()) + sum(free.values())
        x = o + sum(moved.values())
        # Convex: the next unit costs w * (2x + 1), the last one given back w * (2x - 1).
        grow, shrink = w_target * (2 * x + 1), w_target * (2 * x - 1)
        add((0, target, grow + target_rank, _INFINITE, w_target, _NOTHING, u, _NO_POOL))
        if x:
            add((target, 0, -shrink - target_rank, x, w_target, _NOTHING, u, _NO_POOL))
        grow, shrink = w_output * (2 * o + 1), w_output * (2 * o - 1)
        add((target, output, grow + output_rank, _INFINITE, w_output, _NOTHING, u, _NO_POOL))
        if o:
            add((output, target, -shrink - output_rank, o, w_output, _NOTHING, u, _NO_POOL))
        for index, t in self._member_pools[u]:
            fp, mp = free_pool + index, moved_pool + index
            a = w_align if t in aligned else 0
            add((target, mp, -a, _INFINITE, 0, _TAKE_MOVED, u, t))
            if moved[t]:
                add((mp, target, a, moved[t], 0, _GIVE_MOVED, u, t))
            add((output, fp, -a, _INFINITE, 0, _TAKE_FREE, u, t))
            if free[t]:
                add((fp, output, a, free[t], 0, _GIVE_FREE, u, t))
            unkept = claims.get(t, 0) - kept[t]
            if unkept:  # it takes back one of its claims from whoever holds it
                add((output, mp, -w_kept - a, unkept, 0, _KEEP, u, t))
            if kept[t]:  # it lets one of its claims go to whoever takes a moved unit
                add((mp, output, w_kept + a, kept[t], 0, _RELEASE, u, t))
        return arcs

    def _push(self, cycle: Sequence[_Arc]) -> set[int]:
        """Move along a negative cycle as many units as keep each one's cost negative;
        returns the members whose counts changed."""
        cost = sum(arc[2] for arc in cycle)
        slope = sum(arc[4] for arc in cycle)
        amount = min(arc[3] for arc in cycle)
        if slope:  # the k-th unit costs cost + 2 * slope * (k - 1)
            amount = min(amount, 1 + (-cost - 1) // (2 * slope))
        for _, _, _, _, _, kind, u, t in cycle:
            if kind == _TAKE_MOVED:
                self.moved[u][t] += amount
            elif kind == _GIVE_MOVED:
                self.moved[u][t] -= amount
            elif kind == _TAKE_FREE:
                self.free[u][t] += amount
            elif kind == _GIVE_FREE:
                self.free[u][t] -= amount
            elif kind == _KEEP:
                self.kept[u][t] += amount
            elif kind == _RELEASE:
                self.kept[u][t] -= amount
        return {arc[6] for arc in cycle}


def _negative_cycle(distance: list[int], arcs: Sequence[_Arc]) -> list[_Arc] | None:
    """A negative-cost cycle of ``arcs``, or None. Bellman-Ford from the given labels
    (lowered in place); after each pass a cycle in the predecessor graph, which is always
    negative, is returned. When no arc lowers a label, none is left."""
    nodes = len(distance)
    parent = [-1] * nodes  # index of the arc that last lowered the node's distance
    for _ in range(nodes + 2):
        changed = False
        for index, arc in enumerate(arcs):
            d = distance[arc[0]] + arc[2]
            if d < distance[arc[1]]:
                distance[arc[1]] = d
                parent[arc[1]] = index
                changed = True
        if not changed:
            return None
        cycle = _parent_cycle(nodes, arcs, parent)
        if cycle is not None:
            return cycle
    raise AssertionError("Bellman-Ford did not settle and found no cycle")  # pragma: no cover


def _parent_cycle(nodes: int, arcs: Sequence[_Arc], parent: Sequence[int]) -> list[_Arc] | None:
    """A cycle of the predecessor graph, in arc order, or None."""
    seen = [-1] * nodes
    for start in range(nodes):
        node = start
        while node != -1 and seen[node] == -1:
            seen[node] = start
            node = arcs[parent[node]][0] if parent[node] != -1 else -1
        if node != -1 and seen[node] == start:
            cycle = []
            at = node
            while True:
                arc = arcs[parent[at]]
                cycle.append(arc)
                at = arc[0]
                if at == node:
                    break
            cycle.reverse()
            return cycle
    return None


# --- the start: balanced counts, claims kept where balance allows ------------------------------


def initial_counts(
    topics: Sequence[str],
    partitions_per_topic: Mapping[str, int],
    subscribed: Sequence[frozenset[str]],
    valid: Sequence[Sequence[TopicPartition]],
) -> list[dict[str, int]]:
    """Units per (member, topic) with the minimal sum of squares: valid claims kept, free
    partitions to the eligible member holding the fewest, then units shifted along chains
    (unclaimed units first) until no member can pass one to a member holding two fewer."""
    counts = _Counts(topics, partitions_per_topic, subscribed, valid)
    counts.balance()
    return counts.held


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
