"""Topic ids to names: what a KIP-848 ``consumer`` member needs to act on an assignment.

ConsumerGroupHeartbeat names assigned topics by id only. :func:`resolve_topic_ids` asks one
broker for them with a Metadata request by id (v12+, ``kgroup._core._messages_metadata``)
and answers each id with its name and partition count. An id the broker does not know yet
(UNKNOWN_TOPIC_ID: a topic created moments ago, whose metadata has not reached this broker)
or cannot describe right now (another error, a null name) is reported apart, in
``unresolved``: spec §10.5 keeps such partitions in the target and retries later.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from .._core._messages_metadata import NO_TOPIC_ID, MetadataRequest, MetadataResponse
from .._errors import RemoteProtocolError

__all__ = ["ResolvedTopic", "TopicIdResolution", "resolve_topic_ids", "topic_ids_by_name"]


class _Requester(Protocol):
    async def request(self, message: MetadataRequest, timeout_ms: float) -> MetadataResponse: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedTopic:
    name: str
    partition_count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicIdResolution:
    """``resolved`` by id; ``unresolved`` maps every other asked id to the broker's error
    code for it (0 when it answered no usable name; the top-level error, v13+, or 0 when it
    did not mention the id at all)."""

    resolved: dict[uuid.UUID, ResolvedTopic] = field(default_factory=dict)
    unresolved: dict[uuid.UUID, int] = field(default_factory=dict)


async def resolve_topic_ids(
    conn: _Requester, topic_ids: Iterable[uuid.UUID], *, timeout_ms: float
) -> TopicIdResolution:
    """Names and partition counts of ``topic_ids``, from one Metadata request to ``conn``
    (a :class:`~kgroup._runtime._connection.BrokerConnection`).

    Raises what ``conn.request`` raises: UnsupportedVersion when the broker has no Metadata
    v12 (no lookup by id), CoordinatorError on transport failure, RemoteProtocolError on a
    malformed answer, including one that answers an id with a different topic's id.
    """
    wanted = tuple(dict.fromkeys(topic_ids))
    if not wanted:
        return TopicIdResolution()
    response = await conn.request(MetadataRequest(topic_ids=wanted), timeout_ms)
    if not isinstance(response, MetadataResponse):
        raise RemoteProtocolError(f"Metadata answered with {type(response).__name__}")
    asked = set(wanted)
    resolved: dict[uuid.UUID, ResolvedTopic] = {}
    unresolved: dict[uuid.UUID, int] = {}
    for topic in response.topics:
        if topic.topic_id not in asked:
            raise RemoteProtocolError(
                f"Metadata v12+ response names topic id {topic.topic_id}, which was not asked for"
            )
        if topic.error_code == 0 and topic.name:
            resolved[topic.topic_id] = ResolvedTopic(
                name=topic.name, partition_count=len(topic.partitions)
            )
        else:
            unresolved[topic.topic_id] = topic.error_code
    for topic_id in wanted:
        if topic_id not in resolved and topic_id not in unresolved:
            unresolved[topic_id] = response.error_code
    return TopicIdResolution(resolved=resolved, unresolved=unresolved)


async def topic_ids_by_name(
    conn: _Requester, names: Iterable[str], *, timeout_ms: float
) -> dict[uuid.UUID, str]:
    """The ids of the topics ``names`` (those the broker knows), from one Metadata request
    by name (v10+, whose answer carries topic ids). A member resolves its assignment this
    way first: it names the topics it subscribes to, so no lookup by id (v12+) is needed
    for them, and a broker that answers v12+ badly (librdkafka's mock cluster) is served
    at a lower version."""
    wanted = tuple(dict.fromkeys(names))
    if not wanted:
        return {}
    response = await conn.request(MetadataRequest(topics=wanted), timeout_ms)
    if not isinstance(response, MetadataResponse):
        raise RemoteProtocolError(f"Metadata answered with {type(response).__name__}")
    return {
        topic.topic_id: topic.name
        for topic in response.topics
        if topic.error_code == 0 and topic.name and topic.topic_id != NO_TOPIC_ID
    }
