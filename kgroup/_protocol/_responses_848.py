"""Decode the answers of the KIP-848 ``consumer`` protocol member's APIs
(ConsumerGroupHeartbeat, ConsumerGroupDescribe, Metadata with topic ids) into their
version-free values; ``_responses.from_wire`` dispatches to them."""

from __future__ import annotations

from kgroup._core._messages_848 import ConsumerGroupHeartbeatResponse, TopicIdPartitions
from kgroup._core._messages_describe import (
    MEMBER_TYPE_UNKNOWN,
    ConsumerGroupDescribeResponse,
    DescribedConsumerGroup,
    DescribedConsumerMember,
    DescribedTopicPartitions,
)
from kgroup._core._messages_metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataResponse,
    MetadataTopic,
)
from kgroup._protocol._fields import Fields

__all__ = ["consumer_group_describe", "consumer_group_heartbeat", "metadata"]


def consumer_group_heartbeat(fields: Fields, version: int) -> ConsumerGroupHeartbeatResponse:
    """v0 and v1 answer alike; a null ``assignment`` (no change) stays None."""
    assignment = fields.get_nullable_struct("assignment")
    return ConsumerGroupHeartbeatResponse(
        error_code=fields.get_int("error_code"),
        error_message=fields.get_nullable_str("error_message"),
        member_id=fields.get_nullable_str("member_id"),
        member_epoch=fields.get_int("member_epoch"),
        heartbeat_interval_ms=fields.get_int("heartbeat_interval_ms"),
        assignment=(
            None
            if assignment is None
            else tuple(
                TopicIdPartitions(
                    topic_id=topic.get_uuid("topic_id"), partitions=topic.get_ints("partitions")
                )
                for topic in assignment.get_array("topic_partitions")
            )
        ),
        throttle_time_ms=fields.get_int("throttle_time_ms"),
    )


def _described(assignment: Fields) -> tuple[DescribedTopicPartitions, ...]:
    return tuple(
        DescribedTopicPartitions(
            topic_id=topic.get_uuid("topic_id"),
            topic_name=topic.get_str("topic_name"),
            partitions=topic.get_ints("partitions"),
        )
        for topic in assignment.get_array("topic_partitions")
    )


def _member(member: Fields, version: int) -> DescribedConsumerMember:
    return DescribedConsumerMember(
        member_id=member.get_str("member_id"),
        instance_id=member.get_nullable_str("instance_id"),
        rack_id=member.get_nullable_str("rack_id"),
        member_epoch=member.get_int("member_epoch"),
        client_id=member.get_str("client_id"),
        client_host=member.get_str("client_host"),
        subscribed_topic_names=member.get_strs("subscribed_topic_names"),
        subscribed_topic_regex=member.get_nullable_str("subscribed_topic_regex"),
        assignment=_described(member.get_struct("assignment")),
        target_assignment=_described(member.get_struct("target_assignment")),
        member_type=member.get_int("member_type") if version >= 1 else MEMBER_TYPE_UNKNOWN,
    )


def consumer_group_describe(fields: Fields, version: int) -> ConsumerGroupDescribeResponse:
    """v1 adds each member's type; below it ``member_type`` is -1 (unknown)."""
    return ConsumerGroupDescribeResponse(
        groups=tuple(
            DescribedConsumerGroup(
                error_code=group.get_int("error_code"),
                error_message=group.get_nullable_str("error_message"),
                group_id=group.get_str("group_id"),
                state=group.get_str("group_state"),
                group_epoch=group.get_int("group_epoch"),
                assignment_epoch=group.get_int("assignment_epoch"),
                assignor_name=group.get_str("assignor_name"),
                members=tuple(_member(m, version) for m in group.get_array("members")),
                authorized_operations=group.get_int("authorized_operations"),
            )
            for group in fields.get_array("groups")
        ),
        throttle_time_ms=fields.get_int("throttle_time_ms"),
    )


def metadata(fields: Fields, version: int) -> MetadataResponse:
    """A topic's name is nullable from v12 (an unknown id); the top-level error is v13+."""
    return MetadataResponse(
        brokers=tuple(
            MetadataBroker(
                node_id=broker.get_int("node_id"),
                host=broker.get_str("host"),
                port=broker.get_int("port"),
                rack=broker.get_nullable_str("rack"),
            )
            for broker in fields.get_array("brokers")
        ),
        cluster_id=fields.get_nullable_str("cluster_id"),
        controller_id=fields.get_int("controller_id"),
        topics=tuple(
            MetadataTopic(
                error_code=topic.get_int("error_code"),
                name=(topic.get_nullable_str("name") if version >= 12 else topic.get_str("name")),
                topic_id=topic.get_uuid("topic_id"),
                is_internal=topic.get_bool("is_internal"),
                partitions=tuple(
                    MetadataPartition(
                        partition=part.get_int("partition_index"),
                        leader_id=part.get_int("leader_id"),
                        leader_epoch=part.get_int("leader_epoch"),
                        replicas=part.get_ints("replica_nodes"),
                        isr=part.get_ints("isr_nodes"),
                        offline_replicas=part.get_ints("offline_replicas"),
                        error_code=part.get_int("error_code"),
                    )
                    for part in topic.get_array("partitions")
                ),
            )
            for topic in fields.get_array("topics")
        ),
        error_code=fields.get_int("error_code") if version >= 13 else 0,
        throttle_time_ms=fields.get_int("throttle_time_ms"),
    )
