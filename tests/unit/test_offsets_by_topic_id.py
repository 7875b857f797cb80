"""OffsetCommit and OffsetFetch by topic id (v10, Kafka 4.2+) for a consumer-protocol member.

A commit by name (v9) of a partition whose topic was deleted and created again under the
same name is stored by Kafka for the **new** topic's partition, which another member may
own. By id, the broker answers UNKNOWN_TOPIC_ID for the old topic instead. The member names
each partition by the topic id it holds, or last held, it under; the wire layer sends v10
only when every partition has an id and the broker has v10, and names the answer (keyed by
id) again from the request. The byte layouts follow Kafka's ``OffsetCommitRequest.json``
and ``OffsetFetchRequest.json`` (``Name`` versions 0-9, ``TopicId`` 10+)."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

from kgroup._core._consumer_protocol import TopicPartition
from kgroup._core._kip848_offsets import (
    commit_request_848,
    fetch_request_848,
    on_commit_response_848,
    on_fetch_response_848,
)
from kgroup._core._messages import (
    CommitPartition,
    FetchedOffset,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kgroup._core._offsets import Done, Fail
from kgroup._errors import CommitFailed, OffsetsError, RemoteProtocolError
from kgroup._errors import ErrorCode as E
from kgroup._protocol import from_wire, to_wire, topic_names
from kgroup._protocol._schemas import REQUEST_STRUCTS
from tests.unit.test_scenarios_kip848 import T1, Harness, assignment

#: ``t1`` created again under its name: a new topic id.
T1_AGAIN = uuid.UUID("00000000-0000-0000-0000-0000000000a2")
KAFKA_44 = {8: (2, 10), 9: (1, 10)}
KAFKA_41 = {8: (2, 9), 9: (1, 9)}


def _commit(**fields: Any) -> OffsetCommitRequest:
    values: dict[str, Any] = {
        "group_id": "g",
        "generation_id": 7,
        "member_id": "m",
        "group_instance_id": None,
        "partitions": (CommitPartition(topic="t1", partition=0, offset=42),),
        "max_version": 10,
        "topic_ids": (("t1", 0, T1),),
    }
    values.update(fields)
    return OffsetCommitRequest(**values)


def _compact(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


# -- the wire ---------------------------------------------------------------------------


def test_a_commit_with_every_topic_id_goes_as_v10_byte_for_byte() -> None:
    built = to_wire(_commit()).prepare(KAFKA_44)
    assert built.API_VERSION == 10
    expected = (
        _compact("g")
        + struct.pack(">i", 7)
        + _compact("m")
        + _compact(None)  # group_instance_id
        + b"\x02"  # one topic
        + T1.bytes
        + b"\x02"  # one partition
        + struct.pack(">iqi", 0, 42, -1)
        + _compact("")  # committed_metadata
        + b"\x00"  # the partition's tagged fields
        + b"\x00"  # the topic's
        + b"\x00"  # the request's
    )
    assert built.encode() == expected


def test_a_commit_goes_by_name_when_the_broker_lacks_v10_or_an_id_is_missing() -> None:
    assert to_wire(_commit()).prepare(KAFKA_41).API_VERSION == 9
    two = (
        CommitPartition(topic="t1", partition=0, offset=1),
        CommitPartition(topic="t2", partition=0, offset=2),
    )
    partial = to_wire(_commit(partitions=two)).prepare(KAFKA_44)  # t2 has no id
    assert partial.API_VERSION == 9
    assert [topic[0] for topic in partial.topics] == ["t1", "t2"]
    # A classic member's commit stays at v8 whatever it carries.
    assert to_wire(_commit(max_version=8)).prepare(KAFKA_44).API_VERSION == 8


def test_two_ids_of_one_name_are_two_topics_of_the_request() -> None:
    """A member that held t1-0 before t1 was deleted and created again, and holds t1-1 of
    the new topic, commits both by their own ids."""
    parts = (
        CommitPartition(topic="t1", partition=0, offset=1),
        CommitPartition(topic="t1", partition=1, offset=2),
    )
    ids = (("t1", 0, T1), ("t1", 1, T1_AGAIN))
    built = to_wire(_commit(partitions=parts, topic_ids=ids)).prepare(KAFKA_44)
    assert built.API_VERSION == 10
    assert [(topic[0], [p[0] for p in topic[1]]) for topic in built.topics] == [
        (T1, [0]),
        (T1_AGAIN, [1]),
    ]


def test_a_fetch_goes_by_id_only_with_every_partition_named() -> None:
    request = OffsetFetchRequest(
        group_id="g",
        partitions=(("t1", 0), ("t1", 1)),
        member_id="m",
        member_epoch=7,
        topic_ids=(("t1", 0, T1), ("t1", 1, T1)),
    )
    built = to_wire(request).prepare(KAFKA_44)
    assert built.API_VERSION == 10
    assert [(t[0], t[1]) for t in built.groups[0][3]] == [(T1, [0, 1])]
    missing = OffsetFetchRequest(group_id="g", partitions=(("t1", 0), ("t1", 1)))
    assert to_wire(missing).prepare(KAFKA_44).API_VERSION == 9
    # Every committed offset (null topics) is answered by id at v10: kgroup asks by name.
    every = OffsetFetchRequest(group_id="g", partitions=None, require_stable=False)
    assert to_wire(every).prepare(KAFKA_44).API_VERSION == 9


def _commit_answer(*topics: tuple[uuid.UUID, int, int]) -> Any:
    response = REQUEST_STRUCTS[8][10].RESPONSE_TYPE
    raw = response(0, [(tid, [(p, code, {})], {}) for tid, p, code in topics], {}).encode()
    return response.decode(raw)


def test_a_v10_answer_is_named_from_the_request() -> None:
    request = _commit(
        partitions=(
            CommitPartition(topic="t1", partition=0, offset=1),
            CommitPartition(topic="t1", partition=1, offset=2),
        ),
        topic_ids=(("t1", 0, T1), ("t1", 1, T1_AGAIN)),
    )
    answer = _commit_answer((T1, 0, E.UNKNOWN_TOPIC_ID), (T1_AGAIN, 1, 0))
    value = from_wire(answer, topic_names(request))
    assert value == OffsetCommitResponse(results=(("t1", 0, 100), ("t1", 1, 0)))


def test_a_v10_answer_naming_a_topic_id_not_asked_for_is_a_protocol_error() -> None:
    stranger = uuid.UUID(int=99)
    with pytest.raises(RemoteProtocolError, match=f"OffsetCommit v10 .*{stranger}"):
        from_wire(_commit_answer((stranger, 0, 0)), topic_names(_commit()))


def test_a_v10_fetch_answer_is_named_from_the_request() -> None:
    request = OffsetFetchRequest(group_id="g", partitions=(("t1", 0),), topic_ids=(("t1", 0, T1),))
    response = REQUEST_STRUCTS[9][10].RESPONSE_TYPE
    topics: list[Any] = [(T1, [(0, 17, 3, "meta", 0, {})], {})]
    raw = response(0, [("g", topics, 0, {})], {}).encode()
    value = from_wire(response.decode(raw), topic_names(request))
    assert value == OffsetFetchResponse(
        partitions=(
            FetchedOffset(
                topic="t1", partition=0, offset=17, leader_epoch=3, metadata="meta", error_code=0
            ),
        )
    )


# -- the member -------------------------------------------------------------------------


def owning(epoch: int = 5) -> Harness:
    """A member that owns t1-0 and t1-1 (topic id T1)."""
    h = Harness(settings={"max_poll_interval_ms": 20_000})
    h.answer(h.joined(assigned=((T1, (0, 1)),)), epoch=epoch)
    h.poll()
    return h


P0, P1 = TopicPartition("t1", 0), TopicPartition("t1", 1)


def test_a_member_commits_and_fetches_what_it_holds_by_topic_id() -> None:
    h = owning()
    request = commit_request_848(h.m, {P0: 10, P1: 11})
    assert isinstance(request, OffsetCommitRequest)
    assert request.topic_ids == (("t1", 0, T1), ("t1", 1, T1))
    assert to_wire(request).prepare(KAFKA_44).API_VERSION == 10
    fetch = fetch_request_848(h.m, [P0])
    assert fetch.topic_ids == (("t1", 0, T1),) and fetch.member_epoch == 5


def test_a_partition_never_held_sends_the_whole_commit_by_name() -> None:
    """As Java does when its metadata lacks a topic id: v9, by name."""
    h = owning()
    request = commit_request_848(h.m, {P0: 10, TopicPartition("t2", 0): 1})
    assert isinstance(request, OffsetCommitRequest) and request.topic_ids == ()
    assert to_wire(request).prepare(KAFKA_44).API_VERSION == 9


def test_a_topic_created_again_is_committed_by_the_id_each_partition_was_held_under() -> None:
    """t1 is deleted and created again (id T1_AGAIN). The broker takes t1-0 away and gives
    t1-1 of the new topic. A commit of both that the application built before the revoke
    names t1-0 by the old id: the broker answers UNKNOWN_TOPIC_ID for it instead of storing
    the offset for the new topic's t1-0, which another member may own now, and the commit
    fails without a retry."""
    h = owning()
    h.metadata[T1_AGAIN] = "t1"
    h.at(5_000)
    h.answer(h.send(), epoch=6, assigned=assignment((T1_AGAIN, (1,))))
    h.poll()
    assert h.m.held() == {P1}
    request = commit_request_848(h.m, {P0: 10, P1: 11})
    assert isinstance(request, OffsetCommitRequest)
    assert request.topic_ids == (("t1", 0, T1), ("t1", 1, T1_AGAIN))
    sent = h.m.generation
    answer = OffsetCommitResponse(results=(("t1", 0, E.UNKNOWN_TOPIC_ID), ("t1", 1, 0)))
    verdict = on_commit_response_848(h.m, sent, answer)
    assert isinstance(verdict, Fail) and isinstance(verdict.error, CommitFailed)
    assert "UNKNOWN_TOPIC_ID for t1-0:" in str(verdict.error)
    assert "not stored" in str(verdict.error)


def test_unknown_topic_id_is_not_retried_even_while_the_partition_is_held() -> None:
    """Before the member hears of the deletion it still holds t1-0; the commit fails at
    once all the same (Java retries until its timeout; deviation 25): in a revoke callback
    a retry would only hold the revoke up."""
    h = owning()
    sent = h.m.generation
    answer = OffsetCommitResponse(results=(("t1", 0, E.UNKNOWN_TOPIC_ID),))
    verdict = on_commit_response_848(h.m, sent, answer)
    assert isinstance(verdict, Fail) and isinstance(verdict.error, CommitFailed)
    assert h.m.held() == {P0, P1}


def test_a_fetch_answered_unknown_topic_id_fails_naming_the_partition() -> None:
    h = owning()
    answer = OffsetFetchResponse(
        partitions=(FetchedOffset(topic="t1", partition=0, offset=-1, error_code=100),)
    )
    verdict, offsets = on_fetch_response_848(h.m, answer)
    assert isinstance(verdict, Fail) and offsets == {}
    assert isinstance(verdict.error, OffsetsError)
    assert "UNKNOWN_TOPIC_ID" in str(verdict.error) and "t1-0" in str(verdict.error)
    ok = OffsetFetchResponse(partitions=(FetchedOffset(topic="t1", partition=0, offset=5),))
    verdict, offsets = on_fetch_response_848(h.m, ok)
    assert isinstance(verdict, Done) and offsets[P0] is not None
