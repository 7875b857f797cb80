"""Subscription / Assignment codecs of the embedded consumer protocol (spec §7.1)."""

from __future__ import annotations

import time
from io import BytesIO
from typing import Any

import pytest
from aiokafka.protocol.types import Array as _Array
from aiokafka.protocol.types import Boolean as _Boolean
from aiokafka.protocol.types import Bytes as _Bytes
from aiokafka.protocol.types import CompactBytes as _CompactBytes
from aiokafka.protocol.types import Int8 as _Int8
from aiokafka.protocol.types import Int16 as _Int16
from aiokafka.protocol.types import Int32 as _Int32
from aiokafka.protocol.types import Int64 as _Int64
from aiokafka.protocol.types import Schema as _Schema
from aiokafka.protocol.types import String as _String
from aiokafka.protocol.types import TaggedFields as _TaggedFields
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgroup._core._consumer_protocol import (
    MAX_VERSION,
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    TopicPartition,
)
from kgroup._core._messages import (
    DescribeGroupsResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kgroup._errors import LocalProtocolError, RemoteProtocolError
from kgroup._protocol import API_NAMES, SUPPORTED_VERSIONS, from_wire
from kgroup._protocol._primitives import Uuid, parse_response_header
from kgroup._protocol._schemas import REQUEST_STRUCTS
from kgroup._protocol._versions import FLEXIBLE_FROM

TP = TopicPartition

# Hand-built pieces, written out from the §7.1 layout.
NULL_BYTES = b"\xff\xff\xff\xff"
NULL_STRING = b"\xff\xff"

# Subscription(topics=("b", "a"), user_data=b"ud", owned t1-1, t0-2, t0-0, generation 7, rack r1)
SUB = Subscription(
    topics=("b", "a"),
    user_data=b"ud",
    owned_partitions=(TP("t1", 1), TP("t0", 2), TP("t0", 0)),
    generation_id=7,
    rack_id="r1",
)
SUB_V0_BODY = (
    b"\x00\x00\x00\x02"  # topics: 2 entries, sorted
    + b"\x00\x01a"
    + b"\x00\x01b"
    + b"\x00\x00\x00\x02ud"  # user_data
)
OWNED_BODY = (
    b"\x00\x00\x00\x02"  # owned_partitions: 2 topics, sorted
    + b"\x00\x02t0"
    + b"\x00\x00\x00\x02"  # 2 partitions, sorted
    + b"\x00\x00\x00\x00"
    + b"\x00\x00\x00\x02"
    + b"\x00\x02t1"
    + b"\x00\x00\x00\x01"
    + b"\x00\x00\x00\x01"
)
SUB_V0 = b"\x00\x00" + SUB_V0_BODY
SUB_V1 = b"\x00\x01" + SUB_V0_BODY + OWNED_BODY
SUB_V2 = b"\x00\x02" + SUB_V0_BODY + OWNED_BODY + b"\x00\x00\x00\x07"
SUB_V3 = b"\x00\x03" + SUB_V0_BODY + OWNED_BODY + b"\x00\x00\x00\x07" + b"\x00\x02r1"

ASG = Assignment(partitions=(TP("t1", 0), TP("t0", 5), TP("t0", 1)), user_data=b"\x01")
ASG_BODY = (
    b"\x00\x00\x00\x02"
    + b"\x00\x02t0"
    + b"\x00\x00\x00\x02"
    + b"\x00\x00\x00\x01"
    + b"\x00\x00\x00\x05"
    + b"\x00\x02t1"
    + b"\x00\x00\x00\x01"
    + b"\x00\x00\x00\x00"
    + b"\x00\x00\x00\x01\x01"  # user_data
)
ASG_V0 = b"\x00\x00" + ASG_BODY
ASG_V3 = b"\x00\x03" + ASG_BODY

SORTED_OWNED = (TP("t0", 0), TP("t0", 2), TP("t1", 1))


# --- byte-exact encodings ------------------------------------------------------------------


def test_protocol_type_and_max_version() -> None:
    assert PROTOCOL_TYPE == "consumer"
    assert MAX_VERSION == 3


def test_topic_partition_is_a_named_tuple_with_readable_forms() -> None:
    tp = TP("orders", 3)
    assert tp == ("orders", 3)
    assert tp.topic == "orders" and tp.partition == 3
    assert repr(tp) == "TopicPartition(topic='orders', partition=3)"
    assert str(tp) == "orders-3"


def test_subscription_v0_bytes() -> None:
    assert SUB.encode(0) == SUB_V0


def test_subscription_v1_bytes() -> None:
    assert SUB.encode(1) == SUB_V1


def test_subscription_v2_bytes() -> None:
    assert SUB.encode(2) == SUB_V2


def test_subscription_v3_bytes_and_default_version() -> None:
    assert SUB.encode(3) == SUB_V3
    assert SUB.encode() == SUB_V3


def test_subscription_v3_null_user_data_and_null_rack() -> None:
    sub = Subscription(topics=("t",), user_data=None, owned_partitions=())
    assert sub.encode() == (
        b"\x00\x03"
        + b"\x00\x00\x00\x01\x00\x01t"
        + NULL_BYTES
        + b"\x00\x00\x00\x00"  # no owned partitions
        + b"\xff\xff\xff\xff"  # generation -1
        + NULL_STRING
    )


def test_assignment_v0_and_v3_bytes() -> None:
    assert ASG.encode(0) == ASG_V0
    assert ASG.encode(3) == ASG_V3
    assert ASG.encode() == ASG_V3


def test_empty_assignment_bytes() -> None:
    empty = Assignment(partitions=(), user_data=None)
    assert empty.encode() == b"\x00\x03" + b"\x00\x00\x00\x00" + NULL_BYTES


# --- decoding known versions ---------------------------------------------------------------


def test_decode_subscription_v0() -> None:
    assert Subscription.decode(SUB_V0) == Subscription(
        topics=("a", "b"), user_data=b"ud", owned_partitions=(), generation_id=-1, rack_id=None
    )


def test_decode_subscription_v1() -> None:
    assert Subscription.decode(SUB_V1) == Subscription(
        topics=("a", "b"), user_data=b"ud", owned_partitions=SORTED_OWNED, generation_id=-1
    )


def test_decode_subscription_v2() -> None:
    decoded = Subscription.decode(SUB_V2)
    assert decoded.generation_id == 7
    assert decoded.rack_id is None
    assert decoded.owned_partitions == SORTED_OWNED


def test_decode_subscription_v3() -> None:
    assert Subscription.decode(SUB_V3) == Subscription(
        topics=("a", "b"),
        user_data=b"ud",
        owned_partitions=SORTED_OWNED,
        generation_id=7,
        rack_id="r1",
    )


def test_decode_assignment_v0_and_v3() -> None:
    expected = Assignment(partitions=(TP("t0", 1), TP("t0", 5), TP("t1", 0)), user_data=b"\x01")
    assert Assignment.decode(ASG_V0) == expected
    assert Assignment.decode(ASG_V3) == expected


def test_empty_rack_id_decodes_as_none() -> None:
    data = SUB_V3[: -len(b"\x00\x02r1")] + b"\x00\x00"
    assert Subscription.decode(data).rack_id is None


def test_decode_accepts_bytearray_and_memoryview() -> None:
    assert Subscription.decode(bytearray(SUB_V3)) == Subscription.decode(SUB_V3)
    assert Assignment.decode(memoryview(ASG_V3)) == Assignment.decode(ASG_V3)


def test_decoded_user_data_is_bytes() -> None:
    decoded = Subscription.decode(bytearray(SUB_V3))
    assert type(decoded.user_data) is bytes


# --- versioning rules ----------------------------------------------------------------------


def test_higher_subscription_version_parses_as_v3_and_ignores_trailing_bytes() -> None:
    v5 = b"\x00\x05" + SUB_V3[2:] + b"\x00\x00\x00\x2a" + b"\xde\xad\xbe\xef"
    assert Subscription.decode(v5) == Subscription.decode(SUB_V3)


def test_highest_int16_version_still_parses() -> None:
    assert Assignment.decode(b"\x7f\xff" + ASG_BODY + b"junk") == Assignment.decode(ASG_V3)


def test_higher_assignment_version_ignores_trailing_bytes() -> None:
    v9 = b"\x00\x09" + ASG_BODY + b"\x00\x07future"
    assert Assignment.decode(v9) == Assignment.decode(ASG_V3)


def test_the_bytes_after_an_assignment_are_returned_apart() -> None:
    """Where a kgroup leader puts its follow-up mark (deviations.md row 12)."""
    assert Assignment.decode_with_tail(ASG_V3) == (Assignment.decode(ASG_V3), b"")
    v3 = ASG_V3 + b"\x00\x07future"
    assert Assignment.decode_with_tail(v3) == (Assignment.decode(ASG_V3), b"\x00\x07future")
    with pytest.raises(RemoteProtocolError, match="shorter than the 2-byte version header"):
        Assignment.decode_with_tail(b"\x00")


def test_trailing_bytes_after_a_known_version_are_ignored_like_java() -> None:
    assert Subscription.decode(SUB_V0 + b"\x00\x00\x00\x00") == Subscription.decode(SUB_V0)


@pytest.mark.parametrize("header", [b"\xff\xff", b"\x80\x00", b"\xff\xfe"])
def test_negative_version_is_rejected(header: bytes) -> None:
    with pytest.raises(RemoteProtocolError, match="negative version"):
        Subscription.decode(header + SUB_V3[2:])
    with pytest.raises(RemoteProtocolError, match="negative version"):
        Assignment.decode(header + ASG_BODY)


def test_encode_drops_fields_the_version_cannot_carry() -> None:
    decoded = Subscription.decode(SUB.encode(0))
    assert decoded.owned_partitions == ()
    assert decoded.generation_id == -1
    assert decoded.rack_id is None


@pytest.mark.parametrize("version", [-1, 4, 100, True])
def test_encode_rejects_unknown_versions(version: int) -> None:
    with pytest.raises(LocalProtocolError, match=r"supported versions are 0\.\.3"):
        SUB.encode(version)
    with pytest.raises(LocalProtocolError, match=r"supported versions are 0\.\.3"):
        ASG.encode(version)


# --- malformed peer bytes ------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"\x00"])
def test_assignment_shorter_than_version_header(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError, match="shorter than the 2-byte version header"):
        Assignment.decode(data)


@pytest.mark.parametrize("full", [SUB_V0, SUB_V1, SUB_V2, SUB_V3])
def test_every_truncated_subscription_is_rejected(full: bytes) -> None:
    for end in range(len(full)):
        with pytest.raises(RemoteProtocolError, match="malformed consumer protocol Subscription"):
            Subscription.decode(full[:end])


def test_every_truncated_assignment_is_rejected() -> None:
    for end in range(len(ASG_V3)):
        with pytest.raises(RemoteProtocolError):
            Assignment.decode(ASG_V3[:end])


def test_error_names_the_field_and_offset() -> None:
    with pytest.raises(RemoteProtocolError) as info:
        Subscription.decode(SUB_V3[:11])  # the second topic name is missing
    message = str(info.value)
    assert "topics[1]" in message
    assert "offset 11" in message


def test_huge_array_count_fails_before_allocating() -> None:
    data = b"\x00\x03" + b"\x7f\xff\xff\xff" + b"\x00\x01a"
    started = time.perf_counter()
    with pytest.raises(RemoteProtocolError, match="array count 2147483647"):
        Subscription.decode(data)
    assert time.perf_counter() - started < 0.1


def test_huge_partition_count_fails_before_allocating() -> None:
    data = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x7f\xff\xff\xff" + b"\x00" * 8
    with pytest.raises(RemoteProtocolError, match=r"assigned_partitions\[0\]\.partitions"):
        Assignment.decode(data)


def test_huge_bytes_length_is_rejected() -> None:
    data = b"\x00\x00" + b"\x00\x00\x00\x00" + b"\x7f\xff\xff\xff" + b"xx"
    with pytest.raises(RemoteProtocolError, match="user_data"):
        Subscription.decode(data)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x00\x00" + b"\xff\xff\xff\xff" + NULL_BYTES, "invalid array count -1"),
        (b"\x00\x00" + b"\x00\x00\x00\x01" + NULL_STRING + NULL_BYTES, "invalid string length -1"),
        (b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x02\xc3\x28" + NULL_BYTES, "invalid UTF-8"),
        (b"\x00\x00" + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xfe", "invalid bytes length -2"),
        (
            b"\x00\x03" + b"\x00\x00\x00\x00" + NULL_BYTES + b"\x00" * 8 + b"\xff\xfe",
            "invalid string length -2",
        ),
    ],
)
def test_invalid_fields_are_rejected(data: bytes, match: str) -> None:
    with pytest.raises(RemoteProtocolError, match=match):
        Subscription.decode(data)


def test_null_owned_partition_topic_is_rejected() -> None:
    data = b"\x00\x01" + b"\x00\x00\x00\x00" + NULL_BYTES + b"\x00\x00\x00\x01" + NULL_STRING
    data += b"\x00\x00\x00\x00"
    with pytest.raises(RemoteProtocolError, match=r"owned_partitions\[0\]\.topic"):
        Subscription.decode(data)


# --- encoding invalid local values ---------------------------------------------------------


def test_encode_rejects_values_that_do_not_fit() -> None:
    with pytest.raises(LocalProtocolError, match="int32"):
        Assignment(partitions=(TP("t", 2**31),)).encode()
    with pytest.raises(LocalProtocolError, match="at most 32767"):
        Subscription(topics=("x" * 32768,)).encode()
    with pytest.raises(LocalProtocolError, match="UTF-8"):
        Subscription(topics=("\ud800",)).encode()
    with pytest.raises(LocalProtocolError, match="generation_id"):
        Subscription(topics=(), generation_id=2**31).encode()
    with pytest.raises(LocalProtocolError, match="must be a str"):
        Assignment(partitions=(TP(1, 0),)).encode()  # type: ignore[arg-type]


def test_longest_string_is_accepted() -> None:
    sub = Subscription(topics=("x" * 32767,))
    assert Subscription.decode(sub.encode()).topics == ("x" * 32767,)


# --- properties ----------------------------------------------------------------------------

texts = st.text(st.characters(codec="utf-8"), max_size=12)
int32s = st.integers(-(2**31), 2**31 - 1)
optional_bytes = st.none() | st.binary(max_size=40)
topic_partitions = st.builds(TP, texts, int32s)

subscriptions = st.builds(
    Subscription,
    topics=st.lists(texts, max_size=6).map(tuple),
    user_data=optional_bytes,
    owned_partitions=st.lists(topic_partitions, max_size=8).map(tuple),
    generation_id=int32s,
    rack_id=st.none() | texts,
)
assignments = st.builds(
    Assignment,
    partitions=st.lists(topic_partitions, max_size=10).map(tuple),
    user_data=optional_bytes,
)


@given(subscriptions)
def test_subscription_round_trip(sub: Subscription) -> None:
    encoded = sub.encode()
    decoded = Subscription.decode(encoded)
    assert decoded == Subscription(
        topics=tuple(sorted(sub.topics)),
        user_data=sub.user_data,
        owned_partitions=tuple(sorted(sub.owned_partitions)),
        generation_id=sub.generation_id,
        rack_id=sub.rack_id or None,
    )
    assert decoded.encode() == encoded or sub.rack_id == ""


@given(subscriptions, st.integers(0, 3))
def test_subscription_round_trip_at_every_version(sub: Subscription, version: int) -> None:
    decoded = Subscription.decode(sub.encode(version))
    assert decoded.topics == tuple(sorted(sub.topics))
    assert decoded.user_data == sub.user_data
    expected_owned = tuple(sorted(sub.owned_partitions)) if version >= 1 else ()
    assert decoded.owned_partitions == expected_owned
    assert decoded.generation_id == (sub.generation_id if version >= 2 else -1)
    assert decoded.rack_id == ((sub.rack_id or None) if version >= 3 else None)


@given(assignments, st.integers(0, 3))
def test_assignment_round_trip(asg: Assignment, version: int) -> None:
    encoded = asg.encode(version)
    decoded = Assignment.decode(encoded)
    assert decoded == Assignment(partitions=tuple(sorted(asg.partitions)), user_data=asg.user_data)
    assert decoded.encode(version) == encoded


@given(subscriptions, st.integers(4, 2**15 - 1), st.binary(max_size=20))
def test_subscription_future_versions_parse_as_v3(
    sub: Subscription, version: int, trailer: bytes
) -> None:
    future = version.to_bytes(2, "big") + sub.encode(3)[2:] + trailer
    assert Subscription.decode(future) == Subscription.decode(sub.encode(3))


fuzz = settings(max_examples=500, deadline=200, suppress_health_check=[HealthCheck.too_slow])


def _decode_or_protocol_error(data: bytes) -> None:
    for cls in (Subscription, Assignment):
        try:
            cls.decode(data)
        except RemoteProtocolError:
            pass


@fuzz
@given(st.binary(max_size=300))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    _decode_or_protocol_error(data)


@fuzz
@given(st.binary(max_size=64).map(lambda body: b"\x00\x03" + body))
def test_fuzz_arbitrary_v3_bodies(data: bytes) -> None:
    _decode_or_protocol_error(data)


@fuzz
@given(subscriptions, st.data())
def test_fuzz_mutated_valid_encodings(sub: Subscription, data: st.DataObject) -> None:
    raw = bytearray(sub.encode(data.draw(st.integers(0, 3))))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(raw) - 1))
        raw[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    _decode_or_protocol_error(bytes(raw[:cut]))
    _decode_or_protocol_error(bytes(raw))


# --- more properties of the consumer protocol codecs ------------------------------------------

CLEAR_SUBSCRIPTION = "malformed consumer protocol Subscription: "
CLEAR_ASSIGNMENT = "malformed consumer protocol Assignment: "


@given(assignments, st.integers(0, 3))
def test_assignment_round_trip_is_byte_exact_at_every_version(
    asg: Assignment, version: int
) -> None:
    encoded = asg.encode(version)
    assert int.from_bytes(encoded[:2], "big") == version
    assert Assignment.decode(encoded).encode(version) == encoded


@given(subscriptions, st.integers(0, 3))
def test_subscription_round_trip_is_byte_exact_at_every_version(
    sub: Subscription, version: int
) -> None:
    encoded = sub.encode(version)
    assert int.from_bytes(encoded[:2], "big") == version
    if version < 3 or sub.rack_id != "":  # "" decodes as None (written back as null)
        assert Subscription.decode(encoded).encode(version) == encoded


@given(assignments, st.integers(4, 2**15 - 1), st.binary(max_size=20))
def test_assignment_future_versions_parse_as_v3(
    asg: Assignment, version: int, trailer: bytes
) -> None:
    future = version.to_bytes(2, "big") + asg.encode(3)[2:] + trailer
    assert Assignment.decode(future) == Assignment.decode(asg.encode(3))


@fuzz
@given(subscriptions, st.integers(0, 3))
def test_every_truncation_of_a_subscription_is_a_clear_error(
    sub: Subscription, version: int
) -> None:
    """A strict prefix can never decode (decoding needs every field), and the error is
    always kgroup's, naming the structure."""
    encoded = sub.encode(version)
    for end in range(len(encoded)):
        with pytest.raises(RemoteProtocolError) as info:
            Subscription.decode(encoded[:end])
        assert str(info.value).startswith(CLEAR_SUBSCRIPTION)


@fuzz
@given(assignments, st.integers(0, 3))
def test_every_truncation_of_an_assignment_is_a_clear_error(asg: Assignment, version: int) -> None:
    encoded = asg.encode(version)
    for end in range(len(encoded)):
        with pytest.raises(RemoteProtocolError) as info:
            Assignment.decode(encoded[:end])
        assert str(info.value).startswith(CLEAR_ASSIGNMENT)


def _mutate(raw: bytes, data: st.DataObject) -> bytes:
    """Overwrite, insert or delete a few bytes of ``raw``."""
    out = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["set", "insert", "delete"]))
        index = data.draw(st.integers(0, len(out)))
        if action == "insert":
            out[index:index] = data.draw(st.binary(min_size=1, max_size=4))
        elif out and index < len(out):
            if action == "set":
                out[index] = data.draw(st.integers(0, 255))
            else:
                del out[index]
    return bytes(out)


