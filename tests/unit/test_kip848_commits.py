"""Offset commits of a consumer-protocol member whose epoch moves on while a commit is in
flight (spec §10.8): a commit is retried (after STALE_MEMBER_EPOCH, under the new epoch,
or after a lost connection) only while the member still owns every partition of it.

Kafka takes a commit under the member's current epoch without looking at what the member
owns (``ConsumerGroup.validateOffsetCommit``: only an older epoch is checked against the
partitions' assignment epochs), so a retry of a partition revoked meanwhile, by a
``poll()`` in another task than the committing one, would store its offsets under the new
epoch while another member may own it already."""

from __future__ import annotations

from kgroup._core._consumer_protocol import TopicPartition
from kgroup._core._kip848_offsets import commit_request_848, on_commit_response_848
from kgroup._core._messages import OffsetCommitRequest, OffsetCommitResponse
from kgroup._core._offsets import Retry
from kgroup._errors import CommitFailed
from kgroup._errors import ErrorCode as E
from tests.unit.test_scenarios_kip848 import T1, Harness, assignment, tp

P0, P1 = TopicPartition("t1", 0), TopicPartition("t1", 1)


def stale(*partitions: TopicPartition) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        results=tuple((p.topic, p.partition, E.STALE_MEMBER_EPOCH) for p in partitions)
    )


def owning_both() -> Harness:
    """A member at epoch 5 that owns t1-0 and t1-1, its next heartbeat due."""
    h = Harness(settings={"max_poll_interval_ms": 20_000})
    h.answer(h.joined(assigned=((T1, (0, 1)),)), epoch=5)
    h.at(5_000)
    h.m.polled(h.now)
    return h


def commit(h: Harness, offsets: dict[TopicPartition, int]) -> OffsetCommitRequest:
    request = commit_request_848(h.m, offsets)
    assert isinstance(request, OffsetCommitRequest)
    return request


def test_a_stale_commit_is_retried_under_the_new_epoch_while_its_partitions_are_owned() -> None:
    h = owning_both()
    assert commit(h, {P0: 10}).generation_id == 5
    sent = h.m.generation
    # The epoch moves on (a partition added), the member keeps t1-0.
    h.answer(h.send(), epoch=6, assigned=assignment((T1, (0, 1, 2))))
    h.poll()
    assert h.m.member_epoch == 6
    assert isinstance(on_commit_response_848(h.m, sent, stale(P0)), Retry)
    assert commit(h, {P0: 10}).generation_id == 6


def test_a_commit_is_not_retried_once_a_partition_of_it_was_revoked() -> None:
    """A retry, after STALE_MEMBER_EPOCH or after a lost connection or a coordinator error
    (simulation consumer seed 148, before the check: that retry went out under the new
    epoch 7 s after the revoke, and the broker took it while another member held the
    partition), is built again under the member's epoch now: once the member gave up a
    partition of the commit, it is refused. A first attempt is sent as asked."""
    h = owning_both()
    offsets: dict[TopicPartition, int] = {P0: 10, P1: 20}
    commit(h, offsets)
    sent = h.m.generation
    # The target drops t1-1: revoked by a poll() while the commit is in flight, then
    # acknowledged, and the broker moves the member to epoch 6.
    h.answer(h.send(), epoch=5, assigned=assignment((T1, (0,))))
    h.poll()
    assert ("revoked", tp("t1", 1)) in h.calls
    h.answer(h.send(), epoch=6, assigned=assignment((T1, (0,))))
    assert h.m.member_epoch == 6
    assert isinstance(on_commit_response_848(h.m, sent, stale(P0, P1)), Retry)
    try:
        commit_request_848(h.m, offsets, retry=True)  # the retry's attempt
    except CommitFailed as exc:
        assert "t1-1" in str(exc) and "no longer owns" in str(exc)
    else:
        raise AssertionError("a retry of a partition given up went out")
    assert commit(h, offsets).generation_id == 6  # a first attempt: as asked
    kept = commit_request_848(h.m, {P0: 10}, retry=True)
    assert isinstance(kept, OffsetCommitRequest) and kept.generation_id == 6
