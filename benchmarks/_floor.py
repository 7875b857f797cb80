"""The measurement floor of ``reaction.py``: the least a member can do between learning of a
rebalance and rejoining.

    python benchmarks/_proc.py member --client floor --bootstrap HOST:PORT --group g --topic t

A member of the classic group protocol in one thread with blocking sockets and ``select``:
no event loop, no state machine, no library between the socket and the decision. It joins
(``range``: the leader gives partitions out in order of member id), heartbeats every
``--heartbeat-ms``, and on a Heartbeat answered REBALANCE_IN_PROGRESS does what every
member in the benchmark does, the two JSON lines of its revoke callback (``Tracker``), then
writes a JoinGroup it built in advance. What ``reaction.py`` measures for it is the relay,
the kernel's wake-ups of two processes and those two lines: a floor under every client's
figure on the same machine in the same run. It is a benchmark instrument, not a client: no
retries beyond the member id round, no coordinator changes, no offsets; any other error
ends it with an ``error`` line.

The request and answer layouts come from kgroup's protocol layer (``to_wire`` on
aiokafka's structs), at the highest version both kgroup and the broker speak.
"""

from __future__ import annotations

import argparse
import io
import select
import socket
import struct
import time
from typing import Any

import _bench as b
from aiokafka.protocol.admin import ApiVersionRequest_v0
from aiokafka.protocol.metadata import MetadataRequest_v1