@fuzz
@given(assignments, st.integers(0, 3), st.data())
def test_fuzz_mutated_assignments(asg: Assignment, version: int, data: st.DataObject) -> None:
    raw = _mutate(asg.encode(version), data)
    try:
        decoded = Assignment.decode(raw)
    except RemoteProtocolError as exc:
        assert str(exc).startswith(CLEAR_ASSIGNMENT)
    else:
        assert isinstance(decoded, Assignment)
        assert all(isinstance(tp, TopicPartition) for tp in decoded.partitions)


@fuzz
@given(subscriptions, st.integers(0, 3), st.data())
def test_fuzz_mutated_subscriptions(sub: Subscription, version: int, data: st.DataObject) -> None:
    raw = _mutate(sub.encode(version), data)
    try:
        decoded = Subscription.decode(raw)
    except RemoteProtocolError as exc:
        assert str(exc).startswith(CLEAR_SUBSCRIPTION)
    else:
        assert isinstance(decoded, Subscription)
        assert all(isinstance(t, str) for t in decoded.topics)


@pytest.mark.parametrize("cls", [Subscription, Assignment])
@pytest.mark.parametrize(
    "body",
    [
        b"\x7f\xff\xff\xff",  # a count of 2**31-1 with nothing after it
        b"\x00\x00\x00\x01\x7f\xff" + b"t" * 8,  # a 32767-byte string, 8 bytes there
        b"\x00\x00\x00\x01\x00\x01t\x7f\xff\xff\xff",  # 2**31-1 partitions
        b"\x00\x00\x00\x00\x7f\xff\xff\xff",  # (Subscription) 2**31-1 bytes of user_data
    ],
)
def test_huge_lengths_fail_at_once(cls: type[Subscription | Assignment], body: bytes) -> None:
    started = time.perf_counter()
    for version in range(4):
        with pytest.raises(RemoteProtocolError, match="malformed consumer protocol"):
            cls.decode(version.to_bytes(2, "big") + body)
    assert time.perf_counter() - started < 0.1


