"""The group APIs kgroup speaks: their names, the versions it implements, and the first
flexible (KIP-482) version of each."""

from __future__ import annotations

from typing import Final

__all__ = ["API_NAMES", "FLEXIBLE_FROM", "SUPPORTED_VERSIONS", "api_label"]

#: The group APIs kgroup speaks, by API key.
API_NAMES: Final[dict[int, str]] = {
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
}

#: The versions kgroup implements, per API key, inclusive (spec section 4.8).
#: FindCoordinator v0 (no key type) and JoinGroup v0-v1 (no rebalance timeout, no throttle
#: time) are left out: Kafka 4.0 removed them (KIP-896) and every broker since 2.0 has more.
#: FindCoordinator v5 and v6 have the v4 layout: they only add error codes and key types that
#: a group lookup never meets, so the newest broker gets the newest version.
#: OffsetCommit starts at v2 and OffsetFetch at v1 (spec §4.8); both stop before the KIP-848
#: versions (OffsetCommit v9, OffsetFetch v9), which carry a member epoch kgroup has no use
#: for under the classic protocol.
SUPPORTED_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    8: (2, 8),
    9: (1, 8),
    10: (1, 6),
    11: (2, 9),
    12: (0, 4),
    13: (0, 5),
    14: (0, 5),
    15: (0, 5),
    16: (0, 4),
}

#: The first flexible (KIP-482) version of each API.
FLEXIBLE_FROM: Final[dict[int, int]] = {
    8: 8,
    9: 6,
    10: 3,
    11: 6,
    12: 4,
    13: 4,
    14: 4,
    15: 5,
    16: 3,
}


def api_label(api_key: int, version: int) -> str:
    """``"JoinGroup v9"``: how errors name a request or response."""
    return f"{API_NAMES.get(api_key, f'API {api_key}')} v{version}"
