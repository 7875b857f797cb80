"""A fake Kafka broker, in the test's event loop, that can be told to answer badly.

It speaks just enough of the protocol for one kgroup member to join a group and stay there:
ApiVersions, Metadata (one broker, itself, which is also every group's coordinator; the topics
it was given), FindCoordinator, JoinGroup, SyncGroup, Heartbeat and LeaveGroup. Requests are
decoded and answers encoded with kgroup's own structs (``kgroup._protocol._schemas``) and, for
ApiVersions and Metadata, aiokafka's. It advertises every version kgroup speaks unless told
otherwise (``versions=CLASSIC_VERSIONS`` caps every API below its first flexible version).

The group logic is the smallest that is still honest: whoever joins becomes the only member and
the leader of a new generation (a member already in the group is replaced), a new dynamic
member gets MEMBER_ID_REQUIRED first (JoinGroup v4+), SyncGroup and Heartbeat check the
member id and generation, and a member whose session lapses is expired (``expired``).

Faults are scripted while it runs::

    broker.inject(HEARTBEAT, Fault.TRUNCATE_CLOSE)             # the next Heartbeat answer
    broker.inject(JOIN_GROUP, Fault.GARBAGE, count=3)          # the next three
    broker.inject(SYNC_GROUP, Fault.ABSURD_SIZE, count=None)   # from now on, until clear()
    broker.inject(HEARTBEAT, Fault.ERROR_CODE, error_code=27)  # a well-formed error answer
    broker.inject(JOIN_GROUP, Fault.GARBAGE, skip=1)           # the second answer, not the first
    broker.inject(FIND_COORDINATOR, Fault.FIELDS, fields={"port": 70000})  # nonsense values

The request is processed first (the group changes as it would) and only its answer is spoiled,
as when the bytes are damaged on the way. Every request received is recorded in ``requests``
(API, version, connection, time, decoded fields), every fault applied in ``applied``, and
every connection in ``connections`` (with when it was closed, and by whom).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import random
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any

import aiokafka.protocol.admin as aiokafka_admin
import aiokafka.protocol.metadata as aiokafka_metadata
from aiokafka.protocol.types import Int16, Int32, UnsignedVarInt32

from kgroup._protocol._schemas import REQUEST_STRUCTS
from kgroup._protocol._versions import FLEXIBLE_FROM, SUPPORTED_VERSIONS

__all__ = [
    "API_VERSIONS",
    "CLASSIC_VERSIONS",
    "DEFAULT_VERSIONS",
    "FIND_COORDINATOR",
    "HEARTBEAT",
    "JOIN_GROUP",
    "LEAVE_GROUP",
    "METADATA",
    "SYNC_GROUP",
    "UNKNOWN_ERROR_CODE",
    "AppliedFault",
    "Connection",
    "FakeBroker",
    "Fault",
    "ReceivedRequest",
]

METADATA, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 3, 10, 11, 12, 13, 14
API_VERSIONS = 18

#: What the fake advertises by default: every version kgroup speaks, aiokafka's ApiVersions
#: v0-v2 and Metadata v0-v5 (the newest aiokafka's own Metadata builder can send).
DEFAULT_VERSIONS: dict[int, tuple[int, int]] = {
    API_VERSIONS: (0, 2),
    METADATA: (0, 5),
    **SUPPORTED_VERSIONS,
}
#: Every group API capped below its first flexible version (classic encodings: int16/int32
#: lengths, so a length can be negative on the wire).
CLASSIC_VERSIONS: dict[int, tuple[int, int]] = {
    API_VERSIONS: (0, 2),
    METADATA: (0, 5),
    **{api: (low, FLEXIBLE_FROM[api] - 1) for api, (low, _high) in SUPPORTED_VERSIONS.items()},
}

#: An error code no Kafka version defines.
UNKNOWN_ERROR_CODE = 9999

_NONE, _UNKNOWN_TOPIC, _ILLEGAL_GENERATION, _UNKNOWN_MEMBER_ID = 0, 3, 22, 25
_MEMBER_ID_REQUIRED = 79
_NODE_ID = 0


class Fault(enum.Enum):
    """What to do with an answer instead of sending it as it is."""

    #: The size prefix and half of the frame, then the connection is closed.
    TRUNCATE_CLOSE = "truncate_close"
    #: The size prefix and half of the frame, then nothing ever again on that connection.
    TRUNCATE_HANG = "truncate_hang"
    #: The whole frame, with the correlation id of another request.
    WRONG_CORRELATION = "wrong_correlation"
    #: The right size and correlation id, then random bytes (seeded: the same every run).
    GARBAGE = "garbage"
    #: A size prefix of 2**31-1, a few bytes, then silence (the connection stays open).
    ABSURD_SIZE = "absurd_size"
    #: A negative size prefix (-1), then the frame.
    NEGATIVE_SIZE = "negative_size"
    #: A well-formed answer whose error code is ``UNKNOWN_ERROR_CODE`` (or ``error_code``).
    UNKNOWN_ERROR = "unknown_error"
    #: A well-formed answer with the given ``error_code`` (e.g. 27 to start a rebalance).
    ERROR_CODE = "error_code"
    #: A well-formed answer with some fields replaced (``fields={"port": 70000}``; for
    #: FindCoordinator v4+ they apply to the ``coordinators`` entries).
    FIELDS = "fields"
    #: The answer's array (JoinGroup/LeaveGroup ``members``, FindCoordinator v4+
    #: ``coordinators``, Metadata ``topics``) or, without one, its first variable-length
    #: field, with a length of -2 on classic versions, or 2**32-2 (a compact length that
    #: runs far past the end) on flexible ones.
    NEGATIVE_LENGTH = "negative_length"


#: Faults after which the connection answers nothing more (the client must give up on it).
_HANGING = frozenset({Fault.TRUNCATE_HANG, Fault.ABSURD_SIZE})


@dataclass
class Connection:
    """One client connection, as the fake saw it."""

    id: int
    peer: str
    opened_at: float
    closed_at: float | None = None
    closed_by: str | None = None  # "client" (EOF/reset), "broker" (a fault), "shutdown"

    @property
    def open(self) -> bool:
        return self.closed_at is None


@dataclass(frozen=True)
class ReceivedRequest:
    api_key: int
    version: int
    correlation_id: int
    connection: int
    at: float  # the event loop's time()
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class AppliedFault:
    api_key: int
    version: int
    fault: Fault
    connection: int
    at: float


@dataclass
class _Rule:
    api_key: int
    fault: Fault
    left: int | None  # None: until clear()
    error_code: int | None
    skip: int  # answers to let through untouched first
    fields: Mapping[str, Any]


@dataclass
class _Member:
    member_id: str
    instance_id: str | None
    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    last_seen: float


@dataclass
class _Group:
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # ids handed out with MEMBER_ID_REQUIRED
    assignments: dict[str, bytes] = field(default_factory=dict)


class _Hang(Exception):
    """Raised inside a connection handler: answer nothing more on this connection."""


class _Close(Exception):
    """Raised inside a connection handler: close this connection now."""


class FakeBroker:
    """See the module docstring. ``async with FakeBroker(topics={"t": 3}) as broker:``."""

    def __init__(
        self,
        *,
        topics: Mapping[str, int] | None = None,
        versions: Mapping[int, tuple[int, int]] | None = None,
        require_member_id: bool = True,
        seed: int = 20240611,
    ) -> None:
        self.topics = dict(topics or {"t": 3})
        self.versions = dict(DEFAULT_VERSIONS if versions is None else versions)
        self.require_member_id = require_member_id
        self.host = "127.0.0.1"
        self.port = 0
        self.requests: list[ReceivedRequest] = []
        self.applied: list[AppliedFault] = []
        self.connections: list[Connection] = []
        self.expired: list[str] = []  # member ids whose session lapsed
        self.groups: dict[str, _Group] = {}
        self._rules: list[_Rule] = []
        self._random = random.Random(seed)
        self._ids = itertools.count(1)
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._changed = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def aclose(self) -> None:
        """Stop listening, drop every connection and wait for every handler."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FakeBroker:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- scripting -----------------------------------------------------------------------------

    def inject(
        self,
        api_key: int,
        fault: Fault,
        *,
        count: int | None = 1,
        skip: int = 0,
        error_code: int | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        """Spoil the next ``count`` answers to ``api_key`` (``None``: every one until
        :meth:`clear`), after letting ``skip`` of them through. Rules apply in the order they
        were added."""
        if fault is Fault.ERROR_CODE and error_code is None:
            raise ValueError("Fault.ERROR_CODE needs error_code=")
        if fault is Fault.FIELDS and not fields:
            raise ValueError("Fault.FIELDS needs fields=")
        self._rules.append(_Rule(api_key, fault, count, error_code, skip, dict(fields or {})))

    def clear(self, api_key: int | None = None) -> None:
        """Forget the rules (for ``api_key`` only, if given)."""
        self._rules = [r for r in self._rules if api_key is not None and r.api_key != api_key]

    def requests_for(self, api_key: int) -> list[ReceivedRequest]:
        return [r for r in self.requests if r.api_key == api_key]

    def open_connections(self) -> list[Connection]:
        return [c for c in self.connections if c.open]

    def check_sessions(self) -> None:
        """Expire every member whose session has lapsed (also done on every request)."""
        now = asyncio.get_running_loop().time()
        for group in self.groups.values():
            for member in list(group.members.values()):
                if now - member.last_seen > member.session_timeout_ms / 1000:
                    del group.members[member.member_id]
                    self.expired.append(member.member_id)

    async def wait_for(self, condition: Callable[[], object], *, timeout: float, what: str) -> None:
        """Wait until ``condition()`` holds, waking on every request, answer and connection
        change (and every 50 ms); TimeoutError naming ``what`` after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not condition():
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(f"fake broker: {what} did not happen within {timeout} s")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 0.05))

    def _notify(self) -> None:
        self._changed.set()

    def _take_rule(self, api_key: int) -> _Rule | None:
        for rule in self._rules:
            if rule.api_key == api_key and (rule.left is None or rule.left > 0):
                if rule.skip > 0:
                    rule.skip -= 1
                    return None
                if rule.left is not None:
                    rule.left -= 1
                return rule
        return None

    # -- connections ---------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        loop = asyncio.get_running_loop()
        peer = writer.get_extra_info("peername")
        conn = Connection(next(self._ids), f"{peer[0]}:{peer[1]}", loop.time())
        self.connections.append(conn)
        self._notify()
        closed_by = "client"
        try:
            while True:
                try:
                    (size,) = struct.unpack(">i", await reader.readexactly(4))
                    frame = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                try:
                    await self._answer(conn, frame, writer)
                except _Close:
                    closed_by = "broker"
                    break
                except _Hang:
                    # Answer nothing more; read and drop whatever comes until the client
                    # gives up on the connection.
                    with contextlib.suppress(ConnectionError):
                        while await reader.read(65536):
                            pass
                    break
        except asyncio.CancelledError:
            closed_by = "shutdown"
            raise
        finally:
            conn.closed_at = loop.time()
            conn.closed_by = closed_by
            self._writers.discard(writer)
            writer.transport.abort()
            self._handlers.discard(task)
            self._notify()

    async def _answer(self, conn: Connection, frame: bytes, writer: asyncio.StreamWriter) -> None:
        buffer = BytesIO(frame)
        api_key, version, correlation_id = struct.unpack(">hhi", buffer.read(8))
        (client_id_length,) = struct.unpack(">h", buffer.read(2))
        if client_id_length > 0:
            buffer.read(client_id_length)
        flexible = _flexible(api_key, version)
        if flexible:
            _skip_tagged_fields(buffer)
        request_fields = self._decode_request(api_key, version, buffer)
        loop = asyncio.get_running_loop()
        self.requests.append(
            ReceivedRequest(api_key, version, correlation_id, conn.id, loop.time(), request_fields)
        )
        self.check_sessions()
        response_cls, values = self._handle(api_key, version, request_fields)
        rule = self._take_rule(api_key)
        if rule is not None and rule.fault in (Fault.UNKNOWN_ERROR, Fault.ERROR_CODE):
            code = UNKNOWN_ERROR_CODE if rule.error_code is None else rule.error_code
            _set_fields(values, {"error_code": code})
        if rule is not None and rule.fault is Fault.FIELDS:
            _set_fields(values, rule.fields)
        overrides: dict[str, bytes] = {}
        if rule is not None and rule.fault is Fault.NEGATIVE_LENGTH:
            name = _length_field(response_cls.SCHEMA)
            overrides[name] = _bad_length(response_cls.SCHEMA, name, flexible)
        body = _encode(response_cls.SCHEMA, values, overrides)
        # ApiVersions answers always use response header v0 (KIP-511).
        header_tags = b"\x00" if flexible and api_key != API_VERSIONS else b""
        payload = struct.pack(">i", correlation_id) + header_tags + body
        await self._send(conn, api_key, version, correlation_id, payload, rule, writer)

    async def _send(
        self,
        conn: Connection,
        api_key: int,
        version: int,
        correlation_id: int,
        payload: bytes,
        rule: _Rule | None,
        writer: asyncio.StreamWriter,
    ) -> None:
        fault = None if rule is None else rule.fault
        if fault is not None:
            loop = asyncio.get_running_loop()
            self.applied.append(AppliedFault(api_key, version, fault, conn.id, loop.time()))
            self._notify()
        size = struct.pack(">i", len(payload))
        match fault:
            case Fault.TRUNCATE_CLOSE | Fault.TRUNCATE_HANG:
                writer.write(size + payload[: len(payload) // 2])
            case Fault.WRONG_CORRELATION:
                writer.write(size + struct.pack(">i", correlation_id + 1) + payload[4:])
            case Fault.GARBAGE:
                writer.write(size + payload[:4] + self._random.randbytes(len(payload) - 4))
            case Fault.ABSURD_SIZE:
                writer.write(struct.pack(">i", 2**31 - 1) + payload[:8])
            case Fault.NEGATIVE_SIZE:
                writer.write(struct.pack(">i", -1) + payload)
            case _:
                writer.write(size + payload)
        await writer.drain()
        if fault is Fault.TRUNCATE_CLOSE:
            raise _Close
        if fault in _HANGING:
            raise _Hang

    # -- requests ------------------------------------------------------------------------------

    def _decode_request(self, api_key: int, version: int, buffer: BytesIO) -> dict[str, Any]:
        if api_key == API_VERSIONS:
            return {}
        if api_key == METADATA:
            cls: Any = getattr(aiokafka_metadata, f"MetadataRequest_v{version}")
        else:
            cls = REQUEST_STRUCTS[api_key][version]
        schema = cls.SCHEMA
        return dict(zip(schema.names, schema.decode(buffer), strict=True))

    def _handle(
        self, api_key: int, version: int, req: dict[str, Any]
    ) -> tuple[Any, dict[str, Any]]:
        """The answer to one request: (response struct class, field values by name)."""
        if api_key == API_VERSIONS:
            cls: Any = getattr(aiokafka_admin, f"ApiVersionResponse_v{min(version, 1)}")
            return cls, {
                "error_code": _NONE,
                "api_versions": [(k, low, high) for k, (low, high) in self.versions.items()],
                "throttle_time_ms": 0,
            }
        if api_key == METADATA:
            return self._metadata(version, req)
        cls = REQUEST_STRUCTS[api_key][version].RESPONSE_TYPE
        handler = {
            FIND_COORDINATOR: self._find_coordinator,
            JOIN_GROUP: self._join_group,
            SYNC_GROUP: self._sync_group,
            HEARTBEAT: self._heartbeat,
            LEAVE_GROUP: self._leave_group,
        }[api_key]
        values: dict[str, Any] = {"throttle_time_ms": 0}
        values.update(handler(version, req))
        return cls, values

    def _metadata(self, version: int, req: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        cls = getattr(aiokafka_metadata, f"MetadataResponse_v{version}")
        wanted = req.get("topics")
        names = list(self.topics) if not wanted else list(wanted)
        topics = []
        for name in names:
            count = self.topics.get(name)
            partitions = [
                {
                    "error_code": _NONE,
                    "partition": p,
                    "leader": _NODE_ID,
                    "replicas": [_NODE_ID],
                    "isr": [_NODE_ID],
                    "offline_replicas": [],
                }
                for p in range(count or 0)
            ]
            topics.append(
                {
                    "error_code": _NONE if count is not None else _UNKNOWN_TOPIC,
                    "topic": name,
                    "is_internal": False,
                    "partitions": partitions,
                }
            )
        return cls, {
            "throttle_time_ms": 0,
            "brokers": [{"node_id": _NODE_ID, "host": self.host, "port": self.port, "rack": None}],
            "cluster_id": "fake-cluster",
            "controller_id": _NODE_ID,
            "topics": topics,
        }

    def _coordinator(self) -> dict[str, Any]:
        return {"node_id": _NODE_ID, "host": self.host, "port": self.port}

    def _find_coordinator(self, version: int, req: dict[str, Any]) -> dict[str, Any]:
        if version >= 4:
            return {
                "coordinators": [
                    {"key": key, "error_code": _NONE, "error_message": None, **self._coordinator()}
                    for key in req["coordinator_keys"]
                ]
            }
        return {"error_code": _NONE, "error_message": None, **self._coordinator()}

    def _join_group(self, version: int, req: dict[str, Any]) -> dict[str, Any]:
        group = self.groups.setdefault(req["group_id"], _Group())
        member_id: str = req["member_id"]
        instance_id: str | None = req.get("group_instance_id")
        answer: dict[str, Any] = {
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": "" if version < 7 else None,
            "leader": "",
            "skip_assignment": False,
            "member_id": member_id,
            "members": [],
        }
        if member_id == "":
            member_id = f"member-{next(self._ids)}"
            if self.require_member_id and version >= 4 and instance_id is None:
                group.pending.add(member_id)
                return {**answer, "error_code": _MEMBER_ID_REQUIRED, "member_id": member_id}
        elif member_id not in group.members and member_id not in group.pending:
            return {**answer, "error_code": _UNKNOWN_MEMBER_ID}
        group.pending.discard(member_id)
        protocols = [(p[0], p[1]) for p in req["protocols"]]
        # The joiner becomes the only member and the leader of a new generation.
        group.members = {
            member_id: _Member(
                member_id,
                instance_id,
                req["session_timeout_ms"],
                protocols,
                asyncio.get_running_loop().time(),
            )
        }
        group.generation += 1
        group.protocol_type = req["protocol_type"]
        group.protocol = protocols[0][0]
        group.leader = member_id
        group.assignments = {}
        return {
            "error_code": _NONE,
            "generation_id": group.generation,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol,
            "leader": member_id,
            "skip_assignment": False,
            "member_id": member_id,
            "members": [
                {"member_id": member_id, "group_instance_id": instance_id, "metadata": metadata}
                for name, metadata in protocols
                if name == group.protocol
            ],
        }

    def _check_member(self, req: dict[str, Any]) -> tuple[_Group | None, int]:
        group = self.groups.get(req["group_id"])
        member = None if group is None else group.members.get(req["member_id"])
        if group is None or member is None:
            return group, _UNKNOWN_MEMBER_ID
        if req["generation_id"] != group.generation:
            return group, _ILLEGAL_GENERATION
        member.last_seen = asyncio.get_running_loop().time()
        return group, _NONE

    def _sync_group(self, version: int, req: dict[str, Any]) -> dict[str, Any]:
        group, code = self._check_member(req)
        if code != _NONE or group is None:
            return {
                "error_code": code,
                "protocol_type": None,
                "protocol_name": None,
                "assignment": b"",
            }
        if req["member_id"] == group.leader:
            group.assignments = {a[0]: a[1] for a in req["assignments"]}
        return {
            "error_code": _NONE,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol,
            "assignment": group.assignments.get(req["member_id"], b""),
        }

    def _heartbeat(self, version: int, req: dict[str, Any]) -> dict[str, Any]:
        _group, code = self._check_member(req)
        return {"error_code": code}

    def _leave_group(self, version: int, req: dict[str, Any]) -> dict[str, Any]:
        group = self.groups.get(req["group_id"])
        if version >= 3:
            leaving = [(m[0], m[1]) for m in req["members"]]
        else:
            leaving = [(req["member_id"], None)]
        results = []
        for member_id, instance_id in leaving:
            known = group is not None and member_id in group.members
            if group is not None and known:
                del group.members[member_id]
            results.append(
                {
                    "member_id": member_id,
                    "group_instance_id": instance_id,
                    "error_code": _NONE if known else _UNKNOWN_MEMBER_ID,
                }
            )
        return {"error_code": _NONE, "members": results}


# -- encoding helpers --------------------------------------------------------------------------


def _flexible(api_key: int, version: int) -> bool:
    if api_key == API_VERSIONS:
        return version >= 3
    if api_key == METADATA:
        return version >= 9
    return version >= FLEXIBLE_FROM[api_key]


def _skip_tagged_fields(buffer: BytesIO) -> None:
    for _ in range(UnsignedVarInt32.decode(buffer)):
        UnsignedVarInt32.decode(buffer)  # tag
        buffer.read(UnsignedVarInt32.decode(buffer))


def _positional(schema: Any, values: Mapping[str, Any]) -> list[Any]:
    """``values`` (by name, nested dicts for array elements) in ``schema``'s order; every
    tagged-field section empty, fields the schema lacks dropped."""
    row: list[Any] = []
    for name, kind in zip(schema.names, schema.fields, strict=True):
        if name == "tags":
            row.append({})
            continue
        value = values[name]
        element = getattr(kind, "array_of", None)
        if value is not None and hasattr(element, "names"):
            value = [
                tuple(item) if isinstance(item, tuple) else tuple(_positional(element, item))
                for item in value
            ]
        row.append(value)
    return row


def _encode(schema: Any, values: Mapping[str, Any], overrides: Mapping[str, bytes]) -> bytes:
    """The struct's bytes; a field named in ``overrides`` is written as those raw bytes."""
    row = _positional(schema, values)
    parts = []
    for name, kind, value in zip(schema.names, schema.fields, row, strict=True):
        parts.append(overrides[name] if name in overrides else kind.encode(value))
    return b"".join(parts)


def _set_fields(values: dict[str, Any], fields: Mapping[str, Any]) -> None:
    if "coordinators" in values:  # FindCoordinator v4+: the answer is per coordinator
        values["coordinators"] = [{**c, **fields} for c in values["coordinators"]]
    else:
        values.update(fields)


def _length_field(schema: Any) -> str:
    """The field NEGATIVE_LENGTH spoils: the first array of the answer, else its first
    string or bytes field."""
    names: Sequence[str] = schema.names
    for name, kind in zip(names, schema.fields, strict=True):
        if hasattr(kind, "array_of"):
            return name
    for name, kind in zip(names, schema.fields, strict=True):
        if _kind_name(kind) in ("String", "CompactString", "Bytes", "CompactBytes"):
            return name
    raise ValueError(f"{schema.names}: no length field to spoil")


def _bad_length(schema: Any, name: str, flexible: bool) -> bytes:
    kind = schema.fields[schema.names.index(name)]
    encoded: bytes
    if flexible:
        encoded = UnsignedVarInt32.encode(2**32 - 1)  # length 2**32 - 2
    elif _kind_name(kind) == "String":
        encoded = Int16.encode(-2)
    else:
        encoded = Int32.encode(-2)
    return encoded


def _kind_name(kind: Any) -> str:
    for cls in type(kind).__mro__ if not isinstance(kind, type) else kind.__mro__:
        if cls.__module__.startswith("aiokafka.protocol.types"):
            return cls.__name__
    return type(kind).__name__
