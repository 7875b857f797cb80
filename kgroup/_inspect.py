"""Group inspection: what ``kgroup groups`` and ``kgroup describe`` show.

Like Kafka's ``kafka-consumer-groups.sh --list`` and ``--describe --members --verbose``:

- :func:`list_groups` asks every broker for the groups it coordinates (ListGroups v4 gives
  each group's state, v5 its type: ``classic``, ``consumer``, ...; older brokers leave them
  unknown).
- :func:`describe_group` asks the group's coordinator. A group of the KIP-848 ``consumer``
  protocol is described by ConsumerGroupDescribe: state, group and assignment epochs,
  assignor, and every member with its ids, rack, client, member epoch, subscription,
  assignment and target assignment (topics named by the broker). Any other group (the
  broker answers GROUP_ID_NOT_FOUND, or has no ConsumerGroupDescribe) by DescribeGroups:
  state, protocol type and name, every member with its ids, client host and *decoded*
  assignment (for the ``consumer`` protocol type, with kgroup's strict decoder). Then, for
  both, the committed offsets (OffsetFetch for all of the group's partitions), the log end
  offsets and the lag.

The group APIs go over kgroup's own connections and wire layer; log end offsets come from
an aiokafka consumer without a group (ListOffsets). Every connection is closed on return.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
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
from ._core._messages_describe import (
    MEMBER_TYPE_CLASSIC,
    MEMBER_TYPE_CONSUMER,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribedConsumerGroup,
    DescribedTopicPartitions,
)
from ._core._reactions import REACTIONS, Api, Reaction
from ._errors import (
    CoordinatorError,
    ErrorCode,
    KGroupError,
    RemoteProtocolError,
    UnsupportedVersion,
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
    #: ListGroups v5+: "classic", "consumer" (KIP-848), "share", "streams"; None below.
    group_type: str | None = None


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[str, ...] | None  # decoded ("topic-p"); None when not decodable
    assignment_bytes: int  # classic groups; 0 in a consumer-protocol group
    # Consumer-protocol groups only (ConsumerGroupDescribe); None in a classic group.
    rack_id: str | None = None
    member_epoch: int | None = None
    subscription: tuple[str, ...] | None = None  # topic names
    subscribed_topic_regex: str | None = None
    target_assignment: tuple[str, ...] | None = None  # what the coordinator wants it to own
    #: "consumer", or "classic" for a classic member of a consumer-protocol group (v1+).
    member_type: str | None = None


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
    protocol: str  # the classic protocol name, or a consumer-protocol group's assignor
    coordinator: str
    members: tuple[MemberDescription, ...] = ()
    offsets: tuple[PartitionOffsets, ...] = field(default=())
    group_type: str = "classic"  # or "consumer" (KIP-848)
    # Consumer-protocol groups only; None in a classic group.
    group_epoch: int | None = None
    assignment_epoch: int | None = None

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
                    GroupListing(
                        g.group_id, g.protocol_type, g.state, f"{host}:{port}", g.group_type
                    )
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


#: The reaction table that judges a group-level answer to a read (ConsumerGroupDescribe,
#: DescribeGroups, OffsetFetch): §4.7's, the one read a member makes of its group.
_GROUP_READ = Api.OFFSET_FETCH


def _not_ready(api: Api, code: int) -> bool:
    """Whether a member would ask again after this answer (spec §4.1 and §4.7's tables):
    the coordinator is loading, unavailable or elsewhere, as on a fresh broker that is
    creating its offsets topic or moving a group's coordinator while it starts."""
    row = REACTIONS[api].get(code)
    return row is not None and row.reaction in (Reaction.RETRY_BACKOFF, Reaction.COORDINATOR_MOVED)


class _NotReady(Exception):
    """An answer that asks for the coordinator to be found again after a backoff."""


@dataclass(frozen=True)
class _Answers:
    """What the group's coordinator said about it."""

    where: str
    consumer: DescribedConsumerGroup | None
    described: DescribeGroupsResponse | None
    fetched: OffsetFetchResponse


async def _ask_once(cluster: Any, group_id: str, timeout_ms: int, open_conn: Any) -> _Answers:
    found: FindCoordinatorResponse = await cluster.find_coordinator(
        FindCoordinatorRequest(group_id=group_id)
    )
    if _not_ready(Api.FIND_COORDINATOR, found.error_code):
        raise _NotReady(f"FindCoordinator: {ErrorCode.describe(found.error_code)}")
    if found.error_code:
        raise InspectError(
            f"FindCoordinator for group {group_id!r}: {ErrorCode.describe(found.error_code)}",
            found.error_code,
        )
    conn = await open_conn(found.host, found.port)
    try:
        consumer = await _consumer_group(conn, group_id, timeout_ms)
        described: DescribeGroupsResponse | None = None
        if consumer is None:
            described = await conn.request(DescribeGroupsRequest(group_ids=(group_id,)), timeout_ms)
            for g in described.groups:
                if g.group_id == group_id and _not_ready(_GROUP_READ, g.error_code):
                    raise _NotReady(f"DescribeGroups: {ErrorCode.describe(g.error_code)}")
        fetched: OffsetFetchResponse = await conn.request(
            OffsetFetchRequest(group_id=group_id, partitions=None, require_stable=False),
            timeout_ms,
        )
        if _not_ready(_GROUP_READ, fetched.error_code):
            raise _NotReady(f"OffsetFetch: {ErrorCode.describe(fetched.error_code)}")
    finally:
        await conn.aclose()
    return _Answers(f"{found.host}:{found.port}", consumer, described, fetched)


async def _ask_coordinator(
    cluster: Any,
    group_id: str,
    timeout_ms: int,
    open_conn: Any,
    *,
    waited_on: list[str],
    sleep: Any = asyncio.sleep,
) -> _Answers:
    """Find the group's coordinator and ask it about the group. While an answer is one a
    member would retry (:func:`_not_ready`), start again from FindCoordinator after 100 ms,
    doubling up to 1 s; the caller's timeout bounds the retries. Each such answer is
    appended to ``waited_on``, for the message should the timeout expire."""
    delay = 0.1
    while True:
        try:
            return await _ask_once(cluster, group_id, timeout_ms, open_conn)
        except _NotReady as exc:
            waited_on.append(str(exc))
        await sleep(delay)
        delay = min(1.0, delay * 2)


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

    async def open_conn(host: str, port: int) -> BrokerConnection:
        return await _open(cfg, host, port, timeout_ms)

    waited_on: list[str] = []
    try:
        async with asyncio.timeout(timeout):
            answers = await _ask_coordinator(
                cluster, group_id, timeout_ms, open_conn, waited_on=waited_on
            )
            if answers.consumer is not None:
                description = _describe_consumer(answers.where, answers.consumer, answers.fetched)
            else:
                assert answers.described is not None
                description = _describe(group_id, answers.where, answers.described, answers.fetched)
            if description.offsets:
                tps = [TopicPartition(o.topic, o.partition) for o in description.offsets]
                ends = await _log_end_offsets(cfg, tps, timeout_ms)
                description = _with_lag(description, ends)
            return description
    except TimeoutError:
        last = f"; the coordinator last answered {waited_on[-1]}" if waited_on else ""
        raise BrokerUnreachable(
            f"describing group {group_id!r} via {bootstrap} took longer than {timeout:g} s{last}"
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
    offsets = _offset_rows(owners, owners, fetched)
    return GroupDescription(
        group_id=group.group_id,
        state=group.state,
        protocol_type=group.protocol_type,
        protocol=group.protocol,
        coordinator=where,
        members=members,
        offsets=offsets,
    )


def _offset_rows(
    owners: Mapping[TopicPartition, str],
    partitions: Iterable[TopicPartition],
    fetched: OffsetFetchResponse,
) -> tuple[PartitionOffsets, ...]:
    """One row per partition of ``partitions`` and per partition with a committed offset,
    sorted, with its committed offset and its owner; the log end and lag come later."""
    committed: dict[TopicPartition, int | None] = dict.fromkeys(partitions)
    if fetched.error_code == 0:
        for p in fetched.partitions:
            if p.error_code == 0:
                tp = TopicPartition(p.topic, p.partition)
                committed[tp] = p.offset if p.offset >= 0 else None
    return tuple(
        PartitionOffsets(tp.topic, tp.partition, off, None, None, owners.get(tp))
        for tp, off in sorted(committed.items())
    )


#: How a consumer-protocol group's members speak (ConsumerGroupDescribe v1, KIP-1099).
_MEMBER_TYPES = {MEMBER_TYPE_CONSUMER: "consumer", MEMBER_TYPE_CLASSIC: "classic"}

#: Answers to ConsumerGroupDescribe that mean "not a consumer-protocol group here": a
#: classic group or none (GROUP_ID_NOT_FOUND, "Group g is not a consumer group." or "Group
#: g not found."), or a broker whose consumer protocol is off.
_NOT_A_CONSUMER_GROUP = (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION)


async def _consumer_group(
    conn: BrokerConnection, group_id: str, timeout_ms: int
) -> DescribedConsumerGroup | None:
    """The group as ConsumerGroupDescribe (key 69) describes it; None when it is no
    consumer-protocol group, or the coordinator cannot have one (no ConsumerGroupHeartbeat:
    Kafka before 3.7, tansu, which offers ConsumerGroupDescribe v0 all the same and
    answers "Empty" for any group id): the classic DescribeGroups describes it then (a
    consumer-protocol group reads as Dead there)."""
    versions = conn.api_versions
    if 68 not in versions or 69 not in versions:
        return None
    try:
        response: ConsumerGroupDescribeResponse = await conn.request(
            ConsumerGroupDescribeRequest(group_ids=(group_id,)), timeout_ms
        )
    except UnsupportedVersion:
        return None
    group = next((g for g in response.groups if g.group_id == group_id), None)
    if group is None:
        raise InspectError(f"ConsumerGroupDescribe did not answer for group {group_id!r}")
    if group.error_code in _NOT_A_CONSUMER_GROUP:
        return None
    if _not_ready(_GROUP_READ, group.error_code):
        raise _NotReady(f"ConsumerGroupDescribe: {ErrorCode.describe(group.error_code)}")
    if group.error_code:
        detail = f": {group.error_message}" if group.error_message else ""
        raise InspectError(
            f"ConsumerGroupDescribe for group {group_id!r}: "
            f"{ErrorCode.describe(group.error_code)}{detail}",
            group.error_code,
        )
    return group


def _named(assignment: Iterable[DescribedTopicPartitions]) -> tuple[TopicPartition, ...]:
    """A described assignment's partitions, sorted (a topic the broker cannot name any more
    keeps its id)."""
    return tuple(
        sorted(
            TopicPartition(t.topic_name or str(t.topic_id), p)
            for t in assignment
            for p in t.partitions
        )
    )


def _describe_consumer(
    where: str, group: DescribedConsumerGroup, fetched: OffsetFetchResponse
) -> GroupDescription:
    """A consumer-protocol group: members from ConsumerGroupDescribe, the owner of each
    partition from the members' current assignments, and a row for every partition owned,
    in a target assignment or with a committed offset."""
    if group.state == "Dead":
        raise GroupNotFound(f"group {group.group_id!r} does not exist")
    owned = {m.member_id: _named(m.assignment) for m in group.members}
    targets = {m.member_id: _named(m.target_assignment) for m in group.members}
    members = tuple(
        MemberDescription(
            member_id=m.member_id,
            group_instance_id=m.instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            assignment=tuple(str(tp) for tp in owned[m.member_id]),
            assignment_bytes=0,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            subscription=m.subscribed_topic_names,
            subscribed_topic_regex=m.subscribed_topic_regex or None,  # Kafka sends "" for none
            target_assignment=tuple(str(tp) for tp in targets[m.member_id]),
            member_type=_MEMBER_TYPES.get(m.member_type),
        )
        for m in group.members
    )
    owners = {tp: member for member, tps in owned.items() for tp in tps}
    wanted = set(owners) | {tp for tps in targets.values() for tp in tps}
    return GroupDescription(
        group_id=group.group_id,
        state=group.state,
        protocol_type="consumer",
        protocol=group.assignor_name,
        coordinator=where,
        members=members,
        offsets=_offset_rows(owners, wanted, fetched),
        group_type="consumer",
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
    )


def _with_lag(description: GroupDescription, ends: dict[TopicPartition, int]) -> GroupDescription:
    rows = []
    for o in description.offsets:
        end = ends.get(TopicPartition(o.topic, o.partition))
        lag = None if end is None or o.committed is None else max(0, end - o.committed)
        rows.append(PartitionOffsets(o.topic, o.partition, o.committed, end, lag, o.owner))
    return dataclasses.replace(description, offsets=tuple(rows))
