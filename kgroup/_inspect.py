"""Group inspection: what ``kgroup groups`` and ``kgroup describe`` show.

Like Kafka's ``kafka-consumer-groups.sh --list`` and ``--describe --members --verbose``:

- :func:`list_groups` asks every broker for the groups it coordinates (ListGroups v4 gives
  each group's state; older brokers leave it unknown).
- :func:`describe_group` asks the group's coordinator (DescribeGroups): state, protocol
  type and name, every member with its ids, client host and *decoded* assignment (for the
  ``consumer`` protocol type, with kgroup's strict decoder); then the committed offsets
  (OffsetFetch for all of the group's partitions), the log end offsets and the lag.

The group APIs go over kgroup's own connections and wire layer; log end offsets come from
an aiokafka consumer without a group (ListOffsets). Every connection is closed on return.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import TopicPartition as AioTopicPartition

from ._config import GroupConfig
from ._core._consumer_protocol import Assignment, TopicPartition
from ._core._messages import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from ._errors import (
    CoordinatorError,
    ErrorCode,
    KGroupError,
    RemoteProtocolError,
)
from ._runtime._connection import BrokerConnection, Cluster
from ._runtime._security import connection_kwargs

__all__ = [
    "BrokerUnreachable",
    "GroupDescription",
    "GroupListing",
    "GroupNotFound",
    "InspectError",
    "MemberDescription",
    "PartitionOffsets",
    "describe_group",
    "list_groups",
]


class InspectError(KGroupError):
    """Inspection failed: the broker answered an error (``error_code``)."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


class BrokerUnreachable(InspectError):
    """No broker (or not the group's coordinator) could be reached in time."""


