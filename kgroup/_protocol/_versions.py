"""The APIs kgroup speaks: their names, the versions it implements, and the first flexible
(KIP-482) version of each."""

from __future__ import annotations

from typing import Final

__all__ = [
    "ALL_VERSIONS",
    "API_NAMES",
    "CONSUMER_PROTOCOL_VERSIONS",
    "FLEXIBLE_FROM",
    "SUPPORTED_VERSIONS",
    "api_label",
]

#: The APIs kgroup speaks, by API key.
API_NAMES: Final[dict[int, str]] = {
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    32: "DescribeConfigs",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
}

#: The versions kgroup implements, per API key, inclusive (spec section 4.8).
#: FindCoordinator v0 (no key type) and JoinGroup v0-v1 (no rebalance timeout, no throttle
#: time) are left out: Kafka 4.0 removed them (KIP-896) and every broker since 2.0 has more.
#: FindCoordinator v5 and v6 have the v4 layout: they only add error codes and key types that
#: a group lookup never meets, so the newest broker gets the newest version.
#: OffsetCommit starts at v2 and OffsetFetch at v1 (spec §4.8); both go up to v10 (topic ids
#: instead of names, Kafka 4.2), which only a consumer-protocol member's request that names
#: every topic's id reaches (``OffsetCommitRequest.topic_ids``); v9 is the KIP-848 version
#: (a member epoch and member id). A classic member's commit is capped at v8 by its request value
#: (``OffsetCommitRequest.max_version``): v9 answers a commit to a group the coordinator no
#: longer has with GROUP_ID_NOT_FOUND where v8 answers ILLEGAL_GENERATION
#: (``OffsetMetadataManager.validateOffsetCommit``, Kafka 4.4.0). OffsetFetch v9 with no
#: member id and epoch -1 is what the broker makes of a v8 request, so every fetch uses it.
#: ListGroups v5 (KIP-848) names each group's type (classic, consumer, share, streams).
SUPPORTED_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    8: (2, 10),
    9: (1, 10),
    10: (1, 6),
    11: (2, 9),
    12: (0, 4),
    13: (0, 5),
    14: (0, 5),
    15: (0, 5),
    16: (0, 5),
}

#: The APIs of the KIP-848 ``consumer`` protocol member, kept apart from the classic group
#: APIs above because not every broker kgroup supports offers them (tansu has no
#: ConsumerGroupHeartbeat): ConsumerGroupHeartbeat v0-v1 (v1, with client-generated member
#: ids, KIP-1082, is the minimum the member negotiates; v0 is defined for completeness),
#: ConsumerGroupDescribe v0-v1, and Metadata v10-v13, the versions that answer with topic
#: ids (v12 is the first that looks topics up by id; v13 adds a top-level error code), and
#: DescribeConfigs v1-v4, which reads a group's ``consumer.session.timeout.ms`` for the
#: lease (v0 left Kafka 4.0, KIP-896; v4 is flexible).
CONSUMER_PROTOCOL_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    3: (10, 13),
    32: (1, 4),
    68: (0, 1),
    69: (0, 1),
}

#: Every API and version kgroup's wire layer implements.
ALL_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    **SUPPORTED_VERSIONS,
    **CONSUMER_PROTOCOL_VERSIONS,
}

#: The first flexible (KIP-482) version of each API.
FLEXIBLE_FROM: Final[dict[int, int]] = {
    3: 9,
    8: 8,
    9: 6,
    10: 3,
    11: 6,
    12: 4,
    13: 4,
    14: 4,
    15: 5,
    16: 3,
    32: 4,
    68: 0,
    69: 0,
}


def api_label(api_key: int, version: int) -> str:
    """``"JoinGroup v9"``: how errors name a request or response."""
    return f"{API_NAMES.get(api_key, f'API {api_key}')} v{version}"
