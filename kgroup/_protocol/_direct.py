"""Direct encoders for the two requests on the heartbeat and rebalance path, and a direct
decoder for the Heartbeat's answer.

A Heartbeat leaves every heartbeat interval and a JoinGroup starts every rebalance, both
while a member waits on them. The general path (``to_wire`` → ``WireRequest.prepare`` →
an aiokafka struct → aiokafka's header and encoder) builds several objects and calls an
encoder per field; here their frames are written directly, byte for byte what the general
path writes (``tests/unit/test_protocol_direct.py`` compares the two for every version and
random values).

Only the plain case is written here: text fields that are ``str`` (or None), integers in
range, bytes that are ``bytes``. Anything else, and any version question (no version in
common, static membership on a broker too old for it), returns None, and the caller takes
the general path, which raises the error that case deserves. Likewise a Heartbeat answer
that is not exactly the plain layout (bytes left over, tagged fields) is decoded the
general way, which names what is wrong with it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final

from kgroup._core._messages import HeartbeatRequest, HeartbeatResponse, JoinGroupRequest
from kgroup._errors import UnsupportedVersion
from kgroup._protocol._requests import (
    MAX_REASON_LENGTH,
    STATIC_MEMBERSHIP_VERSIONS,
    choose_version,
)
from kgroup._protocol._schemas import REQUEST_STRUCTS
from kgroup._protocol._versions import FLEXIBLE_FROM, SUPPORTED_VERSIONS

__all__ = ["DirectRequest", "encode_direct", "request_header"]

_HEARTBEAT: Final = 12
_JOIN_GROUP: Final = 11
_MAX_CLASSIC_TEXT: Final = 0x7FFF
_NO_TAGS: Final = b"\x00"

_i16 = struct.Struct(">h").pack
_i32 = struct.Struct(">i").pack
_header_fixed = struct.Struct(">hhi").pack
_error_only = struct.Struct(">h").unpack_from
_throttle_error = struct.Struct(">ih").unpack_from


class DirectRequest:
    """A request written by the direct path, as the connection's reader sees it: the
    ``API_KEY``, ``API_VERSION``, ``FLEXIBLE_VERSION`` and ``RESPONSE_TYPE`` of its struct
    class (what aiokafka's pending entry holds), and :meth:`decode_answer`."""

    __slots__ = ("API_KEY", "API_VERSION", "FLEXIBLE_VERSION", "RESPONSE_TYPE", "_plain")

    def __init__(self, struct_class: type[Any]) -> None:
        self.API_KEY: int = struct_class.API_KEY
        self.API_VERSION: int = struct_class.API_VERSION
        self.FLEXIBLE_VERSION: bool = struct_class.FLEXIBLE_VERSION
        self.RESPONSE_TYPE: type[Any] = struct_class.RESPONSE_TYPE
        #: The size of a plain Heartbeat answer's body at this version (0: not a Heartbeat).
        self._plain = (
            0
            if self.API_KEY != _HEARTBEAT
            else 2
            if self.API_VERSION == 0
            else 7
            if self.FLEXIBLE_VERSION
            else 6
        )

    def decode_answer(self, frame: bytes, start: int) -> HeartbeatResponse | None:
        """The answer's value when ``frame[start:]`` (its body) is a plain Heartbeat answer:
        the version's fields and, on a flexible version, an empty tag buffer. None for
        anything else: the general decoder takes it."""
        size = self._plain
        if size == 0 or len(frame) - start != size:
            return None
        if size == 2:
            return HeartbeatResponse(error_code=_error_only(frame, start)[0])
        if size == 7 and frame[-1] != 0:
            return None
        throttle, error = _throttle_error(frame, start)
        return HeartbeatResponse(error_code=error, throttle_time_ms=throttle)


_DIRECT: Final = {
    (api_key, version): DirectRequest(REQUEST_STRUCTS[api_key][version])
    for api_key in (_HEARTBEAT, _JOIN_GROUP)
    for version in range(SUPPORTED_VERSIONS[api_key][0], SUPPORTED_VERSIONS[api_key][1] + 1)
}


class _Unusual(Exception):
    """A value the direct path leaves to the general one."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _text(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return _NO_TAGS if flexible else b"\xff\xff"
    if type(value) is not str:
        raise _Unusual
    data = value.encode()
    if flexible:
        return _varint(len(data) + 1) + data
    if len(data) > _MAX_CLASSIC_TEXT:
        raise _Unusual
    return _i16(len(data)) + data


def _blob(value: bytes | None, flexible: bool) -> bytes:
    if value is None:
        return _NO_TAGS if flexible else b"\xff\xff\xff\xff"
    if type(value) is not bytes:
        raise _Unusual
    return (_varint(len(value) + 1) if flexible else _i32(len(value))) + value


def _heartbeat(request: HeartbeatRequest, version: int) -> bytes:
    flexible = version >= FLEXIBLE_FROM[_HEARTBEAT]
    parts = [
        _text(request.group_id, flexible),
        _i32(request.generation_id),
        _text(request.member_id, flexible),
    ]
    if version >= 3:
        parts.append(_text(request.group_instance_id, flexible))
    if flexible:
        parts.append(_NO_TAGS)
    return b"".join(parts)


def _join_group(request: JoinGroupRequest, version: int) -> bytes:
    flexible = version >= FLEXIBLE_FROM[_JOIN_GROUP]
    parts = [_text(request.group_id, flexible), _i32(request.session_timeout_ms)]
    if version >= 1:
        parts.append(_i32(request.rebalance_timeout_ms))
    parts.append(_text(request.member_id, flexible))
    if version >= 5:
        parts.append(_text(request.group_instance_id, flexible))
    parts.append(_text(request.protocol_type, flexible))
    protocols = request.protocols
    parts.append(_varint(len(protocols) + 1) if flexible else _i32(len(protocols)))
    for name, metadata in protocols:
        parts.append(_text(name, flexible))
        parts.append(_blob(metadata, flexible))
        if flexible:
            parts.append(_NO_TAGS)
    if version >= 8:
        reason = request.reason
        parts.append(_text(None if reason is None else reason[:MAX_REASON_LENGTH], flexible))
    if flexible:
        parts.append(_NO_TAGS)
    return b"".join(parts)


def _version(api_key: int, versions: Mapping[int, tuple[int, int]], instance: Any) -> int | None:
    """The version the general path would choose, or None where it would raise."""
    broker = versions.get(api_key)
    if broker is None:
        return None
    try:
        version = choose_version(api_key, broker)
    except UnsupportedVersion:
        return None
    if instance is not None and version < STATIC_MEMBERSHIP_VERSIONS[api_key]:
        return None
    return version


def encode_direct(
    message: object, versions: Mapping[int, tuple[int, int]]
) -> tuple[DirectRequest, bytes] | None:
    """``(request, body)`` for a Heartbeat or JoinGroup in the plain case, at the version
    the general path would choose; None for anything else."""
    try:
        if isinstance(message, HeartbeatRequest):
            version = _version(_HEARTBEAT, versions, message.group_instance_id)
            if version is None:
                return None
            return _DIRECT[_HEARTBEAT, version], _heartbeat(message, version)
        if isinstance(message, JoinGroupRequest):
            version = _version(_JOIN_GROUP, versions, message.group_instance_id)
            if version is None:
                return None
            return _DIRECT[_JOIN_GROUP, version], _join_group(message, version)
    except (_Unusual, struct.error, TypeError, AttributeError, UnicodeError):
        return None
    return None


def request_header(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """The request header aiokafka writes for ``request`` (a struct class or a
    :class:`DirectRequest`): v1, or v2 with an empty tag buffer for a flexible version."""
    if client_id is None:
        client = b"\xff\xff"
    else:
        data = client_id.encode()
        client = _i16(len(data)) + data
    head = _header_fixed(request.API_KEY, request.API_VERSION, correlation_id)
    return head + client + (_NO_TAGS if request.FLEXIBLE_VERSION else b"")
