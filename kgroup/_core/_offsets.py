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
"""

from __future__ import annotations

import enum
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


class _Kind(enum.Enum):
    RETRY = "retry"
    COORDINATOR = "coordinator"


_COMMIT_RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: _Kind.RETRY,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: _Kind.RETRY,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: _Kind.COORDINATOR,
    ErrorCode.NOT_COORDINATOR: _Kind.COORDINATOR,
    ErrorCode.REQUEST_TIMED_OUT: _Kind.COORDINATOR,
}


_RETRIABLE_CODES = frozenset(int(code) for code in _COMMIT_RETRIABLE)


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
            f"group {core.config.group_id!r} is rebalancing: call poll() to complete the "
            "rebalance, then commit again"
        )
    if core.state is not MemberState.STABLE or generation.is_reset:
        raise CommitFailed(
            f"cannot commit for group {core.config.group_id!r}: this member is not part of "
            "an active generation (its partitions may belong to another member now)"
        )
    return OffsetCommitRequest(
        group_id=core.config.group_id,
        generation_id=generation.generation_id,
        member_id=generation.member_id,
        group_instance_id=core.config.group_instance_id,
        partitions=parts,
    )


def _commit_failed(core: MemberCore, why: str) -> CommitFailed:
    return CommitFailed(
        f"offset commit for group {core.config.group_id!r} failed: {why}. The partitions may "
        "belong to another member now; do not assume these offsets were stored"
    )


def _rebalancing(core: MemberCore, why: str) -> RebalanceInProgress:
    return RebalanceInProgress(
        f"offset commit for group {core.config.group_id!r} failed: {why}; call poll() to "
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
    unchanged = sent == core.generation
    if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
        error = GroupAuthorizationFailed(
            f"not authorized to commit offsets for group {core.config.group_id!r}",
            group_id=core.config.group_id,
            member_id=sent.member_id,
            generation_id=sent.generation_id,
            error_code=code,
            api="OffsetCommit",
        )
        core.record_fatal(error)
        return Fail(error)
    if unauthorized:
        return Fail(TopicAuthorizationFailed(unauthorized))
    kind = _COMMIT_RETRIABLE.get(ErrorCode(code)) if code in _RETRIABLE_CODES else None
    if kind is not None:
        name = _name(code)
        if kind is _Kind.COORDINATOR:
            core.mark_coordinator_unknown(f"OffsetCommit answered {name}")
        return Retry(f"{name} for {where}", coordinator_lost=kind is _Kind.COORDINATOR)
    if code == ErrorCode.FENCED_INSTANCE_ID:
        if unchanged:
            fenced = FencedInstanceId(
                f"group instance id {core.config.group_instance_id!r} was fenced by another "
                "member with the same id (OffsetCommit)",
                group_id=core.config.group_id,
                member_id=sent.member_id,
                generation_id=sent.generation_id,
                error_code=code,
                api="OffsetCommit",
            )
            core.record_fatal(fenced)
            return Fail(fenced)
        if core.state is MemberState.PREPARING_REBALANCE:
            return Fail(_rebalancing(core, "FENCED_INSTANCE_ID for an earlier generation"))
        return Fail(_commit_failed(core, "FENCED_INSTANCE_ID for an earlier generation"))
    if code == ErrorCode.REBALANCE_IN_PROGRESS:
        core.request_rejoin("OffsetCommit answered REBALANCE_IN_PROGRESS")
        return Fail(_rebalancing(core, "the group is rebalancing"))
    if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
        name = _name(code)
        if not unchanged and core.state is MemberState.PREPARING_REBALANCE:
            # F37: the member already moved on and is rejoining: the join in flight and
            # the member id it uses are left alone.
            return Fail(_rebalancing(core, f"{name} for generation {sent.generation_id}"))
        if unchanged:
            core.reset_generation(
                keep_member_id=code == ErrorCode.ILLEGAL_GENERATION,
                reason=f"OffsetCommit answered {name}",
            )
        return Fail(_commit_failed(core, f"{name} (generation {sent.generation_id})"))
    return Fail(
        OffsetsError(
            f"offset commit for group {core.config.group_id!r} rejected: {_name(code)} for {where}",
            api="OffsetCommit",
            error_code=code,
        )
    )


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
    return OffsetFetchRequest(group_id=core.config.group_id, partitions=tuple(wanted))


FetchVerdict = Done | Retry | Fail


def on_fetch_response(
    core: MemberCore, response: OffsetFetchResponse
) -> tuple[FetchVerdict, dict[TopicPartition, OffsetAndMetadata | None]]:
    """Judge an OffsetFetch answer (the table of §4.7); on success the committed offset of
    each partition, None where nothing is committed (offset -1)."""
    group = core.config.group_id
    code = response.error_code
    if code:
        name = _name(code)
        if code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
            core.mark_coordinator_unknown(f"OffsetFetch answered {name}")
            return Retry(name, coordinator_lost=True), {}
        if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
            error = GroupAuthorizationFailed(
                f"not authorized to fetch offsets of group {group!r}",
                group_id=group,
                error_code=code,
                api="OffsetFetch",
            )
            core.record_fatal(error)
            return Fail(error), {}
        if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return Retry(name), {}
        return Fail(
            OffsetsError(
                f"offset fetch for group {group!r} failed: {name}",
                api="OffsetFetch",
                error_code=code,
            )
        ), {}
    unauthorized = sorted({p.topic for p in response.partitions if p.error_code == 29})
    if unauthorized:
        return Fail(TopicAuthorizationFailed(unauthorized)), {}
    result: dict[TopicPartition, OffsetAndMetadata | None] = {}
    for p in response.partitions:
        tp = TopicPartition(p.topic, p.partition)
        if p.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
            return Retry(f"UNSTABLE_OFFSET_COMMIT for {tp}"), {}
        if p.error_code:
            return Fail(
                OffsetsError(
                    f"offset fetch for group {group!r} failed: {_name(p.error_code)} for {tp}",
                    api="OffsetFetch",
                    error_code=p.error_code,
                )
            ), {}
        result[tp] = (
            None if p.offset < 0 else OffsetAndMetadata(p.offset, p.metadata or "", p.leader_epoch)
        )
    return Done(), result


def _name(code: int) -> str:
    return ErrorCode.describe(code)