class GroupNotFound(InspectError):
    """The group does not exist (no members and no committed offsets: state Dead)."""


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None
    coordinator: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[str, ...] | None  # decoded ("topic-p"); None when not decodable
    assignment_bytes: int


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    lag: int | None
    owner: str | None  # the member id that holds it now


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: str
    members: tuple[MemberDescription, ...] = ()
    offsets: tuple[PartitionOffsets, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` schema (README, "Group inspection")."""
        return asdict(self)


def _config(bootstrap: str, overrides: dict[str, Any]) -> GroupConfig:
    # A GroupConfig validates the bootstrap list and the security settings once.
    return GroupConfig(bootstrap_servers=bootstrap, group_id="kgroup-inspect", **overrides)


async def _open(config: GroupConfig, host: str, port: int, timeout_ms: int) -> BrokerConnection:
    try:
        return await BrokerConnection.open(
            host,
            port,
            client_id=config.client_id,
            timeout_ms=timeout_ms,
            security=connection_kwargs(config),
        )
    except CoordinatorError as exc:
        raise BrokerUnreachable(str(exc)) from exc


async def _brokers(cluster: Cluster, timeout_ms: int) -> list[tuple[str, int]]:
    conn = await cluster.connection()
    response = await conn.raw_request(
        MetadataRequest([], allow_auto_topic_creation=False), timeout_ms
    )
    return [(str(b[1]), int(b[2])) for b in response.brokers]


async def list_groups(
    bootstrap: str, *, timeout: float = 10.0, **config: Any
) -> list[GroupListing]:
    """Every group the cluster's brokers coordinate, sorted by id. ``config``: further
    :class:`GroupConfig` fields (client id, security settings)."""
    cfg = _config(bootstrap, config)
    timeout_ms = int(timeout * 1000)
    cluster = Cluster(
        cfg.brokers,
        client_id=cfg.client_id,
        request_timeout_ms=timeout_ms,
        security=connection_kwargs(cfg),
    )
    try:
        async with asyncio.timeout(timeout):
            try:
                brokers = await _brokers(cluster, timeout_ms)
            except CoordinatorError as exc:
                raise BrokerUnreachable(str(exc)) from exc
            listings: list[GroupListing] = []
            for host, port in brokers:
                conn = await _open(cfg, host, port, timeout_ms)
                try:
                    response: ListGroupsResponse = await conn.request(
                        ListGroupsRequest(), timeout_ms
                    )
                finally:
                    await conn.aclose()
                if response.error_code:
                    raise InspectError(
                        f"ListGroups on {host}:{port}: {ErrorCode.describe(response.error_code)}",
                        response.error_code,
                    )
                listings.extend(
                    GroupListing(g.group_id, g.protocol_type, g.state, f"{host}:{port}")
                    for g in response.groups
                )
    except TimeoutError:
        raise BrokerUnreachable(f"no answer from {bootstrap} within {timeout:g} s") from None
    except CoordinatorError as exc:
        raise BrokerUnreachable(str(exc)) from exc
    finally:
        await cluster.aclose()
    return sorted(listings, key=lambda g: g.group_id)


def _decode(protocol_type: str, data: bytes) -> tuple[TopicPartition, ...] | None:
    """A consumer-protocol assignment's partitions; None when it cannot be decoded (another
    protocol type, or bytes that are not a valid Assignment)."""
    if not data:
        return ()
    if protocol_type != "consumer":
        return None
    try:
        return tuple(sorted(Assignment.decode(data).partitions))
    except RemoteProtocolError:
        return None


async def _log_end_offsets(
    cfg: GroupConfig, partitions: Sequence[TopicPartition], timeout_ms: int
) -> dict[TopicPartition, int]:
    if not partitions:
        return {}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=[f"{h}:{p}" for h, p in cfg.brokers],
        group_id=None,
        client_id=cfg.client_id,
        request_timeout_ms=timeout_ms,
        enable_auto_commit=False,
        **connection_kwargs(cfg),
    )
    await consumer.start()
    try:
        ends = await consumer.end_offsets([AioTopicPartition(t, p) for t, p in partitions])
    finally:
        await consumer.stop()
    return {TopicPartition(tp.topic, tp.partition): int(off) for tp, off in ends.items()}


async def describe_group(
    bootstrap: str, group_id: str, *, timeout: float = 10.0, **config: Any
) -> GroupDescription:
    """The group's state, members (with decoded assignments), committed offsets, log end
    offsets and lag. Raises :class:`GroupNotFound`, :class:`BrokerUnreachable` or
    :class:`InspectError`."""
    cfg = _config(bootstrap, config)
    timeout_ms = int(timeout * 1000)
    cluster = Cluster(
        cfg.brokers,
        client_id=cfg.client_id,
        request_timeout_ms=timeout_ms,
        security=connection_kwargs(cfg),
    )
    try:
        async with asyncio.timeout(timeout):
            try:
                found: FindCoordinatorResponse = await cluster.find_coordinator(
                    FindCoordinatorRequest(group_id=group_id)
                )
            except CoordinatorError as exc:
                raise BrokerUnreachable(str(exc)) from exc
            if found.error_code:
                raise InspectError(
                    f"FindCoordinator for group {group_id!r}: "
                    f"{ErrorCode.describe(found.error_code)}",
                    found.error_code,
                )
            where = f"{found.host}:{found.port}"
            conn = await _open(cfg, found.host, found.port, timeout_ms)
            try:
                described: DescribeGroupsResponse = await conn.request(
                    DescribeGroupsRequest(group_ids=(group_id,)), timeout_ms
                )
                fetched: OffsetFetchResponse = await conn.request(
                    OffsetFetchRequest(group_id=group_id, partitions=None, require_stable=False),
                    timeout_ms,
                )
            finally:
                await conn.aclose()
            description = _describe(group_id, where, described, fetched)
            if description.offsets:
                tps = [TopicPartition(o.topic, o.partition) for o in description.offsets]
                ends = await _log_end_offsets(cfg, tps, timeout_ms)
                description = _with_lag(description, ends)
            return description
    except TimeoutError:
        raise BrokerUnreachable(
            f"describing group {group_id!r} via {bootstrap} took longer than {timeout:g} s"
        ) from None
    except CoordinatorError as exc:
        raise BrokerUnreachable(str(exc)) from exc
    finally:
        await cluster.aclose()


def _describe(
    group_id: str,
    where: str,
    described: DescribeGroupsResponse,
    fetched: OffsetFetchResponse,
) -> GroupDescription:
    group = next((g for g in described.groups if g.group_id == group_id), None)
    if group is None:
        raise InspectError(f"DescribeGroups did not answer for group {group_id!r}")
    stored = fetched.error_code == 0 and any(p.offset >= 0 for p in fetched.partitions)
    if (
        group.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        or (group.error_code == 0 and group.state == "Dead")
        # tansu answers "Empty" for any group id; an empty group with no committed offsets
        # holds nothing, and Kafka would have deleted it: report it as missing too.
        or (group.error_code == 0 and group.state == "Empty" and not group.members and not stored)
    ):
        raise GroupNotFound(f"group {group_id!r} does not exist", group.error_code)
    if group.error_code:
        raise InspectError(
            f"DescribeGroups for group {group_id!r}: {ErrorCode.describe(group.error_code)}",
            group.error_code,
        )
    decoded = {m.member_id: _decode(group.protocol_type, m.assignment) for m in group.members}
    members = tuple(
        MemberDescription(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            assignment=(
                None
                if decoded[m.member_id] is None
                else tuple(str(tp) for tp in decoded[m.member_id] or ())
            ),
            assignment_bytes=len(m.assignment),
        )
        for m in group.members
    )
    owners = {tp: member for member, tps in decoded.items() for tp in tps or ()}
    committed: dict[TopicPartition, int | None] = dict.fromkeys(owners)
    if fetched.error_code == 0:
        for p in fetched.partitions:
            if p.error_code == 0:
                tp = TopicPartition(p.topic, p.partition)
                committed[tp] = p.offset if p.offset >= 0 else None
    offsets = tuple(
        PartitionOffsets(tp.topic, tp.partition, off, None, None, owners.get(tp))
        for tp, off in sorted(committed.items())
    )
    return GroupDescription(
        group_id=group.group_id,
        state=group.state,
        protocol_type=group.protocol_type,
        protocol=group.protocol,
        coordinator=where,
        members=members,
        offsets=offsets,
    )


def _with_lag(description: GroupDescription, ends: dict[TopicPartition, int]) -> GroupDescription:
    rows = []
    for o in description.offsets:
        end = ends.get(TopicPartition(o.topic, o.partition))
        lag = None if end is None or o.committed is None else max(0, end - o.committed)
        rows.append(PartitionOffsets(o.topic, o.partition, o.committed, end, lag, o.owner))
    return GroupDescription(
        group_id=description.group_id,
        state=description.state,
        protocol_type=description.protocol_type,
        protocol=description.protocol,
        coordinator=description.coordinator,
        members=description.members,
        offsets=tuple(rows),
    )