# --- the group protocol's response decoders (kgroup._protocol) ---------------------------------
#
# Every response struct of every version kgroup speaks, fed (1) random values encoded by the
# schema (a round trip), (2) truncations of such encodings, (3) mutations of them and (4) raw
# random bytes. The only outcomes allowed: a valid response value, or RemoteProtocolError
# naming the API and version. Decoding goes through ``RESPONSE_TYPE.decode`` (the connection
# layer's entry point) and then ``from_wire``.

RESPONSE_TYPES = {
    (api_key, version): REQUEST_STRUCTS[api_key][version].RESPONSE_TYPE
    for api_key, (low, high) in SUPPORTED_VERSIONS.items()
    for version in range(low, high + 1)
}
RESPONSE_VALUES = {
    8: OffsetCommitResponse,
    9: OffsetFetchResponse,
    10: FindCoordinatorResponse,
    11: JoinGroupResponse,
    12: HeartbeatResponse,
    13: LeaveGroupResponse,
    14: SyncGroupResponse,
    15: DescribeGroupsResponse,
    16: ListGroupsResponse,
}
response_keys = st.sampled_from(sorted(RESPONSE_TYPES))


def _field_values(kind: object) -> st.SearchStrategy[object]:
    """Values of one field type of a response schema (strict types subclass aiokafka's)."""
    if isinstance(kind, _Schema):
        return st.tuples(*(_field_values(field) for field in kind.fields))
    if isinstance(kind, _Array):
        return st.none() | st.lists(_field_values(kind.array_of), max_size=3)
    if isinstance(kind, _String):
        return st.none() | st.text(max_size=8)
    assert isinstance(kind, type), kind
    if issubclass(kind, _Bytes | _CompactBytes):
        return st.none() | st.binary(max_size=12)
    if issubclass(kind, _TaggedFields):
        return st.just({})  # aiokafka can only encode an empty tagged-field section
    if issubclass(kind, _Boolean):
        return st.booleans()
    if issubclass(kind, Uuid):  # OffsetCommit and OffsetFetch v10 name topics by id
        return st.uuids()
    bits = {_Int8: 8, _Int16: 16, _Int32: 32, _Int64: 64}
    for base, width in bits.items():
        if issubclass(kind, base):
            return st.integers(-(2 ** (width - 1)), 2 ** (width - 1) - 1)
    raise AssertionError(f"no strategy for field type {kind!r}")


