"""The direct encoders of Heartbeat and JoinGroup write exactly what the general path writes.

``kgroup._protocol._direct`` frames the two requests on the heartbeat and rebalance path
without aiokafka structs. Whatever it encodes must be byte for byte the general path's
(``to_wire(...).prepare(versions)``, then aiokafka's header and encoder), at the version the
general path would choose; whatever it declines (None) goes the general way, which raises
the error the case deserves.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgroup._core._messages import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
from kgroup._errors import LocalProtocolError, UnsupportedVersion
from kgroup._protocol._direct import DirectRequest, encode_direct, request_header
from kgroup._protocol._requests import to_wire
from kgroup._protocol._responses import from_wire
from kgroup._protocol._versions import SUPPORTED_VERSIONS

texts = st.text(max_size=40)
ids = st.one_of(st.none(), texts)
int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def broker_ranges(api_key: int) -> st.SearchStrategy[dict[int, tuple[int, int]]]:
    low, high = SUPPORTED_VERSIONS[api_key]
    return st.tuples(st.integers(0, low), st.integers(low, high + 3)).map(lambda r: {api_key: r})


def general(message: Any, versions: dict[int, tuple[int, int]]) -> tuple[type[Any], bytes]:
    struct = to_wire(message).prepare(versions)
    return type(struct), struct.encode()


heartbeats = st.builds(
    HeartbeatRequest, group_id=texts, generation_id=int32, member_id=texts, group_instance_id=ids
)
joins = st.builds(
    JoinGroupRequest,
    group_id=texts,
    session_timeout_ms=int32,
    rebalance_timeout_ms=int32,
    member_id=texts,
    group_instance_id=ids,
    protocol_type=texts,
    protocols=st.lists(st.tuples(texts, st.binary(max_size=300)), max_size=4).map(tuple),
    reason=st.one_of(st.none(), st.text(max_size=300)),
)


@settings(max_examples=400, deadline=None)
@given(message=heartbeats, versions=broker_ranges(12))
def test_heartbeat_bytes_equal_the_general_path(
    message: HeartbeatRequest, versions: dict[int, tuple[int, int]]
) -> None:
    check(message, versions)


@settings(max_examples=400, deadline=None)
@given(message=joins, versions=broker_ranges(11))
def test_join_group_bytes_equal_the_general_path(
    message: JoinGroupRequest, versions: dict[int, tuple[int, int]]
) -> None:
    check(message, versions)


def sample(api_key: int) -> Any:
    """A Heartbeat (12) or a JoinGroup (11) with every field set."""
    if api_key == 12:
        return HeartbeatRequest(
            group_id="g", generation_id=7, member_id="m", group_instance_id=None
        )
    return JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(("range", b"\x00\x03"), ("roundrobin", b"")),
        reason="r" * 400,
    )


def check(message: Any, versions: dict[int, tuple[int, int]]) -> None:
    direct = encode_direct(message, versions)
    try:
        expected = general(message, versions)
    except UnsupportedVersion:
        assert direct is None  # the general path raises the error that case deserves
        return
    assert direct is not None
    assert same_request(direct[0], expected[0])
    assert direct[1] == expected[1]


def same_request(direct: Any, struct_class: type[Any]) -> bool:
    names = ("API_KEY", "API_VERSION", "FLEXIBLE_VERSION", "RESPONSE_TYPE")
    return all(getattr(direct, n) == getattr(struct_class, n) for n in names)


@pytest.mark.parametrize("api_key", [11, 12])
def test_every_version_is_encoded_directly(api_key: int) -> None:
    low, high = SUPPORTED_VERSIONS[api_key]
    message = sample(api_key)
    for version in range(low, high + 1):
        versions = {api_key: (version, version)}
        direct = encode_direct(message, versions)
        assert direct is not None, version
        assert direct[0].API_VERSION == version
        struct_class, body = general(message, versions)
        assert same_request(direct[0], struct_class)
        assert direct[1] == body


def test_values_the_schema_rejects_are_left_to_the_general_path() -> None:
    too_long = HeartbeatRequest(
        group_id="g" * 40_000, generation_id=1, member_id="m", group_instance_id=None
    )
    classic = {12: (0, 3)}
    assert encode_direct(too_long, classic) is None
    with pytest.raises(LocalProtocolError):
        general(too_long, classic)
    out_of_range = HeartbeatRequest(
        group_id="g", generation_id=2**31, member_id="m", group_instance_id=None
    )
    assert encode_direct(out_of_range, {12: (0, 4)}) is None
    with pytest.raises(LocalProtocolError):
        general(out_of_range, {12: (0, 4)})
    static = HeartbeatRequest(group_id="g", generation_id=1, member_id="m", group_instance_id="i")
    assert encode_direct(static, {12: (0, 2)}) is None
    with pytest.raises(UnsupportedVersion):
        general(static, {12: (0, 2)})
    assert encode_direct(static, {}) is None
    sync = SyncGroupRequest(
        group_id="g",
        generation_id=1,
        member_id="m",
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=(),
    )
    assert encode_direct(sync, {14: (0, 5)}) is None


@pytest.mark.parametrize("client_id", ["kgroup-1", "", None, "ünïcode"])
@pytest.mark.parametrize(("api_key", "version"), [(12, 3), (12, 4), (11, 5), (11, 9)])
def test_the_header_is_aiokafkas(client_id: str | None, api_key: int, version: int) -> None:
    message = sample(api_key)
    versions = {api_key: (version, version)}
    struct = to_wire(message).prepare(versions)
    header = struct.build_request_header(correlation_id=12345, client_id=client_id).encode()
    assert request_header(type(struct), 12345, client_id) == header
    direct = encode_direct(message, versions)
    assert direct is not None
    assert request_header(direct[0], 12345, client_id) == header


# --- the Heartbeat's answer ---------------------------------------------------------------


def heartbeat_request(version: int) -> DirectRequest:
    message = HeartbeatRequest(group_id="g", generation_id=1, member_id="m", group_instance_id=None)
    direct = encode_direct(message, {12: (version, version)})
    assert direct is not None
    return direct[0]


@settings(max_examples=300, deadline=None)
@given(
    version=st.integers(0, 4),
    error_code=st.integers(-(2**15), 2**15 - 1),
    throttle=int32,
    correlation=int32,
)
def test_a_plain_heartbeat_answer_decodes_as_the_general_path_does(
    version: int, error_code: int, throttle: int, correlation: int
) -> None:
    request = heartbeat_request(version)
    response_class = request.RESPONSE_TYPE
    values: list[Any] = [error_code] if version == 0 else [throttle, error_code]
    if version >= 4:
        values.append({})
    body = response_class(*values).encode()
    header = correlation.to_bytes(4, "big", signed=True) + (b"\x00" if version >= 4 else b"")
    frame = header + body
    expected = from_wire(response_class.decode(BytesIO(body)))
    assert request.decode_answer(frame, len(header)) == expected


@pytest.mark.parametrize(
    ("version", "body"),
    [
        (4, b"\x00\x00\x00\x00\x00\x1b"),  # the tag buffer missing
        (4, b"\x00\x00\x00\x00\x00\x1b\x01\x00\x00"),  # a tagged field
        (3, b"\x00\x00\x00\x00\x00\x1b\x00"),  # a byte left over
        (0, b"\x00"),  # half an error code
    ],
)
def test_anything_else_is_left_to_the_general_decoder(version: int, body: bytes) -> None:
    request = heartbeat_request(version)
    assert request.decode_answer(b"\x00\x00\x00\x07" + body, 4) is None


def test_only_heartbeat_answers_are_decoded_directly() -> None:
    message = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=1,
        rebalance_timeout_ms=2,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(),
    )
    direct = encode_direct(message, {11: (9, 9)})
    assert direct is not None
    assert direct[0].decode_answer(b"\x00" * 64, 4) is None
