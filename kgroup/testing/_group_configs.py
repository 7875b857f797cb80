"""Per-group broker configs for tests: a short KIP-848 session for one test's group.

Kafka 4.x keeps dynamic configs per group (resource type GROUP, 32): among them
``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms``, which override the
broker's ``group.consumer.session.timeout.ms`` / ``group.consumer.heartbeat.interval.ms``
for that group only (within the broker's ``group.consumer.min.*`` / ``max.*`` bounds; the
interval must be below the session). The consumer protocol's members cannot choose
these themselves, so a test that wants a crash noticed in three seconds sets them here,
before its members join::

    await set_consumer_group_timeouts(
        broker.bootstrap, group, session_timeout_ms=3000, heartbeat_interval_ms=300
    )
    config = GroupConfig(..., group_protocol="consumer", consumer_session_timeout_ms=3000)

(``consumer_session_timeout_ms`` tells kgroup's member the session for its lease.)

aiokafka's admin client has no IncrementalAlterConfigs (only the legacy AlterConfigs, whose
resource types stop at BROKER), so the requests are written here on kgroup's strict wire
primitives: IncrementalAlterConfigs (44) v1, checked against the ``common/message/*.json``
schemas inside the kafka-clients 4.4.0 jar, and DescribeConfigs (32) v4 with the wire
layer's own schema (``kgroup._protocol._schemas_configs``).
One connection to the first bootstrap address; a KRaft broker forwards the change to the
controller. Plaintext only, as the test brokers' plain listeners.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from io import BytesIO
from typing import Any, Final

from .._protocol._primitives import (
    Boolean,
    Format,
    Int8,
    Int16,
    Int32,
    parse_response_header,
)
from .._protocol._schemas_configs import describe_configs_request, describe_configs_response

__all__ = [
    "GROUP_RESOURCE",
    "GroupConfigError",
    "alter_group_configs",
    "describe_group_configs",
    "set_consumer_group_timeouts",
]

#: ConfigResource.Type.GROUP.
GROUP_RESOURCE: Final = 32
_INCREMENTAL_ALTER_CONFIGS: Final = 44
_DESCRIBE_CONFIGS: Final = 32
_OP_SET: Final = 0
_OP_DELETE: Final = 1
_CLIENT_ID: Final = b"kgroup-testing"

_F = Format(flexible=True)

# IncrementalAlterConfigs v1 (flexible from v1; v0-v1 in 4.4.0).
_ALTER_REQUEST: Final[Any] = _F.struct(
    (
        "resources",
        _F.array(
            ("resource_type", Int8),
            ("resource_name", _F.string),
            (
                "configs",
                _F.array(("name", _F.string), ("config_operation", Int8), ("value", _F.string)),
            ),
        ),
    ),
    ("validate_only", Boolean),
)
_ALTER_RESPONSE: Final[Any] = _F.struct(
    ("throttle_time_ms", Int32),
    (
        "responses",
        _F.array(
            ("error_code", Int16),
            ("error_message", _F.string),
            ("resource_type", Int8),
            ("resource_name", _F.string),
        ),
    ),
)

# DescribeConfigs v4: the wire layer's schema (kgroup reads the session timeout with it).
_DESCRIBE_REQUEST: Final[Any] = describe_configs_request(4)
_DESCRIBE_RESPONSE: Final[Any] = describe_configs_response(4)

_NO_TAGS: Final[dict[int, bytes]] = {}
_frame_size = struct.Struct(">i")
_header = struct.Struct(">hhih")


class GroupConfigError(RuntimeError):
    """The broker refused a group config change or description (its error code and
    message are in the text and in :attr:`error_code`)."""

    def __init__(self, group_id: str, error_code: int, message: str | None) -> None:
        super().__init__(f"group {group_id!r}: error {error_code}: {message or '(no message)'}")
        self.error_code = error_code


@dataclass(frozen=True)
class _Address:
    host: str
    port: int


def _first_address(bootstrap: str | Sequence[str]) -> _Address:
    entries = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    host, _, port = entries[0].strip().rpartition(":")
    return _Address(host.strip("[]") or "127.0.0.1", int(port))


async def _call(
    bootstrap: str | Sequence[str], api_key: int, version: int, body: bytes, timeout: float
) -> BytesIO:
    """Send one request (header v2) and return the response body after its header."""
    address = _first_address(bootstrap)
    correlation_id = 1
    head = _header.pack(api_key, version, correlation_id, len(_CLIENT_ID)) + _CLIENT_ID
    payload = head + b"\x00" + body  # header v2: an empty tagged-field section
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(address.host, address.port)
        try:
            writer.write(_frame_size.pack(len(payload)) + payload)
            await writer.drain()
            (size,) = _frame_size.unpack(await reader.readexactly(4))
            frame = BytesIO(await reader.readexactly(size))
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:  # pragma: no cover - the broker closed first
                pass
    if parse_response_header(frame, flexible=True) != correlation_id:
        raise RuntimeError("the broker answered another request")  # pragma: no cover
    return frame


def _text(value: str | int | None) -> str | None:
    return None if value is None else str(value)


async def alter_group_configs(
    bootstrap: str | Sequence[str],
    group_id: str,
    configs: Mapping[str, str | int | None],
    *,
    validate_only: bool = False,
    wait: bool = True,
    timeout: float = 10.0,
) -> None:
    """Set (or with ``None``, delete) dynamic configs of group ``group_id`` on Kafka 4.x,
    with IncrementalAlterConfigs v1 on resource type GROUP. The group need not exist yet.
    Raises :class:`GroupConfigError` when the broker refuses (a value outside the
    broker's bounds, an unknown name).

    The broker answers once the controller has the change, before it has applied it to
    its own view (KRaft publishes it to the brokers afterwards): with ``wait`` (the
    default) this returns only once DescribeConfigs shows every value set here (deletions
    are not waited for), and raises TimeoutError after ``timeout``."""
    entries = [
        (name, _OP_DELETE if value is None else _OP_SET, _text(value), _NO_TAGS)
        for name, value in configs.items()
    ]
    body = _ALTER_REQUEST.encode(
        ([(GROUP_RESOURCE, group_id, entries, _NO_TAGS)], validate_only, _NO_TAGS)
    )
    frame = await _call(bootstrap, _INCREMENTAL_ALTER_CONFIGS, 1, body, timeout)
    _throttle, responses, _tags = _ALTER_RESPONSE.decode(frame)
    for error_code, message, _type, _name, _rtags in responses:
        if error_code:
            raise GroupConfigError(group_id, error_code, message)
    wanted = {name: str(value) for name, value in configs.items() if value is not None}
    if wait and wanted and not validate_only:
        await _until_applied(bootstrap, group_id, wanted, timeout)


async def _until_applied(
    bootstrap: str | Sequence[str], group_id: str, wanted: Mapping[str, str], timeout: float
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        left = deadline - loop.time()
        seen = await describe_group_configs(bootstrap, group_id, list(wanted), timeout=left)
        if all(seen.get(name) == value for name, value in wanted.items()):
            return
        if loop.time() >= deadline:
            raise TimeoutError(
                f"group {group_id!r}: the broker still describes {seen} after {timeout:.0f} s "
                f"(wanted {dict(wanted)})"
            )
        await asyncio.sleep(0.02)


async def describe_group_configs(
    bootstrap: str | Sequence[str],
    group_id: str,
    names: Sequence[str] | None = None,
    *,
    timeout: float = 10.0,
) -> dict[str, str | None]:
    """The configs of group ``group_id`` as the broker resolves them (the group's own
    value, else the broker's default), by name; ``names`` restricts them (None: all)."""
    keys = None if names is None else list(names)
    body = _DESCRIBE_REQUEST.encode(
        ([(GROUP_RESOURCE, group_id, keys, _NO_TAGS)], False, False, _NO_TAGS)
    )
    frame = await _call(bootstrap, _DESCRIBE_CONFIGS, 4, body, timeout)
    _throttle, results, _tags = _DESCRIBE_RESPONSE.decode(frame)
    found: dict[str, str | None] = {}
    for error_code, message, _type, _name, configs, _rtags in results:
        if error_code:
            raise GroupConfigError(group_id, error_code, message)
        for name, value, *_rest in configs:
            found[name] = value
    return found


async def set_consumer_group_timeouts(
    bootstrap: str | Sequence[str],
    group_id: str,
    *,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
    timeout: float = 10.0,
) -> None:
    """Give the consumer-protocol (KIP-848) group ``group_id`` its own session timeout
    and heartbeat interval (``consumer.session.timeout.ms``,
    ``consumer.heartbeat.interval.ms``), before its members join; returns once the broker
    describes them. kgroup's test brokers accept sessions from 1000 ms and intervals from
    100 ms; the interval must be below the session. Members learn the interval from their
    next heartbeat answer; the broker applies the session from each member's next
    heartbeat on."""
    if not 0 < heartbeat_interval_ms < session_timeout_ms:
        raise ValueError(
            f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be positive and below "
            f"session_timeout_ms ({session_timeout_ms})"
        )
    await alter_group_configs(
        bootstrap,
        group_id,
        {
            "consumer.session.timeout.ms": session_timeout_ms,
            "consumer.heartbeat.interval.ms": heartbeat_interval_ms,
        },
        timeout=timeout,
    )