@st.composite
def encoded_responses(draw: st.DrawFn) -> tuple[tuple[int, int], tuple[object, ...], bytes]:
    """(api key and version, the field values, their encoding) of a random response."""
    key = draw(response_keys)
    schema = RESPONSE_TYPES[key].SCHEMA
    values = draw(_field_values(schema))
    assert isinstance(values, tuple)  # a schema's strategy draws a tuple of its fields
    encoded: bytes = schema.encode(values)
    return key, values, encoded


def _decode_response(key: tuple[int, int], raw: bytes) -> object:
    """``RESPONSE_TYPE.decode`` then ``from_wire``: a response value, or RemoteProtocolError
    naming the API and version (anything else fails the test)."""
    api_key, version = key
    label = f"{API_NAMES[api_key]} v{version} "
    try:
        value = from_wire(RESPONSE_TYPES[key].decode(raw))
    except RemoteProtocolError as exc:
        assert str(exc).startswith(label), str(exc)
        return exc
    assert isinstance(value, RESPONSE_VALUES[api_key])
    return value


@fuzz
@given(encoded_responses())
def test_response_round_trip_at_every_version(sample: tuple[Any, Any, bytes]) -> None:
    """Whatever the schema can encode decodes back to the same fields; from_wire then
    accepts it or names the field the schema forbids (a null where none is allowed)."""
    key, values, raw = sample
    struct = RESPONSE_TYPES[key].decode(raw)
    names = RESPONSE_TYPES[key].SCHEMA.names

    def normal(value: object) -> object:  # arrays decode as lists of tuples
        if isinstance(value, list | tuple):
            return [normal(v) for v in value]
        return value

    assert normal([getattr(struct, name) for name in names]) == normal(list(values))
    _decode_response(key, raw)


