"""The metadata watch: what the member learns from topic metadata between rebalances.

Two duties (spec §7.7 and §2.3), both on the coordinator loop, every
``metadata_max_age_ms`` and whenever woken:

- **the leader's watch:** the member that computed the current assignment compares the
  subscribed topics' partition counts with the snapshot it assigned from, and rejoins when
  they differ (a topic grew partitions, or appeared, or went away). A leader's JoinGroup in
  a stable group makes the broker start a rebalance, which is how the new partitions reach
  the group. A member whose JoinGroup named no leader (a classic member of a consumer
  group) watches likewise, from the counts of its first refresh in the generation: Kafka
  may convert the group back to classic without a rebalance, and then nobody leads it
  (deviations.md row 21);
- **a pattern subscription:** the member lists the cluster's topics, takes those the
  pattern matches, and rejoins when that set changed.

A failed refresh is logged (``member.metadata_refresh_failed``) and tried again after
``retry_backoff_max_ms``; it never affects the membership itself.
"""

from __future__ import annotations

import asyncio

from .._core._embedding import ConsumerEmbedding
from .._core._state import MemberState
from .._errors import CoordinatorError, RemoteProtocolError
from ._link import CoordinatorLink
from ._shared import Shared

__all__ = ["MetadataWatch"]


class MetadataWatch:
    """Runs the metadata refresh loop (see the module docstring)."""

    def __init__(self, shared: Shared, link: CoordinatorLink) -> None:
        self._shared = shared
        self._link = link
        self.refreshes = 0

    async def run(self) -> None:
        shared = self._shared
        config = shared.config
        wait_s = config.metadata_max_age_ms / 1000.0
        while shared.open:
            try:
                async with asyncio.timeout(wait_s):
                    await shared.metadata_wake.wait()
            except TimeoutError:
                pass
            shared.metadata_wake.clear()
            if not shared.open:
                return
            ok = await self.refresh()
            wait_s = (config.metadata_max_age_ms if ok else config.retry_backoff_max_ms) / 1000.0

    async def refresh(self) -> bool:
        """One refresh; False when the cluster could not be asked (retried sooner)."""
        shared = self._shared
        try:
            await self.resolve_pattern()
            await self._check_leader_snapshot()
        except (CoordinatorError, RemoteProtocolError) as exc:
            shared.announce(
                "member.metadata_refresh_failed", group=shared.config.group_id, error=str(exc)
            )
            return False
        self.refreshes += 1
        return True

    async def resolve_pattern(self) -> None:
        """A pattern subscription: take the matching topics now; rejoin if they changed."""
        shared = self._shared
        embedding = shared.embedding
        if not isinstance(embedding, ConsumerEmbedding) or embedding.pattern is None:
            return
        pattern = embedding.pattern
        counts = await self._link.transport.list_topics()
        with shared.lock:
            if embedding.pattern is not pattern:
                return  # subscribe() changed it meanwhile
            before = embedding.topics
            matched = embedding.matching(counts)
            changed = embedding.subscribe(matched, pattern)
        if changed:
            shared.announce(
                "member.subscription_changed",
                group=shared.config.group_id,
                pattern=pattern.pattern,
                before=list(before),
                topics=matched,
            )
            self._rejoin("subscribed topics changed (pattern " + repr(pattern.pattern) + ")")

    async def _check_leader_snapshot(self) -> None:
        shared = self._shared
        core = shared.core
        if core is None:
            return
        embedding = shared.embedding
        if not isinstance(embedding, ConsumerEmbedding):
            return  # a GroupProtocol's leader watches no topics
        with shared.lock:
            snapshot = embedding.assignment_snapshot
            stable = core.state is MemberState.STABLE
            generation = core.generation
            # DEVIATION (spec §7.7, §10.9; deviations.md row 21): a member whose JoinGroup
            # named no leader watches too (a consumer group's classic member: Kafka may turn
            # the group classic again without a rebalance, with nobody leading it).
            baseline = stable and core.leaderless and snapshot is None
            watching = stable and snapshot is not None and (core.is_leader or core.leaderless)
        if baseline:
            counts = await self._link.transport.partitions_for(sorted(embedding.topics))
            with shared.lock:
                if core.generation == generation and embedding.assignment_snapshot is None:
                    embedding.watch(counts)
            return
        if not watching or snapshot is None:
            return
        counts = await self._link.transport.partitions_for(sorted(snapshot))
        with shared.lock:
            if embedding.assignment_snapshot is not snapshot:
                return  # a rebalance started meanwhile: it takes fresh metadata anyway
            reason = embedding.metadata_changed(counts)
        if reason is not None:
            shared.announce("member.metadata_changed", group=shared.config.group_id, reason=reason)
            self._rejoin(reason)

    def _rejoin(self, reason: str) -> None:
        shared = self._shared
        if not shared.open:
            return
        with shared.step() as core:
            core.request_rejoin(reason)  # wakes poll()
