"""Unit tests for ``kgroup._protocol``: exact bytes per version, decoding, version choice.

Every expected byte string is written out by hand from Kafka's JSON message schemas
(``clients/src/main/resources/common/message/*.json``), field by field:

* classic versions: STRING = int16 length + UTF-8 (-1 = null), BYTES = int32 length + data,
  ARRAY = int32 count + elements;
* flexible versions (KIP-482): COMPACT_STRING / COMPACT_BYTES / COMPACT_ARRAY = unsigned
  varint of length + 1 (0 = null), and every struct (array elements too) ends with a tagged
  field section, here always empty: one ``\\x00`` byte.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.protocol.group import JoinGroupResponse_v5 as AiokafkaJoinGroupResponse_v5

from kgroup._core._messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMemberResult,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kgroup._errors import LocalProtocolError, RemoteProtocolError, UnsupportedVersion
from kgroup._protocol import (
    API_NAMES,
    SUPPORTED_VERSIONS,
    GroupRequest,
    choose_version,
    from_wire,
    to_wire,
)

FIND = FindCoordinatorRequest(group_id="grp")
JOIN = JoinGroupRequest(
    group_id="grp",
    session_timeout_ms=10_000,
    rebalance_timeout_ms=300_000,
    member_id="m-1",
    group_instance_id="inst",
    protocol_type="consumer",
    protocols=(("range", b"\x00\x01"), ("roundrobin", b"")),
    reason="new member",
)
SYNC = SyncGroupRequest(
    group_id="grp",
    generation_id=7,
    member_id="m-1",
    group_instance_id=None,
    protocol_type="consumer",
    protocol_name="range",
    assignments=(("m-1", b"\x00\x01\x02"), ("m-2", b"")),
)
HEARTBEAT = HeartbeatRequest(
    group_id="grp", generation_id=7, member_id="m-1", group_instance_id="inst"
)
LEAVE = LeaveGroupRequest(group_id="grp", member_id="m-1", reason="closing")

DYNAMIC_JOIN = JoinGroupRequest(
    group_id="grp",
    session_timeout_ms=6000,
    rebalance_timeout_ms=6000,
    member_id="",
    group_instance_id=None,
    protocol_type="consumer",
    protocols=(("range", b"\x07"),),
)
DYNAMIC_HEARTBEAT = HeartbeatRequest(
    group_id="grp", generation_id=7, member_id="m-1", group_instance_id=None
)

#: One request per API that every supported version can carry (no instance id).
SAMPLES: dict[int, GroupRequest] = {
    10: FIND,
    11: DYNAMIC_JOIN,
    12: DYNAMIC_HEARTBEAT,
    13: LEAVE,
    14: SYNC,
}


def prepare(request: GroupRequest, version: int) -> Any:
    """The struct ``to_wire`` builds for a broker whose range is exactly ``version``."""
    wire = to_wire(request)
    struct = wire.prepare({wire.API_KEY: (version, version)})
    assert struct.API_VERSION == version
    return struct


def encode(request: GroupRequest, version: int) -> bytes:
    return bytes(prepare(request, version).encode())


def decode(api_key: int, version: int, raw: bytes) -> Any:
    """Decode ``raw`` with the response class of ``api_key`` ``version``, then ``from_wire``."""
    return from_wire(response_type(api_key, version).decode(raw))


def response_type(api_key: int, version: int) -> Any:
    """The response struct class that ``api_key`` ``version`` expects."""
    return prepare(SAMPLES[api_key], version).RESPONSE_TYPE


# --- Requests: exact bytes ------------------------------------------------------------------


def test_find_coordinator_v4_batches_one_key() -> None:
    expected = (
        b"\x00"  # key_type int8: 0 = group
        b"\x02"  # coordinator_keys: compact array, 1 element
        b"\x04grp"  # compact string "grp" (no tags: elements are strings, not structs)
        b"\x00"  # tagged fields
    )
    assert encode(FIND, 4) == expected
    assert encode(FIND, 6) == expected  # v5 and v6 keep the v4 layout


def test_find_coordinator_v3_and_v1() -> None:
    assert encode(FIND, 3) == b"\x04grp" + b"\x00" + b"\x00"  # key, key_type, tags
    assert encode(FIND, 1) == b"\x00\x03grp" + b"\x00"  # key (int16 length), key_type


def test_join_group_v9() -> None:
    expected = (
        b"\x04grp"  # group_id
        b"\x00\x00\x27\x10"  # session_timeout_ms 10000
        b"\x00\x04\x93\xe0"  # rebalance_timeout_ms 300000
        b"\x04m-1"  # member_id
        b"\x05inst"  # group_instance_id
        b"\x09consumer"  # protocol_type
        b"\x03"  # protocols: 2 elements
        b"\x06range"
        b"\x03\x00\x01"
        b"\x00"  # name, metadata (2 bytes), tags
        b"\x0broundrobin"
        b"\x01"
        b"\x00"  # name, metadata (empty), tags
        b"\x0bnew member"  # reason
        b"\x00"  # tagged fields
    )
    assert encode(JOIN, 9) == expected
    assert encode(JOIN, 8) == expected  # v9 changes only the response


def test_join_group_v6_and_v7_have_no_reason() -> None:
    expected = (
        b"\x04grp\x00\x00\x27\x10\x00\x04\x93\xe0\x04m-1\x05inst\x09consumer"
        b"\x03\x06range\x03\x00\x01\x00\x0broundrobin\x01\x00"
        b"\x00"  # tagged fields right after protocols
    )
    assert encode(JOIN, 6) == expected
    assert encode(JOIN, 7) == expected


def test_join_group_v5_classic() -> None:
    expected = (
        b"\x00\x03grp"
        b"\x00\x00\x27\x10"
        b"\x00\x04\x93\xe0"
        b"\x00\x03m-1"
        b"\x00\x04inst"  # group_instance_id (v5+)
        b"\x00\x08consumer"
        b"\x00\x00\x00\x02"  # protocols: int32 count
        b"\x00\x05range"
        b"\x00\x00\x00\x02\x00\x01"
        b"\x00\x0aroundrobin"
        b"\x00\x00\x00\x00"
    )
    assert encode(JOIN, 5) == expected


def test_join_group_v2_dynamic_member() -> None:
    dynamic = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=6000,
        rebalance_timeout_ms=6000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(("range", b"\x07"),),
    )
    assert encode(dynamic, 2) == (
        b"\x00\x01g"
        b"\x00\x00\x17\x70"  # 6000
        b"\x00\x00\x17\x70"
        b"\x00\x00"  # member_id ""
        b"\x00\x08consumer"
        b"\x00\x00\x00\x01\x00\x05range\x00\x00\x00\x01\x07"
    )
    # v5 sends the null instance id as int16 -1; v9 as compact null and a null reason.
    assert encode(dynamic, 5)[13:15] == b"\xff\xff"
    assert encode(dynamic, 9).endswith(b"\x06range\x02\x07\x00" + b"\x00" + b"\x00")


def test_join_group_reason_is_truncated_to_255_chars() -> None:
    long = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=6000,
        rebalance_timeout_ms=6000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(),
        reason="x" * 300,
    )
    # 255 characters: compact length 256 is the two-byte varint 0x80 0x02.
    assert encode(long, 8).endswith(b"\x01" + b"\x80\x02" + b"x" * 255 + b"\x00")


def test_sync_group_v5() -> None:
    expected = (
        b"\x04grp"  # group_id
        b"\x00\x00\x00\x07"  # generation_id
        b"\x04m-1"  # member_id
        b"\x00"  # group_instance_id: null
        b"\x09consumer"  # protocol_type
        b"\x06range"  # protocol_name
        b"\x03"  # assignments: 2 elements
        b"\x04m-1"
        b"\x04\x00\x01\x02"
        b"\x00"
        b"\x04m-2"
        b"\x01"
        b"\x00"
        b"\x00"  # tagged fields
    )
    assert encode(SYNC, 5) == expected


def test_sync_group_v4_drops_protocol_fields() -> None:
    assert encode(SYNC, 4) == (
        b"\x04grp\x00\x00\x00\x07\x04m-1\x00\x03\x04m-1\x04\x00\x01\x02\x00\x04m-2\x01\x00\x00"
    )


def test_sync_group_v3_and_v0_classic() -> None:
    static = SyncGroupRequest(
        group_id="grp",
        generation_id=7,
        member_id="m-1",
        group_instance_id="inst",
        protocol_type="consumer",
        protocol_name="range",
        assignments=(("m-1", b"\x00\x01\x02"),),
    )
    assert encode(static, 3) == (
        b"\x00\x03grp\x00\x00\x00\x07\x00\x03m-1"
        b"\x00\x04inst"
        b"\x00\x00\x00\x01\x00\x03m-1\x00\x00\x00\x03\x00\x01\x02"
    )
    follower = SyncGroupRequest(
        group_id="grp",
        generation_id=7,
        member_id="m-2",
        group_instance_id=None,
        protocol_type=None,
        protocol_name=None,
    )
    assert encode(follower, 0) == b"\x00\x03grp\x00\x00\x00\x07\x00\x03m-2\x00\x00\x00\x00"


def test_heartbeat_v4_v3_v0() -> None:
    assert encode(HEARTBEAT, 4) == b"\x04grp\x00\x00\x00\x07\x04m-1\x05inst\x00"
    assert encode(HEARTBEAT, 3) == b"\x00\x03grp\x00\x00\x00\x07\x00\x03m-1\x00\x04inst"
    dynamic = HeartbeatRequest(
        group_id="grp", generation_id=7, member_id="m-1", group_instance_id=None
    )
    assert encode(dynamic, 4) == b"\x04grp\x00\x00\x00\x07\x04m-1\x00\x00"
    assert encode(dynamic, 0) == b"\x00\x03grp\x00\x00\x00\x07\x00\x03m-1"


def test_leave_group_v5() -> None:
    expected = (
        b"\x04grp"  # group_id
        b"\x02"  # members: 1 element
        b"\x04m-1"  # member_id
        b"\x00"  # group_instance_id: null
        b"\x08closing"  # reason
        b"\x00"  # element tags
        b"\x00"  # tagged fields
    )
    assert encode(LEAVE, 5) == expected


def test_leave_group_v4_v3_v0() -> None:
    assert encode(LEAVE, 4) == b"\x04grp\x02\x04m-1\x00\x00\x00"  # no reason before v5
    assert encode(LEAVE, 3) == b"\x00\x03grp\x00\x00\x00\x01\x00\x03m-1\xff\xff"
    assert encode(LEAVE, 0) == b"\x00\x03grp\x00\x03m-1"


def test_leave_group_reason_is_truncated() -> None:
    long = LeaveGroupRequest(group_id="g", member_id="m", reason="é" * 256)
    # 255 characters of 2 UTF-8 bytes each: compact length 511 = varint 0xff 0x03.
    assert encode(long, 5) == b"\x02g\x02\x02m\x00" + b"\xff\x03" + "é".encode() * 255 + b"\x00\x00"


def test_flexible_versions_use_request_header_v2() -> None:
    struct = prepare(HEARTBEAT, 4)
    assert struct.FLEXIBLE_VERSION
    header = struct.build_request_header(correlation_id=5, client_id="c").encode()
    # api_key 12, api_version 4, correlation_id 5, client_id (int16 string), empty tags
    assert header == b"\x00\x0c\x00\x04\x00\x00\x00\x05\x00\x01c\x00"
    classic = prepare(HEARTBEAT, 3)
    assert not classic.FLEXIBLE_VERSION
    assert classic.build_request_header(correlation_id=5, client_id="c").encode() == (
        b"\x00\x0c\x00\x03\x00\x00\x00\x05\x00\x01c"
    )


@pytest.mark.parametrize(
    ("api_key", "flexible_from"), [(10, 3), (11, 6), (12, 4), (13, 4), (14, 4)]
)
def test_flexible_flag_per_version(api_key: int, flexible_from: int) -> None:
    low, high = SUPPORTED_VERSIONS[api_key]
    for version in range(low, high + 1):
        assert prepare(SAMPLES[api_key], version).FLEXIBLE_VERSION == (version >= flexible_from)


# --- Version choice -------------------------------------------------------------------------


def test_choose_version_picks_highest_common() -> None:
    assert choose_version(11, (0, 9)) == 9
    assert choose_version(11, (0, 12)) == 9  # a newer broker: kgroup's maximum
    assert choose_version(11, (0, 5)) == 5  # an older broker: its maximum
    assert choose_version(10, (0, 6)) == 6
    assert choose_version(14, (0, 3)) == 3
    assert choose_version(12, (0, 0)) == 0


def test_choose_version_without_overlap() -> None:
    with pytest.raises(UnsupportedVersion, match=r"FindCoordinator: .*v0-v0.*kgroup v1-v6"):
        choose_version(10, (0, 0))
    with pytest.raises(UnsupportedVersion, match=r"JoinGroup: .*v10-v12"):
        choose_version(11, (10, 12))
    with pytest.raises(LocalProtocolError):
        choose_version(18, (0, 4))  # ApiVersions: aiokafka's, not kgroup's


def test_prepare_picks_highest_common_version() -> None:
    versions = {10: (0, 6), 11: (0, 7), 12: (0, 3), 13: (1, 4), 14: (0, 12)}
    chosen = {key: to_wire(SAMPLES[key]).prepare(versions).API_VERSION for key in SAMPLES}
    assert chosen == {10: 6, 11: 7, 12: 3, 13: 4, 14: 5}


STATIC_REQUESTS = [
    (JOIN, 4, 5),
    (
        SyncGroupRequest(
            group_id="grp",
            generation_id=1,
            member_id="m-1",
            group_instance_id="inst",
            protocol_type="consumer",
            protocol_name="range",
        ),
        2,
        3,
    ),
    (HEARTBEAT, 2, 3),
    (LeaveGroupRequest(group_id="grp", member_id="m-1", group_instance_id="inst"), 2, 3),
]


@pytest.mark.parametrize(("request_", "broker_max", "needed"), STATIC_REQUESTS)
def test_instance_id_needs_a_version_that_carries_it(
    request_: GroupRequest, broker_max: int, needed: int
) -> None:
    wire = to_wire(request_)
    name = API_NAMES[wire.API_KEY]
    with pytest.raises(UnsupportedVersion) as info:
        wire.prepare({wire.API_KEY: (0, broker_max)})
    message = str(info.value)
    assert message.startswith(f"{name}: group_instance_id")
    assert f"v{needed} or later" in message
    assert f"v0-v{broker_max}" in message
    assert info.value.api == name
    assert info.value.group_id == "grp"
    # One version more and it goes through, at exactly that version.
    assert wire.prepare({wire.API_KEY: (0, needed)}).API_VERSION == needed


def test_dynamic_member_can_use_old_versions() -> None:
    dynamic = HeartbeatRequest(
        group_id="grp", generation_id=1, member_id="m", group_instance_id=None
    )
    assert to_wire(dynamic).prepare({12: (0, 2)}).API_VERSION == 2


@pytest.mark.parametrize("api_key", sorted(SAMPLES))
def test_no_common_version_is_unsupported_not_not_implemented(api_key: int) -> None:
    wire = to_wire(SAMPLES[api_key])
    with pytest.raises(
        UnsupportedVersion, match="no version in common: the broker supports v20-v30"
    ):
        wire.prepare({api_key: (20, 30)})
    with pytest.raises(UnsupportedVersion, match="the broker does not offer this API"):
        wire.prepare({18: (0, 3)})


def test_to_wire_rejects_other_values() -> None:
    with pytest.raises(TypeError):
        to_wire(object())  # type: ignore[arg-type]


def test_unencodable_value_is_local_protocol_error() -> None:
    too_long = JoinGroupRequest(**{**_fields(JOIN), "session_timeout_ms": 2**31})
    with pytest.raises(LocalProtocolError, match="JoinGroup v9 request cannot be encoded"):
        encode(too_long, 9)
    huge_id = HeartbeatRequest(
        group_id="g" * 40_000, generation_id=1, member_id="m", group_instance_id=None
    )
    with pytest.raises(LocalProtocolError, match="Heartbeat v3"):
        encode(huge_id, 3)  # int16 string length
    assert len(encode(huge_id, 4)) > 40_000  # compact strings have no such limit


def _fields(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__slots__}


# --- Responses: hand-built bytes to values --------------------------------------------------


def test_find_coordinator_v4_response() -> None:
    raw = (
        b"\x00\x00\x00\x00"  # throttle_time_ms
        b"\x02"  # coordinators: 1 element
        b"\x04grp"  # key
        b"\x00\x00\x00\x6f"  # node_id 111
        b"\x0a127.0.0.1"  # host
        b"\x00\x00\x23\x84"  # port 9092
        b"\x00\x00"  # error_code
        b"\x00"  # error_message: null
        b"\x00"  # element tags
        b"\x00"  # tagged fields
    )
    assert decode(10, 4, raw) == FindCoordinatorResponse(
        error_code=0, node_id=111, host="127.0.0.1", port=9092, error_message=None
    )


def test_find_coordinator_v6_error_entry() -> None:
    raw = (
        b"\x00\x00\x00\x0a"  # throttle_time_ms 10
        b"\x02\x04grp"  # one coordinator, key "grp"
        b"\xff\xff\xff\xff\x01\xff\xff\xff\xff"  # node_id -1, host "", port -1
        b"\x00\x0f\x08not yet"  # COORDINATOR_NOT_AVAILABLE (15), error_message
        b"\x00\x00"  # element tags, tagged fields
    )
    assert decode(10, 6, raw) == FindCoordinatorResponse(
        error_code=15, node_id=-1, host="", port=-1, error_message="not yet", throttle_time_ms=10
    )


def test_find_coordinator_v1_response() -> None:
    raw = (
        b"\x00\x00\x00\x05"  # throttle_time_ms
        b"\x00\x00"  # error_code
        b"\xff\xff"  # error_message: null
        b"\x00\x00\x00\x01"  # node_id
        b"\x00\x09localhost"  # host
        b"\x00\x00\x23\x84"  # port
    )
    assert decode(10, 1, raw) == FindCoordinatorResponse(
        error_code=0, node_id=1, host="localhost", port=9092, throttle_time_ms=5
    )


@pytest.mark.parametrize("count", [0, 2])
def test_find_coordinator_v4_needs_exactly_one_coordinator(count: int) -> None:
    entry = b"\x04grp\x00\x00\x00\x01\x02h\x00\x00\x00\x01\x00\x00\x00\x00"
    raw = b"\x00\x00\x00\x00" + bytes([count + 1]) + entry * count + b"\x00"
    with pytest.raises(RemoteProtocolError, match=f"FindCoordinator v4 .*exactly one.*got {count}"):
        decode(10, 4, raw)


def test_join_group_v9_leader_response() -> None:
    raw = (
        b"\x00\x00\x00\x00"  # throttle_time_ms
        b"\x00\x00"  # error_code
        b"\x00\x00\x00\x03"  # generation_id
        b"\x09consumer"  # protocol_type
        b"\x06range"  # protocol_name
        b"\x04m-1"  # leader
        b"\x01"  # skip_assignment: true
        b"\x04m-1"  # member_id
        b"\x03"  # members: 2 elements
        b"\x04m-1"
        b"\x05inst"
        b"\x03\x00\x01"
        b"\x00"
        b"\x04m-2"
        b"\x00"
        b"\x01"
        b"\x00"  # null instance id, empty metadata
        b"\x00"  # tagged fields
    )
    assert decode(11, 9, raw) == JoinGroupResponse(
        error_code=0,
        generation_id=3,
        protocol_type="consumer",
        protocol_name="range",
        leader="m-1",
        skip_assignment=True,
        member_id="m-1",
        members=(
            JoinGroupMember(member_id="m-1", group_instance_id="inst", metadata=b"\x00\x01"),
            JoinGroupMember(member_id="m-2", group_instance_id=None, metadata=b""),
        ),
    )


def test_join_group_v7_member_id_required_with_nulls() -> None:
    raw = (
        b"\x00\x00\x00\x00"
        b"\x00\x4f"  # MEMBER_ID_REQUIRED (79)
        b"\xff\xff\xff\xff"  # generation_id -1
        b"\x00"  # protocol_type: null
        b"\x00"  # protocol_name: null (nullable from v7)
        b"\x01"  # leader ""
        b"\x04m-9"  # member_id
        b"\x01"  # members: empty
        b"\x00"
    )
    assert decode(11, 7, raw) == JoinGroupResponse(
        error_code=79, generation_id=-1, protocol_type=None, protocol_name=None, member_id="m-9"
    )


def test_join_group_v5_and_v2_classic_responses() -> None:
    v5 = (
        b"\x00\x00\x00\x0a"  # throttle_time_ms 10
        b"\x00\x00\x00\x00\x00\x01"  # error_code, generation_id 1
        b"\x00\x05range"
        b"\x00\x03m-2"
        b"\x00\x03m-1"  # protocol_name, leader, member_id
        b"\x00\x00\x00\x00"  # members: none (a follower)
    )
    assert decode(11, 5, v5) == JoinGroupResponse(
        error_code=0,
        generation_id=1,
        protocol_type=None,  # not carried below v7
        protocol_name="range",
        leader="m-2",
        member_id="m-1",
        throttle_time_ms=10,
    )
    v2 = (
        b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x05range\x00\x01a\x00\x01a"
        b"\x00\x00\x00\x01\x00\x01a\x00\x00\x00\x01\x07"
    )
    assert decode(11, 2, v2).members == (
        JoinGroupMember(member_id="a", group_instance_id=None, metadata=b"\x07"),
    )


def test_sync_group_v5_response() -> None:
    raw = b"\x00\x00\x00\x00\x00\x00\x09consumer\x06range\x04abc\x00"
    assert decode(14, 5, raw) == SyncGroupResponse(
        error_code=0, protocol_type="consumer", protocol_name="range", assignment=b"abc"
    )


def test_sync_group_null_assignment_reads_as_empty() -> None:
    raw = b"\x00\x00\x00\x00\x00\x1b\x00\x00"  # REBALANCE_IN_PROGRESS, null bytes
    assert decode(14, 4, raw) == SyncGroupResponse(error_code=27, assignment=b"")
    assert decode(14, 0, b"\x00\x00\xff\xff\xff\xff") == SyncGroupResponse(error_code=0)


def test_sync_group_v0_v3_responses() -> None:
    assert decode(14, 0, b"\x00\x00\x00\x00\x00\x02\x01\x02") == SyncGroupResponse(
        error_code=0, assignment=b"\x01\x02"
    )
    assert decode(14, 3, b"\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00") == SyncGroupResponse(
        error_code=0, throttle_time_ms=7
    )


def test_heartbeat_responses() -> None:
    assert decode(12, 4, b"\x00\x00\x00\x64\x00\x1b\x00") == HeartbeatResponse(
        error_code=27, throttle_time_ms=100
    )
    assert decode(12, 0, b"\x00\x16") == HeartbeatResponse(error_code=22)


def test_leave_group_v5_response() -> None:
    raw = (
        b"\x00\x00\x00\x00"  # throttle_time_ms
        b"\x00\x00"  # error_code
        b"\x02"  # members: 1 element
        b"\x04m-1"
        b"\x05inst"
        b"\x00\x19"
        b"\x00"  # member_id, instance id, 25, tags
        b"\x00"
    )
    response = decode(13, 5, raw)
    assert response == LeaveGroupResponse(
        error_code=0,
        members=(LeaveGroupMemberResult(member_id="m-1", group_instance_id="inst", error_code=25),),
    )
    assert response.effective_error == 25


def test_leave_group_classic_responses() -> None:
    assert decode(13, 2, b"\x00\x00\x00\x03\x00\x10") == LeaveGroupResponse(
        error_code=16, members=(), throttle_time_ms=3
    )
    assert decode(13, 3, b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01m\xff\xff\x00\x00") == (
        LeaveGroupResponse(
            error_code=0,
            members=(LeaveGroupMemberResult(member_id="m", group_instance_id=None, error_code=0),),
        )
    )


def test_received_tagged_fields_are_ignored() -> None:
    # Heartbeat v4 with one unknown tagged field: tag 3, size 2, payload.
    assert decode(12, 4, b"\x00\x00\x00\x00\x00\x00\x01\x03\x02\xab\xcd") == HeartbeatResponse(
        error_code=0
    )


# --- Malformed responses --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "version", "raw"),
    [
        (12, 4, b"\x00\x00\x00\x00"),  # error_code missing
        (11, 9, b"\x00\x00\x00\x00\x00\x00\x00\x00"),  # cut inside generation_id
        (10, 4, b"\x00\x00\x00\x00"),  # varint past the end of the buffer
        (14, 5, b"\x00\x00\x00\x00\x00\x00\x09cons"),  # string shorter than its length
        (13, 0, b""),
    ],
)
def test_truncated_response_is_remote_protocol_error(
    api_key: int, version: int, raw: bytes
) -> None:
    name = API_NAMES[api_key]
    with pytest.raises(RemoteProtocolError, match=f"{name} v{version} response cannot be decoded"):
        response_type(api_key, version).decode(raw)


def test_trailing_bytes_are_remote_protocol_error() -> None:
    with pytest.raises(RemoteProtocolError, match="Heartbeat v4 response has 1 unexpected bytes"):
        response_type(12, 4).decode(b"\x00\x00\x00\x00\x00\x00\x00" + b"\x00")


@pytest.mark.parametrize(
    ("api_key", "version", "raw", "field"),
    [
        # JoinGroup v6: null member_id (not nullable)
        (11, 6, b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x06range\x01\x00\x01\x00", "member_id"),
        # JoinGroup v6: null members array
        (11, 6, b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x06range\x01\x01\x00\x00", "members"),
        # JoinGroup v5: null protocol_name (nullable only from v7)
        (
            11,
            5,
            b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00",
            "protocol_name",
        ),
        # JoinGroup v6: null member metadata
        (
            11,
            6,
            b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x01\x01\x01\x02\x02m\x00\x00\x00\x00",
            "metadata",
        ),
        # LeaveGroup v5: null members array
        (13, 5, b"\x00\x00\x00\x00\x00\x00\x00\x00", "members"),
        # FindCoordinator v3: null host
        (10, 3, b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00", "host"),
    ],
)
def test_null_in_non_nullable_field(api_key: int, version: int, raw: bytes, field: str) -> None:
    name = API_NAMES[api_key]
    with pytest.raises(RemoteProtocolError, match=f"{name} v{version} .*'{field}'"):
        decode(api_key, version, raw)


def test_hand_made_struct_with_wrong_types() -> None:
    heartbeat_v4 = response_type(12, 4)
    with pytest.raises(RemoteProtocolError, match="Heartbeat v4 response: field 'error_code'"):
        from_wire(heartbeat_v4(throttle_time_ms=0, error_code=None, tags={}))
    join_v9 = response_type(11, 9)
    bad_member = join_v9(
        throttle_time_ms=0,
        error_code=0,
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader="m",
        skip_assignment=False,
        member_id="m",
        members=[("m",)],
        tags={},
    )
    with pytest.raises(RemoteProtocolError, match=r"JoinGroup v9 response: members\[0\]"):
        from_wire(bad_member)
    with pytest.raises(RemoteProtocolError, match="skip_assignment"):
        from_wire(join_v9(**{**bad_member.__dict__, "members": [], "skip_assignment": 1}))


def test_unexpected_structs_are_remote_protocol_errors() -> None:
    with pytest.raises(RemoteProtocolError, match="not a kgroup group API"):
        from_wire(object())
    # aiokafka's own JoinGroup v5 struct names its fields differently ("group_protocol").
    theirs = AiokafkaJoinGroupResponse_v5(0, 0, 1, "range", "m", "m", [])
    with pytest.raises(RemoteProtocolError, match=r"JoinGroup v5 response: field '\w+' is missing"):
        from_wire(theirs)


@pytest.mark.parametrize(
    ("api_key", "version", "raw"),
    [
        # JoinGroup v5, GROUP_AUTHORIZATION_FAILED, null protocol_name/leader (mock cluster)
        (
            11,
            5,
            b"\x00\x00\x00\x00\x00\x1e\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00",
        ),
        # FindCoordinator v3, GROUP_AUTHORIZATION_FAILED, null host (mock cluster)
        (10, 3, b"\x00\x00\x00\x00\x00\x1e\x00\xff\xff\xff\xff\x00\xff\xff\xff\xff\x00"),
    ],
)
def test_error_answer_with_forbidden_nulls_keeps_its_error_code(
    api_key: int, version: int, raw: bytes
) -> None:
    """An error answer's other fields carry no meaning: nulls there must not turn a fatal
    GROUP_AUTHORIZATION_FAILED into a decode error that would be retried forever."""
    assert decode(api_key, version, raw).error_code == 30