@fuzz
@given(encoded_responses())
def test_every_truncated_response_is_a_clear_error(sample: tuple[Any, Any, bytes]) -> None:
    key, _values, raw = sample
    api_key, version = key
    for end in range(len(raw)):
        with pytest.raises(RemoteProtocolError, match=f"^{API_NAMES[api_key]} v{version} "):
            RESPONSE_TYPES[key].decode(raw[:end])


@fuzz
@given(encoded_responses(), st.data())
def test_fuzz_mutated_responses(sample: tuple[Any, Any, bytes], data: st.DataObject) -> None:
    key, _values, raw = sample
    _decode_response(key, _mutate(raw, data))


@fuzz
@given(response_keys, st.binary(max_size=200))
def test_fuzz_arbitrary_response_bytes(key: tuple[int, int], raw: bytes) -> None:
    _decode_response(key, raw)


@pytest.mark.parametrize("key", sorted(RESPONSE_TYPES), ids=lambda k: f"{API_NAMES[k[0]]}-v{k[1]}")
def test_huge_response_lengths_fail_at_once(key: tuple[int, int]) -> None:
    """Every prefix of every length field set to its largest value: no allocation, no
    loop over billions of elements, only a quick clear error."""
    started = time.perf_counter()
    huge = (b"\x7f\xff", b"\x7f\xff\xff\xff", b"\xfe\xff\xff\xff\x0f")  # int16, int32, varint
    for filler in huge:
        for offset in range(12):
            raw = b"\x00" * offset + filler + b"\x00" * 4
            _decode_response(key, raw)
    assert time.perf_counter() - started < 0.5


