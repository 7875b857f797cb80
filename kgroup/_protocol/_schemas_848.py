"""The wire schemas of the KIP-848 ``consumer`` protocol member's APIs: ConsumerGroupHeartbeat,
ConsumerGroupDescribe, and Metadata with topic ids, written as in ``_schemas`` (one function
per API and direction, fields in wire order, each guarded by its JSON version range)."""

# Checked against Kafka 4.4.0: the JSON message schemas
# (``clients/src/main/resources/common/message/<Name>{Request,Response}.json``) and the
# ``<Name>Data.SCHEMAS`` of the 4.4.0 kafka-clients jar, which list every field, its type
# and its nullability per version. All three APIs are flexible in every version kgroup
# speaks. ``_schemas`` registers these functions with the classic group APIs'.

from __future__ import annotations

from typing import Any

from kgroup._protocol._primitives import (
    Boolean,
    Format,
    Int8,
    Int16,
    Int32,
    Uuid,
    since,
    until,
)

__all__ = [
    "consumer_group_describe_request",
    "consumer_group_describe_response",
    "consumer_group_heartbeat_request",
    "consumer_group_heartbeat_response",
    "metadata_request",
    "metadata_response",
]

_FLEXIBLE = Format(flexible=True)


# ConsumerGroupHeartbeat (68). v1 adds subscribed_topic_regex, after the topic names, and
# requires a client-generated member id (KIP-1082); the response is the same in v0 and v1.
# Every optional request field is nullable ("unchanged since the last heartbeat");
# ``assignment`` in the response is a nullable struct ("no change").


def consumer_group_heartbeat_request(v: int) -> Any:
    f = _FLEXIBLE
    return f.struct(
        ("group_id", f.string),
        ("member_id", f.string),
        ("member_epoch", Int32),
        ("instance_id", f.string),
        ("rack_id", f.string),
        ("rebalance_timeout_ms", Int32),
        ("subscribed_topic_names", f.array_of(f.string)),
        *since(v, 1, ("subscribed_topic_regex", f.string)),
        ("server_assignor", f.string),
        ("topic_partitions", f.array(("topic_id", Uuid), ("partitions", f.array_of(Int32)))),
    )


def consumer_group_heartbeat_response(v: int) -> Any:
    f = _FLEXIBLE
    return f.struct(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("error_message", f.string),
        ("member_id", f.string),
        ("member_epoch", Int32),
        ("heartbeat_interval_ms", Int32),
        (
            "assignment",
            f.nullable_struct(
                (
                    "topic_partitions",
                    f.array(("topic_id", Uuid), ("partitions", f.array_of(Int32))),
                ),
            ),
        ),
    )


# ConsumerGroupDescribe (69). v1 adds members[].member_type (KIP-1099: -1 unknown, 0
# classic, 1 consumer); the request is the same in v0 and v1. A member's assignment and
# target assignment are (non-nullable) structs naming each topic by id and by name.


def consumer_group_describe_request(v: int) -> Any:
    f = _FLEXIBLE
    return f.struct(
        ("group_ids", f.array_of(f.string)),
        ("include_authorized_operations", Boolean),
    )


def _described_assignment(f: Format) -> Any:
    return f.struct(
        (
            "topic_partitions",
            f.array(
                ("topic_id", Uuid),
                ("topic_name", f.string),
                ("partitions", f.array_of(Int32)),
            ),
        ),
    )


def consumer_group_describe_response(v: int) -> Any:
    f = _FLEXIBLE
    return f.struct(
        ("throttle_time_ms", Int32),
        (
            "groups",
            f.array(
                ("error_code", Int16),
                ("error_message", f.string),
                ("group_id", f.string),
                ("group_state", f.string),
                ("group_epoch", Int32),
                ("assignment_epoch", Int32),
                ("assignor_name", f.string),
                (
                    "members",
                    f.array(
                        ("member_id", f.string),
                        ("instance_id", f.string),
                        ("rack_id", f.string),
                        ("member_epoch", Int32),
                        ("client_id", f.string),
                        ("client_host", f.string),
                        ("subscribed_topic_names", f.array_of(f.string)),
                        ("subscribed_topic_regex", f.string),
                        ("assignment", _described_assignment(f)),
                        ("target_assignment", _described_assignment(f)),
                        *since(v, 1, ("member_type", Int8)),
                    ),
                ),
                ("authorized_operations", Int32),
            ),
        ),
    )


# Metadata (3), from v10, the first version whose response carries each topic's id. v10
# adds topics[].topic_id to the request too (and makes its name nullable), but brokers look
# topics up by id only from v12; v11 drops include_cluster_authorized_operations from the
# request and cluster_authorized_operations from the response; v12 makes the response's
# topic name nullable (a topic asked for by an id the broker does not know); v13 adds a
# top-level error code (KIP-1102).


def metadata_request(v: int) -> Any:
    f = _FLEXIBLE
    return f.struct(
        ("topics", f.array(("topic_id", Uuid), ("name", f.string))),
        ("allow_auto_topic_creation", Boolean),
        *until(v, 10, ("include_cluster_authorized_operations", Boolean)),
        ("include_topic_authorized_operations", Boolean),
    )


def metadata_response(v: int) -> Any:
    f = _FLEXIBLE
    return f.struct(
        ("throttle_time_ms", Int32),
        (
            "brokers",
            f.array(("node_id", Int32), ("host", f.string), ("port", Int32), ("rack", f.string)),
        ),
        ("cluster_id", f.string),
        ("controller_id", Int32),
        (
            "topics",
            f.array(
                ("error_code", Int16),
                ("name", f.string),
                ("topic_id", Uuid),
                ("is_internal", Boolean),
                (
                    "partitions",
                    f.array(
                        ("error_code", Int16),
                        ("partition_index", Int32),
                        ("leader_id", Int32),
                        ("leader_epoch", Int32),
                        ("replica_nodes", f.array_of(Int32)),
                        ("isr_nodes", f.array_of(Int32)),
                        ("offline_replicas", f.array_of(Int32)),
                    ),
                ),
                ("topic_authorized_operations", Int32),
            ),
        ),
        *until(v, 10, ("cluster_authorized_operations", Int32)),
        *since(v, 13, ("error_code", Int16)),
    )
