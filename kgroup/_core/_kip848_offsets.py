"""Offsets of a consumer-protocol member, sans-I/O (spec §10.8).

The same runtime loop as the classic member's (``kgroup._runtime._offsets``) sends these;
only the rules differ:

- a commit carries the **member epoch** (OffsetCommit v9+, which the broker requires of a
  consumer-protocol member) and may be sent while the member has an epoch: STABLE, and
  also RECONCILING and ACKNOWLEDGING, so a revoke callback can commit before it returns;
- STALE_MEMBER_EPOCH is retried when the member's epoch moved on since the commit was
  sent (the retry carries the new one), and is CommitFailed otherwise;
- any retry (after STALE_MEMBER_EPOCH, or a coordinator error or lost connection) goes out
  only while the member still holds every partition of the commit, and is CommitFailed
  otherwise: Kafka takes a commit under the current epoch without looking at what the
  member owns, so the retry of a partition revoked meanwhile, by a ``poll()`` in another
  task, would store offsets another member may own; UNKNOWN_MEMBER_ID,
  FENCED_MEMBER_EPOCH, ILLEGAL_GENERATION and FENCED_INSTANCE_ID are CommitFailed (the
  heartbeat, not the commit, decides whether the member is fenced);
- OffsetFetch v9+ carries the member id and epoch; STALE_MEMBER_EPOCH and UNKNOWN_MEMBER_ID
  fail it without a retry;
- both name each topic by the id the member holds (or last held) its partitions under
  (:meth:`~kgroup._core._kip848_base.ConsumerMemberBase.offset_topic_ids`), which
  the wire layer sends as v10 when the broker has it (Kafka 4.2+): a commit for a topic
  deleted since then is answered UNKNOWN_TOPIC_ID, and is CommitFailed without a retry,
  instead of being stored, by name, for a new topic of the same name.

Every other code is judged by the classic table (:mod:`kgroup._core._reactions`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import cast

from .._errors import CommitFailed, ErrorCode, OffsetsError
from ._consumer_protocol import TopicPartition
from ._kip848_member import ConsumerProtocolMember
from ._kip848_state import ConsumerState
from ._member import MemberCore
from ._messages import (
    TOPIC_ID_OFFSET_VERSION,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from ._offsets import (
    Done,
    Fail,
    OffsetAndMetadata,
    Retry,
    Verdict,
    _normalise,
    fetch_request,
    on_commit_response,
    on_fetch_response,
)
from ._state import Generation

__all__ = [
    "commit_request_848",
    "fetch_request_848",
    "on_commit_response_848",
    "on_fetch_response_848",
]

S = ConsumerState
E = ErrorCode

#: The states in which the member has an epoch the broker accepts commits under.
_COMMITTING = frozenset({S.STABLE, S.RECONCILING, S.ACKNOWLEDGING, S.PREPARE_LEAVING})
_NOT_A_MEMBER = frozenset(
    {E.UNKNOWN_MEMBER_ID, E.FENCED_MEMBER_EPOCH, E.ILLEGAL_GENERATION, E.FENCED_INSTANCE_ID}
)


def _as_classic(core: ConsumerProtocolMember) -> MemberCore:
    # The classic rules used below read only what both cores have alike: settings.group_id
    # and group_instance_id, generation, mark_coordinator_unknown and record_fatal.
    return cast(MemberCore, core)


def commit_request_848(
    core: ConsumerProtocolMember,
    offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
    *,
    retry: bool = False,
) -> OffsetCommitRequest | Done:
    """The OffsetCommit to send now (v9+, under the member epoch, by topic id when the member
    knows every one), or :class:`Done` when there is nothing to commit. A member without an
    epoch raises :class:`CommitFailed`, and so does a ``retry`` once the member gave up a
    partition of the commit."""
    parts = _normalise(offsets)
    if not parts:
        return Done()
    if retry and (gone := _given_up(core, offsets)):
        raise _not_retried(core, gone)
    if core.state not in _COMMITTING or core.member_epoch <= 0:
        raise CommitFailed(
            f"cannot commit for group {core.settings.group_id!r}: this member has no member "
            f"epoch now ({core.state.name}; its partitions may belong to another member)"
        )
    return OffsetCommitRequest(
        group_id=core.settings.group_id,
        generation_id=core.member_epoch,
        member_id=core.member_id,
        group_instance_id=core.settings.instance_id,
        partitions=parts,
        max_version=TOPIC_ID_OFFSET_VERSION,
        topic_ids=core.offset_topic_ids(TopicPartition(p.topic, p.partition) for p in parts),
    )


def on_commit_response_848(
    core: ConsumerProtocolMember, sent: Generation, response: OffsetCommitResponse
) -> Verdict:
    """Judge an OffsetCommit answer; ``sent`` carries the epoch the request was sent with."""
    first = next((code for _, _, code in response.results if code), None)
    if first == E.STALE_MEMBER_EPOCH:
        if core.member_epoch > 0 and core.member_epoch != sent.generation_id:
            # The retry goes out only while every partition is held (commit_request_848).
            return Retry(f"STALE_MEMBER_EPOCH at epoch {sent.generation_id}: the epoch moved on")
        return Fail(_commit_failed(core, "STALE_MEMBER_EPOCH", sent))
    if first in _NOT_A_MEMBER:
        return Fail(_commit_failed(core, ErrorCode.describe(first), sent))
    if first == E.REBALANCE_IN_PROGRESS:  # not a consumer-protocol answer: retry
        return Retry("REBALANCE_IN_PROGRESS")
    if first == E.UNKNOWN_TOPIC_ID:
        return Fail(_topic_gone(core, response))
    return on_commit_response(_as_classic(core), sent, response)


def _topic_gone(core: ConsumerProtocolMember, response: OffsetCommitResponse) -> CommitFailed:
    # DEVIATION (deviations.md row 25): Java retries UNKNOWN_TOPIC_ID until its timeout.
    # The member names a partition by the topic id it was given it under, which the broker
    # knew then: the topic was deleted since, and a retry cannot succeed; in a revoke
    # callback it would only hold the revoke up until the commit's timeout.
    gone = sorted(f"{t}-{p}" for t, p, code in response.results if code == E.UNKNOWN_TOPIC_ID)
    return CommitFailed(
        f"offset commit for group {core.settings.group_id!r} failed: UNKNOWN_TOPIC_ID for "
        f"{', '.join(gone)}: the topic this member was given them under was deleted (a "
        "topic of that name now, if any, is another one); these offsets were not stored"
    )


def _given_up(core: ConsumerProtocolMember, partitions: Iterable[TopicPartition]) -> list[str]:
    """The partitions of a commit the member no longer holds (owns or installs)."""
    gone = {TopicPartition(p[0], p[1]) for p in partitions} - core.held()
    return sorted(str(p) for p in gone)


def _not_retried(core: ConsumerProtocolMember, gone: list[str]) -> CommitFailed:
    # DEVIATION (spec §10.8, deviations.md row 24): Kafka takes a commit under the current
    # epoch whatever the member owns, so a commit retried after the member gave up one of
    # its partitions (revoked by a poll() in another task while the commit was in flight)
    # would store offsets another member may own: a retry goes out only while all are held.
    return CommitFailed(
        f"offset commit for group {core.settings.group_id!r} not retried: this member no "
        f"longer owns {', '.join(gone)} at epoch {core.member_epoch}, and another "
        "member may own them now; do not assume these offsets were stored"
    )


def _commit_failed(core: ConsumerProtocolMember, name: str, sent: Generation) -> CommitFailed:
    return CommitFailed(
        f"offset commit for group {core.settings.group_id!r} failed: {name} (member epoch "
        f"{sent.generation_id}). The partitions may belong to another member now; do not "
        "assume these offsets were stored"
    )


def fetch_request_848(
    core: ConsumerProtocolMember, partitions: Iterable[TopicPartition]
) -> OffsetFetchRequest:
    """The OffsetFetch for ``partitions`` (the classic one), with the member id and epoch
    when the member has one, and the topic ids of the partitions it holds or held."""
    request = fetch_request(_as_classic(core), partitions)
    assert request.partitions is not None
    topic_ids = core.offset_topic_ids(TopicPartition(t, p) for t, p in request.partitions)
    if core.member_epoch <= 0:
        return dataclasses.replace(request, topic_ids=topic_ids)
    return dataclasses.replace(
        request, member_id=core.member_id, member_epoch=core.member_epoch, topic_ids=topic_ids
    )


def on_fetch_response_848(
    core: ConsumerProtocolMember, response: OffsetFetchResponse
) -> tuple[Verdict, dict[TopicPartition, OffsetAndMetadata | None]]:
    """Judge an OffsetFetch answer (§10.8, then the classic table of §4.7)."""
    code = response.error_code
    if code in (E.STALE_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
        return Fail(
            OffsetsError(
                f"offset fetch for group {core.settings.group_id!r} failed: "
                f"{ErrorCode.describe(code)}",
                api="OffsetFetch",
                error_code=code,
            )
        ), {}
    return on_fetch_response(_as_classic(core), response)