@fuzz
@given(st.binary(max_size=40), st.booleans())
def test_fuzz_response_headers(raw: bytes, flexible: bool) -> None:
    try:
        correlation_id = parse_response_header(BytesIO(raw), flexible=flexible)
    except RemoteProtocolError as exc:
        assert str(exc).startswith("undecodable response header: ")
    else:
        assert correlation_id == int.from_bytes(raw[:4], "big", signed=True)


def _plain(kind: object) -> object:
    """A minimal valid value of one field type."""
    if isinstance(kind, _Schema):
        return tuple(_plain(field) for field in kind.fields)
    if isinstance(kind, _Array):
        return []
    if isinstance(kind, _String):
        return ""
    if isinstance(kind, type) and issubclass(kind, _TaggedFields):
        return {}
    if isinstance(kind, type) and issubclass(kind, _Bytes | _CompactBytes):
        return b""
    if isinstance(kind, type) and issubclass(kind, _Boolean):
        return False
    return 0


CLASSIC_LENGTH_FIELDS = [
    (key, name)
    for key, cls in sorted(RESPONSE_TYPES.items())
    if key[1] < FLEXIBLE_FROM[key[0]]
    for name, kind in zip(cls.SCHEMA.names, cls.SCHEMA.fields, strict=True)
    if isinstance(kind, _Array | _String) or (isinstance(kind, type) and issubclass(kind, _Bytes))
]


