"""The wire layer: kgroup's group messages as aiokafka protocol structs, version by version.

``to_wire(request)`` gives an aiokafka ``Request`` builder for ``AIOKafkaConnection.send``;
its ``prepare`` negotiates the highest version both sides support. ``from_wire(response)``
turns the decoded struct back into a ``kgroup._core._messages`` response value; an answer
that names topics by id (OffsetCommit and OffsetFetch v10) is named again from the request's
``topic_names(request)``. The structs for every version kgroup speaks (FindCoordinator v1-v6,
JoinGroup v2-v9, SyncGroup v0-v5, Heartbeat v0-v4, LeaveGroup v0-v5, OffsetCommit v2-v10,
OffsetFetch v1-v10) are defined in ``_schemas`` from Kafka's JSON schemas.
"""

from kgroup._protocol._requests import (
    MAX_REASON_LENGTH,
    STATIC_MEMBERSHIP_VERSIONS,
    GroupRequest,
    WireRequest,
    choose_version,
    to_wire,
    topic_names,
)
from kgroup._protocol._responses import GroupResponse, from_wire
from kgroup._protocol._versions import API_NAMES, SUPPORTED_VERSIONS

__all__ = [
    "API_NAMES",
    "MAX_REASON_LENGTH",
    "STATIC_MEMBERSHIP_VERSIONS",
    "SUPPORTED_VERSIONS",
    "GroupRequest",
    "GroupResponse",
    "WireRequest",
    "choose_version",
    "from_wire",
    "to_wire",
    "topic_names",
]