from kgroup._core._consumer_protocol import Assignment, Subscription, TopicPartition
from kgroup._core._messages import (
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from kgroup._protocol._direct import request_header
from kgroup._protocol._requests import to_wire
from kgroup._protocol._responses import from_wire
from kgroup._protocol._versions import FLEXIBLE_FROM

MEMBER_ID_REQUIRED = 79
REBALANCE_IN_PROGRESS = 27


class Wire:
    """One blocking connection: a request out, its answer back, in order."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}
        answer = self._call(ApiVersionRequest_v0(), flexible=False)
        self.versions = {key: (low, high) for key, low, high in answer.api_versions}

    def frame(self, struct_obj: Any) -> bytes:
        self.correlation += 1
        body = request_header(struct_obj, self.correlation, self.client_id) + struct_obj.encode()
        return struct.pack(">i", len(body)) + body

    def _read_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return bytes(out)

    def read(self, struct_obj: Any, flexible: bool) -> Any:
        size = struct.unpack(">i", self._read_exactly(4))[0]
        data = self._read_exactly(size)
        start = 4 + (1 if flexible else 0)  # correlation id, then (v1 header) no tags
        return struct_obj.RESPONSE_TYPE.decode(io.BytesIO(data[start:]))

    def _call(self, struct_obj: Any, flexible: bool) -> Any:
        self.sock.sendall(self.frame(struct_obj))
        return self.read(struct_obj, flexible)

    def prepare(self, message: Any) -> tuple[Any, bool]:
        struct_obj = to_wire(message).prepare(self.versions)
        flexible = struct_obj.API_VERSION >= FLEXIBLE_FROM.get(struct_obj.API_KEY, 1 << 30)
        return struct_obj, flexible

    def call(self, message: Any) -> Any:
        struct_obj, flexible = self.prepare(message)
        return from_wire(self._call(struct_obj, flexible))


def _range(members: dict[str, Subscription], topic: str, count: int) -> dict[str, bytes]:
    ids = sorted(m for m, s in members.items() if topic in s.topics)
    share, extra = divmod(count, len(ids)) if ids else (0, 0)
    out: dict[str, bytes] = {m: Assignment(partitions=()).encode() for m in members}
    first = 0
    for i, member in enumerate(ids):
        n = share + (1 if i < extra else 0)
        parts = tuple(TopicPartition(topic, p) for p in range(first, first + n))
        out[member] = Assignment(partitions=parts).encode()
        first += n
    return out


class FloorMember:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        host, port = a.bootstrap.rsplit(":", 1)
        boot = Wire(host, int(port), a.name)
        found = boot.call(FindCoordinatorRequest(group_id=a.group))
        meta = boot._call(MetadataRequest_v1(topics=[a.topic]), flexible=False)
        self.partitions = next(len(t[3]) for t in meta.topics if t[1] == a.topic)
        if (found.host, found.port) == (host, int(port)):
            self.wire = boot
        else:
            boot.sock.close()
            self.wire = Wire(found.host, found.port, a.name)
        self.member_id = ""
        self.generation = -1
        self.tracker = b.Tracker()

    def _join_request(self) -> JoinGroupRequest:
        return JoinGroupRequest(
            group_id=self.a.group,
            session_timeout_ms=self.a.session_ms,
            rebalance_timeout_ms=self.a.max_poll_ms,
            member_id=self.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(("range", Subscription(topics=(self.a.topic,)).encode()),),
        )

    def join(self, prebuilt: bytes | None = None) -> None:
        """JoinGroup (``prebuilt``: already on the wire), SyncGroup, the assign line."""
        wire = self.wire
        while True:
            join_struct, flexible = wire.prepare(self._join_request())
            if prebuilt is None:
                wire.sock.sendall(wire.frame(join_struct))
            prebuilt = None
            join = from_wire(wire.read(join_struct, flexible))
            if join.error_code == MEMBER_ID_REQUIRED:
                self.member_id = join.member_id
                continue
            if join.error_code:
                raise RuntimeError(f"JoinGroup failed: error {join.error_code}")
            break
        self.member_id, self.generation = join.member_id, join.generation_id
        assignments: dict[str, bytes] = {}
        if join.leader == join.member_id:
            members = {m.member_id: Subscription.decode(m.metadata) for m in join.members}
            assignments = _range(members, self.a.topic, self.partitions)
        sync = wire.call(
            SyncGroupRequest(
                group_id=self.a.group,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name="range",
                assignments=tuple(assignments.items()),
            )
        )
        if sync.error_code:
            raise RuntimeError(f"SyncGroup failed: error {sync.error_code}")
        mine = Assignment.decode(sync.assignment).partitions if sync.assignment else ()
        self.tracker.assigned((tp.partition for tp in mine), full=True)

    def run(self, flag: b.StopFlag) -> None:
        wire, interval = self.wire, self.a.heartbeat_ms / 1000
        self.join()
        while not flag.stop:
            hb_struct, hb_flexible = wire.prepare(
                HeartbeatRequest(
                    group_id=self.a.group,
                    generation_id=self.generation,
                    member_id=self.member_id,
                    group_instance_id=None,
                )
            )
            # The next JoinGroup, ready before the answer that calls for it.
            join_struct, _ = wire.prepare(self._join_request())
            wire.sock.sendall(wire.frame(hb_struct))
            join_frame = wire.frame(join_struct)
            ready, _, _ = select.select([wire.sock], [], [], 30)
            if not ready:
                raise RuntimeError("no Heartbeat answer in 30 s")
            code = from_wire(wire.read(hb_struct, hb_flexible)).error_code
            if code == REBALANCE_IN_PROGRESS:
                numbers = sorted(self.tracker.owned)
                self.tracker.revoking(numbers)  # the eager revoke callback's two lines
                self.tracker.revoked(numbers)
                wire.sock.sendall(join_frame)
                self.join(prebuilt=join_frame)
                continue
            if code:
                raise RuntimeError(f"Heartbeat failed: error {code}")
            deadline = time.monotonic() + interval
            while not flag.stop and time.monotonic() < deadline:
                time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))

    def leave(self) -> None:
        self.wire.call(LeaveGroupRequest(group_id=self.a.group, member_id=self.member_id))
        self.wire.sock.close()


def member_floor(a: argparse.Namespace) -> None:
    flag = b.StopFlag()
    b.emit("ready")
    member = FloorMember(a)
    try:
        member.run(flag)
        b.emit("closing")
    finally:
        numbers = sorted(member.tracker.owned)
        member.tracker.revoking(numbers)
        member.tracker.revoked(numbers)
        member.leave()
    b.emit("closed")