@pytest.mark.parametrize(
    ("key", "field"),
    CLASSIC_LENGTH_FIELDS,
    ids=[f"{API_NAMES[k[0]]}-v{k[1]}-{f}" for k, f in CLASSIC_LENGTH_FIELDS],
)
@pytest.mark.parametrize("length", [-2, -(2**15), -(2**31)], ids=["-2", "int16-min", "int32-min"])
def test_classic_negative_lengths_are_errors(key: tuple[int, int], field: str, length: int) -> None:
    """-1 is null; any other negative length is corruption, never "null" or "empty" (aiokafka
    reads every negative length as null: an array of -2 became an empty member list, a bytes
    length of -2 an empty assignment)."""
    schema = RESPONSE_TYPES[key].SCHEMA
    parts = []
    for name, kind in zip(schema.names, schema.fields, strict=True):
        if name != field:
            parts.append(kind.encode(_plain(kind)))
        elif isinstance(kind, _String):
            parts.append(_Int16.encode(max(length, -(2**15))))
        else:
            parts.append(_Int32.encode(length))
    api_key, version = key
    with pytest.raises(
        RemoteProtocolError,
        match=f"^{API_NAMES[api_key]} v{version} response cannot be decoded: {field}: invalid",
    ):
        RESPONSE_TYPES[key].decode(b"".join(parts))
