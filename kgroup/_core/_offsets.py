"""Offsets under a group generation, sans-I/O: what to send, and what an answer means.

Spec §4.6 (OffsetCommit), §4.7 (OffsetFetch) and §9. The runtime
(``kgroup._runtime._offsets``) sends the requests and sleeps between retries; every decision
is made here, on plain values and the :class:`MemberCore`, so that scenarios F34-F40 run as
fast deterministic unit tests.

A commit is sent only from STABLE, under the generation of that moment. While the eager
revoke callback runs (the pre-join hook), the member is still STABLE in its generation, so a
commit made there is sent with it and the broker accepts it even though the group is
already PREPARING_REBALANCE (§9.2).

Every answer is judged against the generation the request was *sent* under (§2.5): an
error about a generation the member has already left cannot reset the one it is in now.
The error codes and that rule are in the table of :mod:`kgroup._core._reactions`; this
module only carries out the reactions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .._errors import (
    CommitFailed,
    ErrorCode,
    FencedInstanceId,
    GroupAuthorizationFailed,
    KGroupError,
    OffsetsError,
    RebalanceInProgress,
    TopicAuthorizationFailed,
)
from ._consumer_protocol import TopicPartition
from ._member import MemberCore
from ._messages import (
    CommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from ._reactions import Api, Reaction, reaction_for, unhandled
from ._state import Generation, MemberState

__all__ = [
    "Done",
    "Fail",
    "OffsetAndMetadata",
    "Retry",
    "commit_request",
    "fetch_request",
    "on_commit_failed",
    "on_commit_response",
    "on_fetch_response",
]

_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed position: the offset of the *next* record to read, with optional
    metadata (a string stored beside it) and the leader epoch of the last record read
    (-1: unknown)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Done:
    """The request succeeded."""


@dataclass(frozen=True, slots=True)
class Retry:
    """A retriable failure: try again after a backoff (once a coordinator is known, if
    ``coordinator_lost``)."""

    reason: str
    coordinator_lost: bool = False


@dataclass(frozen=True, slots=True)
class Fail:
    """Give up and raise ``error`` to the caller."""

    error: KGroupError


Verdict = Done | Retry | Fail


def _normalise(
    offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
) -> tuple[CommitPartition, ...]:
    parts: list[CommitPartition] = []
    for tp, value in offsets.items():
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"offsets keys must be TopicPartition, got {tp!r}")
        om = OffsetAndMetadata(value) if isinstance(value, int) else value
        if not isinstance(om, OffsetAndMetadata) or isinstance(om.offset, bool):
            raise TypeError(f"offset for {tp} must be an int or OffsetAndMetadata, got {value!r}")
        if not 0 <= om.offset <= _INT64_MAX:
            raise ValueError(f"offset for {tp} must be in 0..2**63-1, got {om.offset}")
        parts.append(
            CommitPartition(
                topic=tp.topic,
                partition=tp.partition,
                offset=om.offset,
                leader_epoch=om.leader_epoch,
                metadata=om.metadata,
            )
        )
    return tuple(parts)


def commit_request(
    core: MemberCore, offsets: Mapping[TopicPartition, OffsetAndMetadata | int]
) -> OffsetCommitRequest | Done:
    """The OffsetCommit to send now, or :class:`Done` when there is nothing to commit.

    The client pre-checks of §4.6: a bad offset raises ``ValueError``/``TypeError``; a
    member that is rebalancing raises :class:`RebalanceInProgress` (poll, then retry) and
    one outside any generation :class:`CommitFailed`, both without sending anything.
    """
    parts = _normalise(offsets)
    if not parts:
        return Done()
    generation = core.generation
    if core.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
        raise RebalanceInProgress(
            f"group {core.settings.group_id!r} is rebalancing: call poll() to complete the "
            "rebalance, then commit again"
        )
    if core.state is not MemberState.STABLE or generation.is_reset:
        raise CommitFailed(
            f"cannot commit for group {core.settings.group_id!r}: this member is not part of "
            "an active generation (its partitions may belong to another member now)"
        )
    return OffsetCommitRequest(
        group_id=core.settings.group_id,
        generation_id=generation.generation_id,
        member_id=generation.member_id,
        group_instance_id=core.settings.group_instance_id,
        partitions=parts,
    )


def _commit_failed(core: MemberCore, why: str) -> CommitFailed:
    return CommitFailed(
        f"offset commit for group {core.settings.group_id!r} failed: {why}. The partitions may "
        "belong to another member now; do not assume these offsets were stored"
    )


def _rebalancing(core: MemberCore, why: str) -> RebalanceInProgress:
    return RebalanceInProgress(
        f"offset commit for group {core.settings.group_id!r} failed: {why}; call poll() to "
        "complete the rebalance, then commit again"
    )


def on_commit_response(
    core: MemberCore, sent: Generation, response: OffsetCommitResponse
) -> Verdict:
    """Judge an OffsetCommit answer (the per-partition table of §4.6) and apply its
    reaction to ``core``. ``sent`` is the generation the request carried."""
    unauthorized = sorted({topic for topic, _, code in response.results if code == 29})
    first = next(
        ((topic, partition, code) for topic, partition, code in response.results if code),
        None,
    )
    if first is None:
        return Done()
    topic, partition, code = first
    where = f"{topic}-{partition}"
    reaction = reaction_for(Api.OFFSET_COMMIT, code, sent=sent, current=core.generation)
    if reaction is Reaction.UNAUTHORIZED:
        error = GroupAuthorizationFailed(
            f"not authorized to commit offsets for group {core.settings.group_id!r}",
            group_id=core.settings.group_id,
            member_id=sent.member_id,
            generation_id=sent.generation_id,
            error_code=code,
            api="OffsetCommit",
        )
        core.record_fatal(error)
        return Fail(error)
    if unauthorized:
        return Fail(TopicAuthorizationFailed(unauthorized))
    name = _name(code)
    if reaction is Reaction.RETRY_BACKOFF or reaction is Reaction.COORDINATOR_MOVED:
        moved = reaction is Reaction.COORDINATOR_MOVED
        if moved:
            core.mark_coordinator_unknown(f"OffsetCommit answered {name}")
        return Retry(f"{name} for {where}", coordinator_lost=moved)
    if reaction is Reaction.FENCED:
        fenced = FencedInstanceId(
            f"group instance id {core.settings.group_instance_id!r} was fenced by another "
            "member with the same id (OffsetCommit)",
            group_id=core.settings.group_id,
            member_id=sent.member_id,
            generation_id=sent.generation_id,
            error_code=code,
            api="OffsetCommit",
        )
        core.record_fatal(fenced)
        return Fail(fenced)
    if reaction is Reaction.REBALANCING:
        core.request_rejoin("OffsetCommit answered REBALANCE_IN_PROGRESS")
        return Fail(_rebalancing(core, "the group is rebalancing"))
    if reaction is Reaction.RESET_GENERATION or reaction is Reaction.RESET_GENERATION_KEEP_ID:
        core.reset_generation(
            keep_member_id=reaction is Reaction.RESET_GENERATION_KEEP_ID,
            reason=f"OffsetCommit answered {name}",
        )
        return Fail(_commit_failed(core, f"{name} (generation {sent.generation_id})"))
    if reaction is Reaction.STALE:
        # The member already moved on. While it rejoins (F37), the join in flight and the
        # member id it uses are left alone: RebalanceInProgress; otherwise CommitFailed.
        rejoining = core.state is MemberState.PREPARING_REBALANCE
        if code == ErrorCode.FENCED_INSTANCE_ID:
            why = "FENCED_INSTANCE_ID for an earlier generation"
            return Fail(_rebalancing(core, why) if rejoining else _commit_failed(core, why))
        if rejoining:
            return Fail(_rebalancing(core, f"{name} for generation {sent.generation_id}"))
        return Fail(_commit_failed(core, f"{name} (generation {sent.generation_id})"))
    if reaction is Reaction.FAIL:
        return Fail(
            OffsetsError(
                f"offset commit for group {core.settings.group_id!r} rejected: {name} for {where}",
                api="OffsetCommit",
                error_code=code,
            )
        )
    unhandled(Api.OFFSET_COMMIT, code, reaction)


def on_commit_failed(core: MemberCore, reason: str, api: str = "OffsetCommit") -> Retry:
    """A transport failure (no answer) of an OffsetCommit or OffsetFetch (``api``): the
    coordinator is marked unknown; retriable."""
    core.mark_coordinator_unknown(f"{api} failed: {reason}")
    return Retry(reason, coordinator_lost=True)


def fetch_request(core: MemberCore, partitions: Iterable[TopicPartition]) -> OffsetFetchRequest:
    """The OffsetFetch for ``partitions`` (with ``require_stable``, as Java sends it)."""
    wanted: list[tuple[str, int]] = []
    for tp in dict.fromkeys(partitions):
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"partitions must be TopicPartition values, got {tp!r}")
        wanted.append((tp.topic, tp.partition))
    return OffsetFetchRequest(group_id=core.settings.group_id, partitions=tuple(wanted))


FetchVerdict = Done | Retry | Fail


def on_fetch_response(
    core: MemberCore, response: OffsetFetchResponse
) -> tuple[FetchVerdict, dict[TopicPartition, OffsetAndMetadata | None]]:
    """Judge an OffsetFetch answer (the table of §4.7); on success the committed offset of
    each partition, None where nothing is committed (offset -1)."""
    group = core.settings.group_id
    code = response.error_code
    generation = core.generation  # OffsetFetch carries no Generation
    reaction = reaction_for(Api.OFFSET_FETCH, code, sent=generation, current=generation)
    if reaction is not Reaction.OK:
        name = _name(code)
        if reaction is Reaction.COORDINATOR_MOVED:
            core.mark_coordinator_unknown(f"OffsetFetch answered {name}")
            return Retry(name, coordinator_lost=True), {}
        if reaction is Reaction.UNAUTHORIZED:
            error = GroupAuthorizationFailed(
                f"not authorized to fetch offsets of group {group!r}",
                group_id=group,
                error_code=code,
                api="OffsetFetch",
            )
            core.record_fatal(error)
            return Fail(error), {}
        if reaction is Reaction.RETRY_BACKOFF:
            return Retry(name), {}
        if reaction is Reaction.FAIL:
            return Fail(
                OffsetsError(
                    f"offset fetch for group {group!r} failed: {name}",
                    api="OffsetFetch",
                    error_code=code,
                )
            ), {}
        unhandled(Api.OFFSET_FETCH, code, reaction)
    unauthorized = sorted({p.topic for p in response.partitions if p.error_code == 29})
    if unauthorized:
        return Fail(TopicAuthorizationFailed(unauthorized)), {}
    result: dict[TopicPartition, OffsetAndMetadata | None] = {}
    for p in response.partitions:
        tp = TopicPartition(p.topic, p.partition)
        reaction = reaction_for(
            Api.OFFSET_FETCH_PARTITION, p.error_code, sent=generation, current=generation
        )
        if reaction is Reaction.RETRY_BACKOFF:
            return Retry(f"{ErrorCode(p.error_code).name} for {tp}"), {}
        if reaction is Reaction.FAIL:
            return Fail(
                OffsetsError(
                    f"offset fetch for group {group!r} failed: {_name(p.error_code)} for {tp}",
                    api="OffsetFetch",
                    error_code=p.error_code,
                )
            ), {}
        if reaction is not Reaction.OK:
            unhandled(Api.OFFSET_FETCH_PARTITION, p.error_code, reaction)
        result[tp] = (
            None if p.offset < 0 else OffsetAndMetadata(p.offset, p.metadata or "", p.leader_epoch)
        )
    return Done(), result


def _name(code: int) -> str:
    return ErrorCode.describe(code)
