"""Subscription / Assignment codecs of the embedded consumer protocol (spec §7.1)."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgroup._core._consumer_protocol import (
    MAX_VERSION,
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    TopicPartition,
)
from kgroup._errors import LocalProtocolError, RemoteProtocolError

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
