"""Version-free values of Metadata (API key 3) with topic ids, as the KIP-848 ``consumer``
protocol member needs them: an assignment names topics by id, and Metadata v12+ looks them
up by id (``kgroup._runtime._topic_ids``).

The wire layer (``kgroup._protocol``) speaks Metadata v10-v13 for these values (the versions
whose answer carries topic ids); a lookup by id needs v12.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Final

__all__ = [
    "NO_TOPIC_ID",
    "MetadataBroker",
    "MetadataPartition",
    "MetadataRequest",
    "MetadataResponse",
    "MetadataTopic",
]

#: The zero uuid: "no topic id" (a topic asked for by name, or a broker without ids).
NO_TOPIC_ID: Final = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRequest:
    """Metadata for ``topics`` (by name) and ``topic_ids`` (by id, v12+). Both None: every
    topic; an empty tuple: none (only the brokers). Topics are never created by it unless
    ``allow_auto_topic_creation``."""

    topics: tuple[str, ...] | None = None
    topic_ids: tuple[uuid.UUID, ...] | None = None
    allow_auto_topic_creation: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataBroker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataPartition:
    partition: int
    leader_id: int
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataTopic:
    """One topic; ``name`` is None (v12+) for an id the broker does not know, which then
    answers UNKNOWN_TOPIC_ID (100)."""

    error_code: int
    name: str | None
    topic_id: uuid.UUID
    is_internal: bool = False
    partitions: tuple[MetadataPartition, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponse:
    brokers: tuple[MetadataBroker, ...] = ()
    cluster_id: str | None = None
    controller_id: int = -1
    topics: tuple[MetadataTopic, ...] = ()
    #: The top-level error (v13+, REBOOTSTRAP_REQUIRED); topics carry their own.
    error_code: int = 0
    throttle_time_ms: int = 0
