"""The asyncio runtime of a classic-protocol member (JoinGroup, SyncGroup, Heartbeat).

It drives :class:`~kgroup._core._member.MemberCore` with the parts every member has,
:class:`~._shared.Shared` and :class:`~._link.CoordinatorLink`, and with its own:

- :class:`~._heartbeat.HeartbeatDriver`: the heartbeat task (one loop, one wait, which also
  watches the lease);
- :class:`~._metadata.MetadataWatch`: the leader's metadata watch and pattern subscriptions
  (§7.7);
- :class:`~._rebalance.RebalanceDriver`: the poll path and the join chain (the member
  shares it: its listener-callback runner serves the consumer protocol too);
- :func:`~._handoff.hand_off`: the optional handoff on close.

It is one of the two :class:`~._membership.MembershipRuntime` implementations that
:class:`~kgroup.GroupMember` talks to (the other is
:class:`~._kip848.ConsumerProtocolRuntime`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from .._config import check_topic_pattern, check_topics
from .._core._assignors import RebalanceProtocol
from .._core._embedding import ConsumerEmbedding
from .._core._member import MemberCore
from .._core._state import MemberState
from .._errors import ListenerError, UsageError
from ._handoff import hand_off
from ._heartbeat import HeartbeatDriver, send_leave
from ._link import CoordinatorLink
from ._metadata import MetadataWatch
from ._rebalance import RebalanceDriver
from ._shared import Shared

__all__ = ["ClassicRuntime", "classic_core"]

#: What close() keeps of its budget after the LeaveGroup's own deadline (ms).
_CLOSE_MARGIN_MS = 100.0


def classic_core(shared: Shared) -> MemberCore:
    """A classic core for the member's configuration and embedding."""
    embedding = shared.embedding
    return MemberCore(
        shared.config.member_settings(),
        protocol_type=embedding.protocol_type,
        protocols=embedding.metadata,
        now=shared.now(),
        observer=shared.observe,
        holds_assignment=lambda: bool(embedding.owned or shared.releasing),
    )


class ClassicRuntime:
    """Runs one classic-protocol member (see the module docstring)."""

    def __init__(self, shared: Shared, link: CoordinatorLink, rebalance: RebalanceDriver) -> None:
        self._shared = shared
        self._link = link
        self._rebalance = rebalance
        self._heartbeat = HeartbeatDriver(shared, link)
        self._metadata = MetadataWatch(shared, link)

    # -- state -----------------------------------------------------------------------------

    @property
    def state(self) -> MemberState:
        core = self._shared.core
        return core.state if core is not None else MemberState.UNJOINED

    @property
    def assignment(self) -> frozenset[Any]:
        return self._shared.embedding.owned

    @property
    def subscription(self) -> tuple[str, ...]:
        embedding = self._shared.embedding
        return embedding.topics if isinstance(embedding, ConsumerEmbedding) else ()

    @property
    def rebalance_protocol(self) -> RebalanceProtocol:
        """The best protocol all the assignors support, or the GroupProtocol's."""
        return self._shared.embedding.rebalance_protocol

    # -- start -----------------------------------------------------------------------------

    def open(self) -> None:
        self._shared.core = classic_core(self._shared)

    def spawn_tasks(self, abandoned: Callable[[], bool]) -> None:
        """On the coordinator loop: the heartbeat task and the metadata watch."""
        tasks = self._shared.tasks
        tasks.spawn(self._heartbeat.run(abandoned), "kgroup-heartbeat")
        tasks.spawn(self._metadata.run(), "kgroup-metadata-watch")

    async def resolve_subscription(self) -> None:
        """Join with the topics a pattern matches now, not with none (which would cost the
        group a second rebalance once the watch resolved it)."""
        shared = self._shared
        embedding = shared.embedding
        if isinstance(embedding, ConsumerEmbedding) and embedding.pattern:
            assert shared.seam is not None
            if not await shared.seam.run_on_coordinator(self._metadata.refresh()):
                shared.wake_metadata()  # retried by the watch after retry_backoff_max_ms

    # -- subscription ----------------------------------------------------------------------

    async def subscribe(self, topics: Iterable[str] | None, pattern: str | None) -> None:
        """See :meth:`kgroup.GroupMember.subscribe`."""
        if (topics is None) == (pattern is None):
            raise UsageError("subscribe() takes either topics or pattern")
        shared = self._shared
        embedding = shared.embedding
        if not isinstance(embedding, ConsumerEmbedding):
            raise UsageError("subscribe() is for consumer groups; this member has a GroupProtocol")
        if pattern is not None:
            compiled = check_topic_pattern(pattern, "pattern")
            assert shared.seam is not None
            counts = await shared.seam.run_on_coordinator(self._link.transport.list_topics())
            new_topics = tuple(sorted(t for t in counts if compiled.fullmatch(t)))
        else:
            compiled = None
            new_topics = check_topics(topics, "topics")
        shared.check_open()
        with shared.lock:
            before = embedding.topics
            changed = embedding.subscribe(new_topics, compiled)
        if changed:
            shared.announce(
                "member.subscription_changed",
                group=shared.config.group_id,
                before=list(before),
                topics=list(embedding.topics),
                pattern=None if compiled is None else compiled.pattern,
            )
            with shared.step() as core:
                core.request_rejoin("subscription changed")

    def enforce_rebalance(self, reason: str) -> None:
        """See :meth:`kgroup.GroupMember.enforce_rebalance`."""
        if not isinstance(reason, str) or not reason:
            raise UsageError("enforce_rebalance() needs a non-empty reason string")
        shared = self._shared
        shared.announce("member.rebalance_enforced", group=shared.config.group_id, reason=reason)
        with shared.step() as core:
            core.request_rejoin(reason)

    # -- poll and close --------------------------------------------------------------------

    async def poll(self, timeout: float | None) -> frozenset[Any]:
        return await self._rebalance.poll(timeout)

    async def close(self, errors: list[ListenerError], *, handoff: bool, deadline: float) -> None:
        """Hand off (if asked), stop the join chain, release the partitions (revoked, or
        lost if the generation is gone), then send the LeaveGroup (dynamic members) with
        what is left before ``deadline`` (the event loop's clock)."""
        shared = self._shared
        assert shared.seam is not None
        seam = shared.seam
        loop = asyncio.get_running_loop()
        outcome = None
        if handoff:
            # Three quarters of close()'s budget (ms): the others join the handoff's
            # rebalance at their next heartbeat; the rest is for the fallback.
            config = shared.config
            budget = min(config.close_timeout_ms, config.request_timeout_ms) / 1000.0
            until = shared.now() + budget * 750.0
            outcome = await hand_off(shared, self._rebalance, until, errors)
        await seam.run_on_coordinator(self._rebalance.cancel_chain())
        with shared.step() as core:
            core.abandon_chain()
            if outcome is None:
                lost = core.close_releases_lost()
            else:
                lost = core.handoff_releases_lost(shared.now())
        await self._rebalance.run_calls(shared.embedding.release(lost=lost), errors)
        with shared.step() as core:
            leave = core.maybe_leave("the consumer is being closed")
        if leave is not None:
            # Leave a little of the budget for the request's own timeout to fire.
            left_ms = (deadline - loop.time()) * 1000.0 - _CLOSE_MARGIN_MS
            await seam.run_on_coordinator(send_leave(shared, self._link, leave, max(1.0, left_ms)))
