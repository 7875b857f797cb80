"""Unit tests for the KIP-848 wire layer: ConsumerGroupHeartbeat (68), ConsumerGroupDescribe
(69), Metadata v10-v13 with topic ids (3), OffsetCommit v9 and OffsetFetch v9.

Every expected byte string is written out by hand from Kafka's JSON message schemas, as in
``test_protocol_wire.py``. All these versions are flexible: COMPACT_STRING / COMPACT_ARRAY
are an unsigned varint of length + 1 (0 = null), every struct ends with a tagged-field
section (``\\x00`` when empty), a ``uuid`` is 16 bytes, and a nullable struct is an int8
marker (-1 null, 1 present) before its fields.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kgroup._core._messages import (
    CommitPartition,
    FetchedOffset,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kgroup._core._messages_848 import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicIdPartitions,
)
from kgroup._core._messages_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribedConsumerGroup,
    DescribedConsumerMember,
    DescribedTopicPartitions,
)
from kgroup._core._messages_metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
)
from kgroup._errors import LocalProtocolError, RemoteProtocolError, UnsupportedVersion
from kgroup._protocol import from_wire, to_wire
from kgroup._protocol._schemas import REQUEST_STRUCTS

T1 = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
T2 = uuid.UUID("f0e0d0c0-b0a0-9080-7060-504030201000")
T1_BYTES = bytes(range(1, 17))
T2_BYTES = bytes.fromhex("f0e0d0c0b0a090807060504030201000")

JOIN = ConsumerGroupHeartbeatRequest(
    group_id="grp",
    member_id="m-1",
    member_epoch=0,
    rebalance_timeout_ms=300_000,
    subscribed_topic_names=("t",),
    topic_partitions=(),
)
FULL = ConsumerGroupHeartbeatRequest(
    group_id="grp",
    member_id="m-1",
    member_epoch=5,
    instance_id="inst",
    rack_id=None,
    rebalance_timeout_ms=300_000,
    subscribed_topic_names=("t1", "t2"),
    subscribed_topic_regex="t.*",
    server_assignor="uniform",
    topic_partitions=(TopicIdPartitions(topic_id=T1, partitions=(0, 2)),),
)


def prepare(request: Any, version: int) -> Any:
    wire = to_wire(request)
    struct = wire.prepare({wire.API_KEY: (version, version)})
    assert struct.API_VERSION == version
    return struct


def encode(request: Any, version: int) -> bytes:
    return bytes(prepare(request, version).encode())


def response_type(api_key: int, version: int) -> Any:
    return REQUEST_STRUCTS[api_key][version].RESPONSE_TYPE


def decode(api_key: int, version: int, raw: bytes) -> Any:
    return from_wire(response_type(api_key, version).decode(raw))


# --- ConsumerGroupHeartbeat requests ----------------------------------------------------------


def test_heartbeat_v1_join_request_bytes() -> None:
    """The first heartbeat of a member (KIP-1082: its own member id, epoch 0)."""
    assert encode(JOIN, 1) == (
        b"\x04grp"  # group_id
        b"\x04m-1"  # member_id
        b"\x00\x00\x00\x00"  # member_epoch 0: join
        b"\x00"  # instance_id: null
        b"\x00"  # rack_id: null
        b"\x00\x04\x93\xe0"  # rebalance_timeout_ms 300000
        b"\x02\x02t"  # subscribed_topic_names: ["t"]
        b"\x00"  # subscribed_topic_regex (v1): null
        b"\x00"  # server_assignor: null
        b"\x01"  # topic_partitions: empty (not null)
        b"\x00"  # tagged fields
    )


def test_heartbeat_v1_request_with_every_field() -> None:
    assert (
        encode(FULL, 1)
        == (
            b"\x04grp"
            b"\x04m-1"
            b"\x00\x00\x00\x05"  # member_epoch 5
            b"\x05inst"  # instance_id
            b"\x00"  # rack_id: null
            b"\x00\x04\x93\xe0"
            b"\x03\x03t1\x03t2"  # subscribed_topic_names
            b"\x04t.*"  # subscribed_topic_regex
            b"\x08uniform"  # server_assignor
            b"\x02"  # topic_partitions: 1 element
            + T1_BYTES  # topic_id
            + b"\x03\x00\x00\x00\x00\x00\x00\x00\x02"  # partitions [0, 2]
            b"\x00"  # element tags
            b"\x00"  # tagged fields
        )
    )


def test_heartbeat_v0_has_no_regex_and_null_means_unchanged() -> None:
    """v0 is defined (and exact) though never negotiated; a plain heartbeat leaves every
    optional field null."""
    beat = ConsumerGroupHeartbeatRequest(group_id="grp", member_id="m-1", member_epoch=7)
    struct = to_wire(beat).build(REQUEST_STRUCTS[68][0])
    assert bytes(struct.encode()) == (
        b"\x04grp\x04m-1\x00\x00\x00\x07"
        b"\x00\x00"  # instance_id, rack_id: null
        b"\xff\xff\xff\xff"  # rebalance_timeout_ms -1: unchanged
        b"\x00"  # subscribed_topic_names: null
        b"\x00"  # server_assignor: null
        b"\x00"  # topic_partitions: null
        b"\x00"
    )
    assert struct.FLEXIBLE_VERSION


def test_heartbeat_request_round_trips_through_its_schema() -> None:
    from io import BytesIO

    struct = prepare(FULL, 1)
    decoded = struct.SCHEMA.decode(BytesIO(struct.encode()))
    assert dict(zip(struct.SCHEMA.names, decoded, strict=True)) == {
        "group_id": "grp",
        "member_id": "m-1",
        "member_epoch": 5,
        "instance_id": "inst",
        "rack_id": None,
        "rebalance_timeout_ms": 300_000,
        "subscribed_topic_names": ["t1", "t2"],
        "subscribed_topic_regex": "t.*",
        "server_assignor": "uniform",
        "topic_partitions": [(T1, [0, 2], {})],
        "tags": {},
    }


def test_heartbeat_negotiates_v1() -> None:
    wire = to_wire(JOIN)
    assert wire.prepare({68: (0, 1)}).API_VERSION == 1
    assert wire.prepare({68: (0, 5)}).API_VERSION == 1  # a newer broker: kgroup's newest


@pytest.mark.parametrize(
    ("versions", "problem"),
    [
        ({68: (0, 0)}, r"client-generated member id \(KIP-1082\) needs v1 or later.*v0-v0"),
        ({}, r"does not offer this API \(API key 68\); kgroup needs v1-v1"),
        ({68: (2, 3)}, r"no version in common"),
    ],
    ids=["v0-only", "absent", "too-new"],
)
def test_heartbeat_without_v1_says_use_classic(versions: dict[int, Any], problem: str) -> None:
    with pytest.raises(UnsupportedVersion, match=problem) as caught:
        to_wire(JOIN).prepare(versions)
    assert 'use group_protocol="classic"' in str(caught.value)
    assert caught.value.api == "ConsumerGroupHeartbeat"


def test_heartbeat_with_a_bad_topic_id_is_local_protocol_error() -> None:
    bad = ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id="m",
        member_epoch=1,
        topic_partitions=(TopicIdPartitions(topic_id="not-a-uuid", partitions=(0,)),),  # type: ignore[arg-type]
    )
    with pytest.raises(LocalProtocolError, match="ConsumerGroupHeartbeat v1 request"):
        prepare(bad, 1).encode()


# --- ConsumerGroupHeartbeat responses ---------------------------------------------------------

HEARTBEAT_HEAD = (
    b"\x00\x00\x00\x00"  # throttle_time_ms
    b"\x00\x00"  # error_code
    b"\x00"  # error_message: null
    b"\x04m-1"  # member_id
    b"\x00\x00\x00\x03"  # member_epoch 3
    b"\x00\x00\x13\x88"  # heartbeat_interval_ms 5000
)
ASSIGNMENT = (
    b"\x01"  # assignment: present
    b"\x03"  # topic_partitions: 2 elements
    + T1_BYTES
    + b"\x03\x00\x00\x00\x00\x00\x00\x00\x02"  # [0, 2]
    b"\x00"  # element tags
     + T2_BYTES + b"\x01"  # no partitions
    b"\x00"  # element tags
    b"\x00"  # assignment tags
)


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_response_with_assignment(version: int) -> None:
    assert decode(68, version, HEARTBEAT_HEAD + ASSIGNMENT + b"\x00") == (
        ConsumerGroupHeartbeatResponse(
            error_code=0,
            member_id="m-1",
            member_epoch=3,
            heartbeat_interval_ms=5000,
            assignment=(
                TopicIdPartitions(topic_id=T1, partitions=(0, 2)),
                TopicIdPartitions(topic_id=T2, partitions=()),
            ),
        )
    )


def test_heartbeat_response_null_assignment_means_no_change() -> None:
    answer = decode(68, 1, HEARTBEAT_HEAD + b"\xff" + b"\x00")
    assert answer.assignment is None
    assert answer.member_epoch == 3


def test_heartbeat_error_response() -> None:
    raw = (
        b"\x00\x00\x00\x0a"  # throttle 10
        b"\x00\x6e"  # FENCED_MEMBER_EPOCH (110)
        b"\x0efenced member"  # error_message
        b"\x00"  # member_id: null
        b"\xff\xff\xff\xff"  # member_epoch -1
        b"\x00\x00\x00\x00"
        b"\xff"  # assignment: null
        b"\x00"
    )
    assert decode(68, 1, raw) == ConsumerGroupHeartbeatResponse(
        error_code=110,
        error_message="fenced member",
        member_id=None,
        member_epoch=-1,
        heartbeat_interval_ms=0,
        assignment=None,
        throttle_time_ms=10,
    )


def test_heartbeat_response_with_unknown_tagged_fields_everywhere() -> None:
    """Tagged fields at the top level, in the assignment struct and in a topic element are
    read (size included) and ignored: what follows each still decodes."""
    raw = (
        HEARTBEAT_HEAD + b"\x01"  # assignment: present
        b"\x02"  # 1 element
         + T1_BYTES + b"\x02\x00\x00\x00\x04"  # partitions [4]
        b"\x01\x03\x02xy"  # element tags: 1 field, tag 3, 2 bytes
        b"\x02\x01\x01\x05\x07\x00"  # assignment tags: tag 1 (1 byte), tag 7 (empty)
        b"\x01\x00\x03abc"  # top-level tags: tag 0, 3 bytes
    )
    answer = decode(68, 1, raw)
    assert answer.assignment == (TopicIdPartitions(topic_id=T1, partitions=(4,)),)
    assert answer.heartbeat_interval_ms == 5000


def test_heartbeat_response_round_trips() -> None:
    """What the response struct encodes (nullable struct included) decodes to itself."""
    cls = response_type(68, 1)
    for raw in (HEARTBEAT_HEAD + ASSIGNMENT + b"\x00", HEARTBEAT_HEAD + b"\xff\x00"):
        assert bytes(cls.decode(raw).encode()) == raw


# --- ConsumerGroupDescribe ------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_describe_request_bytes(version: int) -> None:
    request = ConsumerGroupDescribeRequest(group_ids=("grp", "g2"))
    assert encode(request, version) == (
        b"\x03\x04grp\x03g2"  # group_ids
        b"\x00"  # include_authorized_operations: false
        b"\x00"
    )


def _described_member(member_type: bytes) -> bytes:
    return (
        b"\x04m-1"  # member_id
        b"\x00"  # instance_id: null
        b"\x03r1"  # rack_id
        b"\x00\x00\x00\x03"  # member_epoch 3
        b"\x02c"  # client_id
        b"\x0b/127.0.0.1"  # client_host
        b"\x02\x02t"  # subscribed_topic_names ["t"]
        b"\x00"  # subscribed_topic_regex: null
        b"\x02" + T1_BYTES + b"\x02t"  # assignment.topic_partitions: 1 element  # topic_name
        b"\x03\x00\x00\x00\x00\x00\x00\x00\x01"  # partitions [0, 1]
        b"\x00"  # element tags
        b"\x00"  # assignment tags
        b"\x01"  # target_assignment.topic_partitions: empty
        b"\x00"  # target_assignment tags
         + member_type + b"\x00"  # member tags
    )


def _described_group(member: bytes) -> bytes:
    return (
        b"\x00\x00\x00\x00"  # throttle_time_ms
        b"\x02"  # groups: 1
        b"\x00\x00"  # error_code
        b"\x00"  # error_message: null
        b"\x04grp"
        b"\x07Stable"  # group_state
        b"\x00\x00\x00\x03"  # group_epoch
        b"\x00\x00\x00\x02"  # assignment_epoch
        b"\x08uniform"  # assignor_name
        b"\x02" + member + b"\x80\x00\x00\x00"  # authorized_operations: INT32_MIN
        b"\x00"  # group tags
        b"\x00"
    )


def _expected_group(member_type: int) -> ConsumerGroupDescribeResponse:
    return ConsumerGroupDescribeResponse(
        groups=(
            DescribedConsumerGroup(
                error_code=0,
                group_id="grp",
                state="Stable",
                group_epoch=3,
                assignment_epoch=2,
                assignor_name="uniform",
                members=(
                    DescribedConsumerMember(
                        member_id="m-1",
                        instance_id=None,
                        rack_id="r1",
                        member_epoch=3,
                        client_id="c",
                        client_host="/127.0.0.1",
                        subscribed_topic_names=("t",),
                        subscribed_topic_regex=None,
                        assignment=(
                            DescribedTopicPartitions(
                                topic_id=T1, topic_name="t", partitions=(0, 1)
                            ),
                        ),
                        target_assignment=(),
                        member_type=member_type,
                    ),
                ),
            ),
        )
    )


def test_describe_v1_response() -> None:
    raw = _described_group(_described_member(b"\x01"))  # member_type 1: consumer
    assert decode(69, 1, raw) == _expected_group(1)
    assert bytes(response_type(69, 1).decode(raw).encode()) == raw


def test_describe_v0_response_has_no_member_type() -> None:
    assert decode(69, 0, _described_group(_described_member(b""))) == _expected_group(-1)


def test_describe_unknown_group() -> None:
    raw = (
        b"\x00\x00\x00\x00\x02"
        b"\x00\x45"  # GROUP_ID_NOT_FOUND (69)
        b"\x0aNot found"
        b"\x02g"
        b"\x01"  # group_state ""
        b"\xff\xff\xff\xff\xff\xff\xff\xff"  # epochs -1
        b"\x01"  # assignor_name ""
        b"\x01"  # members: empty
        b"\x80\x00\x00\x00\x00\x00"
    )
    answer = decode(69, 1, raw)
    assert answer.error_code == 69
    assert answer.groups[0].error_message == "Not found"
    assert answer.groups[0].members == ()


# --- Metadata with topic ids ----------------------------------------------------------------


def test_metadata_v12_by_name_and_by_id() -> None:
    request = MetadataRequest(topics=("t",), topic_ids=(T1,))
    assert (
        encode(request, 12)
        == (
            b"\x03"  # topics: 2
            + bytes(16)  # topic_id: zero (asked by name)
            + b"\x02t"  # name
            b"\x00"  # element tags
             + T1_BYTES + b"\x00"  # name: null (asked by id)
            b"\x00"
            b"\x00"  # allow_auto_topic_creation
            b"\x00"  # include_topic_authorized_operations
            b"\x00"
        )
    )
    assert encode(request, 13) == encode(request, 12)


def test_metadata_v10_by_name_and_every_topic() -> None:
    assert (
        encode(MetadataRequest(topics=("t",)), 10)
        == (
            b"\x02" + bytes(16) + b"\x02t\x00"
            b"\x00"  # allow_auto_topic_creation
            b"\x00"  # include_cluster_authorized_operations (v10 only)
            b"\x00"  # include_topic_authorized_operations
            b"\x00"
        )
    )
    assert encode(MetadataRequest(), 11) == b"\x00" + b"\x00\x00\x00"  # topics: null = all
    assert encode(MetadataRequest(topics=()), 13) == b"\x01" + b"\x00\x00\x00"  # none


def test_metadata_by_id_needs_v12() -> None:
    wire = to_wire(MetadataRequest(topic_ids=(T1,)))
    assert wire.prepare({3: (0, 13)}).API_VERSION == 13
    with pytest.raises(UnsupportedVersion, match=r"looking topics up by id needs v12"):
        wire.prepare({3: (0, 11)})
    assert to_wire(MetadataRequest(topics=("t",))).prepare({3: (0, 11)}).API_VERSION == 11
    with pytest.raises(UnsupportedVersion, match=r"Metadata: no version in common"):
        to_wire(MetadataRequest(topics=("t",))).prepare({3: (0, 9)})


def _metadata_response(version: int) -> bytes:
    partition = (
        b"\x00\x00"  # error_code
        b"\x00\x00\x00\x00"  # partition_index 0
        b"\x00\x00\x00\x01"  # leader_id 1
        b"\x00\x00\x00\x00"  # leader_epoch 0
        b"\x02\x00\x00\x00\x01"  # replica_nodes [1]
        b"\x02\x00\x00\x00\x01"  # isr_nodes [1]
        b"\x01"  # offline_replicas []
        b"\x00"
    )
    return (
        b"\x00\x00\x00\x00"  # throttle_time_ms
        b"\x02"  # brokers: 1
        b"\x00\x00\x00\x01\x02h\x00\x00\x23\x84\x00\x00"  # node 1, "h", 9092, rack null
        b"\x03c1"  # cluster_id
        b"\x00\x00\x00\x01"  # controller_id
        b"\x03"  # topics: 2
        b"\x00\x00\x02t" + T1_BYTES + b"\x00"  # is_internal
        b"\x02" + partition + b"\x80\x00\x00\x00\x00"  # authorized ops, tags
        b"\x00\x64"  # UNKNOWN_TOPIC_ID (100)
        + (b"\x00" if version >= 12 else b"\x01")  # name: null (v12+) or ""
        + T2_BYTES
        + b"\x00\x01\x80\x00\x00\x00\x00"
        + (b"\x80\x00\x00\x00" if version == 10 else b"")  # cluster_authorized_operations
        + (b"\x00\x00" if version >= 13 else b"")  # error_code
        + b"\x00"
    )


@pytest.mark.parametrize("version", [10, 11, 12, 13])
def test_metadata_response(version: int) -> None:
    assert decode(3, version, _metadata_response(version)) == MetadataResponse(
        brokers=(MetadataBroker(node_id=1, host="h", port=9092, rack=None),),
        cluster_id="c1",
        controller_id=1,
        topics=(
            MetadataTopic(
                error_code=0,
                name="t",
                topic_id=T1,
                partitions=(
                    MetadataPartition(
                        partition=0, leader_id=1, leader_epoch=0, replicas=(1,), isr=(1,)
                    ),
                ),
            ),
            MetadataTopic(error_code=100, name=None if version >= 12 else "", topic_id=T2),
        ),
    )


# --- OffsetCommit v9 and OffsetFetch v9 -----------------------------------------------------

COMMIT = OffsetCommitRequest(
    group_id="grp",
    generation_id=5,
    member_id="m-1",
    group_instance_id=None,
    partitions=(CommitPartition(topic="t", partition=0, offset=42),),
)
COMMIT_BODY = (
    b"\x04grp"
    b"\x00\x00\x00\x05"  # generation_id_or_member_epoch
    b"\x04m-1"
    b"\x00"  # group_instance_id: null
    b"\x02\x02t"  # topics: 1, name "t"
    b"\x02\x00\x00\x00\x00"  # partitions: 1, partition_index 0
    b"\x00\x00\x00\x00\x00\x00\x00\x2a"  # committed_offset 42
    b"\xff\xff\xff\xff"  # committed_leader_epoch -1
    b"\x01"  # committed_metadata ""
    b"\x00\x00\x00"  # partition, topic, request tags
)


def test_classic_commit_stays_at_v8_on_a_v9_broker() -> None:
    struct = to_wire(COMMIT).prepare({8: (2, 10)})
    assert struct.API_VERSION == 8
    assert bytes(struct.encode()) == COMMIT_BODY


def test_epoch_commit_is_v9_with_v8_layout() -> None:
    epoch_commit = OffsetCommitRequest(
        group_id="grp",
        generation_id=5,
        member_id="m-1",
        group_instance_id=None,
        partitions=COMMIT.partitions,
        max_version=9,
    )
    struct = to_wire(epoch_commit).prepare({8: (2, 10)})
    assert struct.API_VERSION == 9  # never v10 (topic ids)
    assert bytes(struct.encode()) == COMMIT_BODY
    with pytest.raises(UnsupportedVersion, match=r"member epoch \(consumer protocol\) needs v9"):
        to_wire(epoch_commit).prepare({8: (2, 8)})


def test_offset_fetch_v9_as_member() -> None:
    fetch = OffsetFetchRequest(
        group_id="grp", partitions=(("t", 0),), member_id="m-1", member_epoch=5
    )
    assert encode(fetch, 9) == (
        b"\x02\x04grp"  # groups: 1, group_id
        b"\x04m-1"  # member_id
        b"\x00\x00\x00\x05"  # member_epoch
        b"\x02\x02t\x02\x00\x00\x00\x00\x00"  # topics: "t" [0]
        b"\x00"  # group tags
        b"\x01"  # require_stable
        b"\x00"
    )
    with pytest.raises(UnsupportedVersion, match=r"member id and epoch\) needs v9"):
        to_wire(fetch).prepare({9: (1, 8)})


def test_offset_fetch_v9_classic_defaults() -> None:
    """No member id (null) and epoch -1: what the broker reads a v8 request as."""
    fetch = OffsetFetchRequest(group_id="grp", partitions=None, require_stable=False)
    assert to_wire(fetch).prepare({9: (1, 10)}).API_VERSION == 9
    assert encode(fetch, 9) == b"\x02\x04grp\x00\xff\xff\xff\xff\x00\x00\x00\x00"
    assert to_wire(fetch).prepare({9: (1, 8)}).API_VERSION == 8  # a classic fetch needs no v9


def test_offset_fetch_v9_response() -> None:
    raw = (
        b"\x00\x00\x00\x00"
        b"\x02\x04grp"  # groups: 1
        b"\x02\x02t"  # topics: "t"
        b"\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x2a\xff\xff\xff\xff\x01\x00\x00\x00"
        b"\x00"  # topic tags
        b"\x00\x00\x00\x00"  # group error_code, group tags, tags
    )
    assert decode(9, 9, raw) == OffsetFetchResponse(
        partitions=(FetchedOffset(topic="t", partition=0, offset=42, metadata=""),)
    )


# --- Malformed responses --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "version", "raw", "where"),
    [
        # nullable struct marker neither -1 nor 1
        (68, 1, HEARTBEAT_HEAD + b"\x02\x01\x00\x00", r"cannot be decoded: assignment: invalid"),
        (
            68,
            1,
            HEARTBEAT_HEAD + b"\x00\x01\x00\x00",
            r"assignment: invalid nullable struct marker 0",
        ),
        # a topic id cut short
        (
            68,
            1,
            HEARTBEAT_HEAD + b"\x01\x02\x01\x02\x03",
            r"assignment\.topic_partitions\[0\]\.topic_id: truncated: a uuid needs 16",
        ),
        # a tagged field larger than what is left
        (68, 1, HEARTBEAT_HEAD + b"\xff\x01\x00\x09ab", r"cannot be decoded: tags: truncated"),
        # tagged fields out of order inside the assignment
        (
            68,
            0,
            HEARTBEAT_HEAD + b"\x01\x01\x02\x05\x00\x01\x00\x00",
            r"assignment\.tags: tagged field 1 out of order",
        ),
        # the buffer ends inside the assignment
        (68, 1, HEARTBEAT_HEAD + b"\x01", r"assignment\.topic_partitions: truncated"),
        # Describe: a member's target assignment cut short
        (
            69,
            1,
            _described_group(_described_member(b"\x01"))[:-20],
            r"groups\[0\]\.members\[0\]\.",
        ),
        # Metadata: a replica array announcing more than is left
        (3, 12, _metadata_response(12)[:60] + b"\x7f", r"topics\[0\]\.partitions\[0\]"),
    ],
)
def test_undecodable_responses_name_api_version_and_field(
    api_key: int, version: int, raw: bytes, where: str
) -> None:
    name = {3: "Metadata", 68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe"}[api_key]
    with pytest.raises(RemoteProtocolError, match=rf"^{name} v{version} response .*{where}"):
        decode(api_key, version, raw)


@pytest.mark.parametrize(
    ("api_key", "version", "raw", "where"),
    [
        # assignment.topic_partitions null (not nullable)
        (
            68,
            1,
            HEARTBEAT_HEAD + b"\x01\x00\x00\x00",
            r"assignment response: field 'topic_partitions'",
        ),
        # a topic's partitions null
        (
            68,
            1,
            HEARTBEAT_HEAD + b"\x01\x02" + T1_BYTES + b"\x00\x00\x00\x00",
            r"topic_partitions\[0\] response: field 'partitions' should be an array of integers",
        ),
        # Describe: null group_id
        (
            69,
            0,
            _described_group(_described_member(b"")).replace(b"\x04grp", b"\x00"),
            r"groups\[0\] response: field 'group_id'",
        ),
        # Describe: a null subscribed topic name
        (
            69,
            1,
            _described_group(_described_member(b"\x01")).replace(b"\x02\x02t\x00", b"\x02\x00\x00"),
            r"members\[0\] response: field 'subscribed_topic_names' should be an array of str",
        ),
        # Metadata v11: a null topic name (nullable only from v12)
        (3, 11, _metadata_response(11).replace(b"\x00\x64\x01", b"\x00\x64\x00"), r"'name'"),
        # Metadata: a null host
        (
            3,
            13,
            _metadata_response(13).replace(b"\x02h", b"\x00"),
            r"brokers\[0\] response: field 'host'",
        ),
    ],
)
def test_forbidden_nulls_name_api_version_and_field(
    api_key: int, version: int, raw: bytes, where: str
) -> None:
    name = {3: "Metadata", 68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe"}[api_key]
    with pytest.raises(RemoteProtocolError, match=rf"^{name} v{version} .*{where}"):
        decode(api_key, version, raw)


@pytest.mark.parametrize(
    ("api_key", "version", "raw"),
    [
        (68, 1, HEARTBEAT_HEAD + b"\xff\x00"),
        (69, 1, _described_group(_described_member(b"\x01"))),
        (3, 13, _metadata_response(13)),
    ],
)
def test_trailing_bytes_and_truncation(api_key: int, version: int, raw: bytes) -> None:
    name = {3: "Metadata", 68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe"}[api_key]
    with pytest.raises(RemoteProtocolError, match=rf"{name} v{version} response has 1 unexpected"):
        decode(api_key, version, raw + b"\x01")
    with pytest.raises(RemoteProtocolError, match=rf"{name} v{version} response has 2 unexpected"):
        decode(api_key, version, raw + b"\x00\x00")
    for end in range(len(raw)):
        with pytest.raises(RemoteProtocolError, match=rf"^{name} v{version} response"):
            decode(api_key, version, raw[:end])


@pytest.mark.parametrize(("api_key", "version"), [(68, 1), (69, 1)])
def test_one_zero_byte_after_other_apis_is_refused(api_key: int, version: int) -> None:
    raw = {68: HEARTBEAT_HEAD + b"\xff\x00", 69: _described_group(_described_member(b"\x01"))}
    with pytest.raises(RemoteProtocolError, match="response has 1 unexpected"):
        decode(api_key, version, raw[api_key] + b"\x00")


@pytest.mark.parametrize("version", [10, 11, 12, 13])
def test_metadata_with_the_mock_clusters_extra_empty_tag_section(version: int) -> None:
    """librdkafka 2.16's mock cluster ends flexible Metadata answers with one more zero
    byte (an empty tagged-field section); that exact byte is accepted, and the answer reads
    as without it."""
    raw = _metadata_response(version)
    assert decode(3, version, raw + b"\x00") == decode(3, version, raw)


def test_error_answer_with_forbidden_nulls_keeps_its_error_code() -> None:
    """As for the classic APIs: a broker filling an error answer with nulls the schema
    forbids still reports its error code."""
    raw = HEARTBEAT_HEAD.replace(b"\x00\x00\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x10", 1)
    raw += b"\x01\x00\x00\x00"  # assignment with a null topic_partitions
    answer = decode(68, 1, raw)
    assert answer.error_code == 16
    assert answer.assignment == ()
