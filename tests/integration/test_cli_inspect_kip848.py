"""``kgroup groups`` and ``kgroup describe`` on a KIP-848 ``consumer`` group, Kafka 4.4.0.

Two kgroup members on the consumer protocol (one static, on a rack) share a 4-partition
topic with records and committed offsets, next to a classic group on the same topic. The
inspection must describe the consumer group through ConsumerGroupDescribe (type, state,
epochs, assignor; per member its ids, rack, client, epoch, subscription, assignment and
target assignment), with the committed offsets, log end offsets, lag and owners computed
as for classic groups, as text and as JSON; and ``groups`` must list both groups with
their type. The classic group is still described the classic way.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from kgroup import GroupConfig, GroupMember, TopicPartition
from kgroup._inspect import GroupNotFound, describe_group, list_groups
from kgroup._runtime._offsets import commit_offsets
from kgroup.testing import KafkaBroker
from tests.integration.test_cli_inspect import (
    COMMITTED,
    PARTITIONS,
    RECORDS_PER_PARTITION,
    cli,
    produce,
)


def consumer_config(broker: KafkaBroker, group: str, topic: str, **extra: Any) -> GroupConfig:
    return GroupConfig(
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        topics=[topic],
        group_protocol="consumer",
        max_poll_interval_ms=30_000,
        request_timeout_ms=10_000,
        **extra,
    )


async def started(*configs: GroupConfig) -> list[GroupMember]:
    """Members that together own every partition, each some, with offsets committed."""
    members: list[GroupMember] = []
    try:
        for config in configs:
            member = GroupMember(config)
            await member.start()
            members.append(member)

        def covered() -> bool:
            owned = [tp for m in members for tp in m.assignment]
            return len(owned) == len(set(owned)) == PARTITIONS and all(
                m.assignment for m in members
            )

        async with asyncio.timeout(60):
            while not covered():
                await asyncio.gather(*(m.poll(timeout=0.2) for m in members))
        for m in members:
            await commit_offsets(m, dict.fromkeys(m.assignment, COMMITTED))
    except BaseException:
        for m in members:
            await m.close()
        raise
    return members


async def test_describe_and_list_a_consumer_protocol_group(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(PARTITIONS)
    await produce(kafka_broker.bootstrap, topic)
    group = unique_group
    classic_group = f"{unique_group}-classic"
    members = await started(
        consumer_config(
            kafka_broker, group, topic, client_id="cg-static", group_instance_id="inst-1"
        ),
        consumer_config(kafka_broker, group, topic, client_id="cg-rack", rack_id="rack-b"),
    )
    classic = GroupMember(
        GroupConfig(
            bootstrap_servers=kafka_broker.bootstrap,
            group_id=classic_group,
            topics=[topic],
            session_timeout_ms=6_000,
            heartbeat_interval_ms=500,
        )
    )
    stop = asyncio.Event()

    async def keep_polling(m: GroupMember) -> None:
        while not stop.is_set():
            await m.poll(timeout=0.2)

    try:
        await classic.start()
        async with asyncio.timeout(60):
            while not classic.assignment:
                await classic.poll(timeout=0.2)
        pollers = [asyncio.create_task(keep_polling(m)) for m in (*members, classic)]
        try:
            desc = await describe_group(kafka_broker.bootstrap, group)
            classic_desc = await describe_group(kafka_broker.bootstrap, classic_group)
            listing = await list_groups(kafka_broker.bootstrap)
            text, as_json, groups_text = await asyncio.gather(
                asyncio.to_thread(cli, "describe", group, "--bootstrap", kafka_broker.bootstrap),
                asyncio.to_thread(
                    cli, "describe", group, "--bootstrap", kafka_broker.bootstrap, "--json"
                ),
                asyncio.to_thread(cli, "groups", "--bootstrap", kafka_broker.bootstrap),
            )
        finally:
            stop.set()
            await asyncio.gather(*pollers)
        held = {m.member_id: m.assignment for m in members}
        epochs = {m.member_id: m.generation.generation_id for m in members}
    finally:
        for m in (*members, classic):
            await m.close()

    # The group, as ConsumerGroupDescribe tells it.
    assert desc.group_type == "consumer" and desc.protocol_type == "consumer"
    assert desc.state == "Stable"
    assert desc.protocol == "uniform"  # the broker's default assignor
    assert desc.group_epoch is not None and desc.group_epoch > 0
    assert desc.assignment_epoch is not None and 0 < desc.assignment_epoch <= desc.group_epoch
    by_id = {m.member_id: m for m in desc.members}
    assert set(by_id) == set(held)
    static, racked = (by_id[m.member_id] for m in members)
    assert (static.group_instance_id, static.client_id, static.rack_id) == (
        "inst-1",
        "cg-static",
        None,
    )
    assert (racked.group_instance_id, racked.client_id, racked.rack_id) == (
        None,
        "cg-rack",
        "rack-b",
    )
    for member_id, assignment in held.items():
        shown = by_id[member_id]
        expected = tuple(str(tp) for tp in sorted(assignment))
        assert shown.assignment == expected
        assert shown.target_assignment == expected  # stable: nothing left to reconcile
        assert shown.member_epoch == epochs[member_id]
        assert shown.subscription == (topic,) and shown.subscribed_topic_regex is None
        assert shown.member_type == "consumer"
        assert shown.client_host.endswith("127.0.0.1")

    # Offsets and lag, computed as for a classic group.
    owners = {tp: member_id for member_id, tps in held.items() for tp in tps}
    assert len(desc.offsets) == PARTITIONS
    for row in desc.offsets:
        assert row.committed == COMMITTED
        assert row.log_end == RECORDS_PER_PARTITION
        assert row.lag == RECORDS_PER_PARTITION - COMMITTED
        assert row.owner == owners[TopicPartition(row.topic, row.partition)]

    # The classic group next to it is still described by DescribeGroups.
    assert classic_desc.group_type == "classic" and classic_desc.protocol == "range"
    assert classic_desc.group_epoch is None and classic_desc.members[0].member_epoch is None
    assert classic_desc.members[0].assignment == tuple(
        str(TopicPartition(topic, p)) for p in range(PARTITIONS)
    )

    # groups: both, each with its type (ListGroups v5).
    listed = {g.group_id: g for g in listing}
    assert (listed[group].group_type, listed[group].protocol_type) == ("consumer", "consumer")
    assert (listed[classic_group].group_type, listed[classic_group].state) == (
        "classic",
        "Stable",
    )
    assert groups_text.returncode == 0, groups_text.stderr
    lines = {line.split()[0]: line.split() for line in groups_text.stdout.splitlines()}
    assert lines["GROUP"][:3] == ["GROUP", "TYPE", "STATE"]
    assert lines[group][1:3] == ["consumer", "Stable"]
    assert lines[classic_group][1:3] == ["classic", "Stable"]

    # describe, as text...
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert out.startswith(f"GROUP {group}  TYPE consumer  STATE Stable  GROUP-EPOCH ")
    assert "ASSIGNOR uniform" in out and "MEMBERS 2" in out
    for header in ("RACK", "EPOCH", "SUBSCRIPTION", "TARGET-ASSIGNMENT", "LAG"):
        assert header in out
    for member_id, assignment in held.items():
        (line,) = [x for x in out.splitlines() if x.startswith(member_id)]
        assert ",".join(str(tp) for tp in sorted(assignment)) in line and "(same)" in line
    assert "rack-b" in out and "inst-1" in out

    # ... and as JSON.
    assert as_json.returncode == 0, as_json.stderr
    data: dict[str, Any] = json.loads(as_json.stdout)
    assert data["group_type"] == "consumer" and data["state"] == "Stable"
    assert data["group_epoch"] == desc.group_epoch
    assert data["assignment_epoch"] == desc.assignment_epoch
    members_json = {m["member_id"]: m for m in data["members"]}
    assert set(members_json) == set(held)
    for member_id, assignment in held.items():
        m = members_json[member_id]
        assert m["assignment"] == m["target_assignment"] == [str(tp) for tp in sorted(assignment)]
        assert m["subscription"] == [topic] and m["member_type"] == "consumer"
        assert m["member_epoch"] == epochs[member_id]
    assert sorted(o["lag"] for o in data["offsets"]) == [RECORDS_PER_PARTITION - COMMITTED] * 4


async def test_an_empty_consumer_group_and_an_unknown_one(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """After its last member left, a consumer-protocol group is still there (Empty, its
    committed offsets kept, no lag owner); a group id nobody used is not (exit code 4)."""
    topic = make_topic(PARTITIONS)
    await produce(kafka_broker.bootstrap, topic)
    (member,) = await started(consumer_config(kafka_broker, unique_group, topic))
    await member.close()
    desc = await describe_group(kafka_broker.bootstrap, unique_group)
    assert (desc.group_type, desc.state, desc.members) == ("consumer", "Empty", ())
    assert [(o.committed, o.lag, o.owner) for o in desc.offsets] == [
        (COMMITTED, RECORDS_PER_PARTITION - COMMITTED, None)
    ] * PARTITIONS
    text = await asyncio.to_thread(
        cli, "describe", unique_group, "--bootstrap", kafka_broker.bootstrap
    )
    assert text.returncode == 0 and "STATE Empty" in text.stdout and "MEMBERS 0" in text.stdout

    nobody = f"{unique_group}-nobody"
    try:
        await describe_group(kafka_broker.bootstrap, nobody)
    except GroupNotFound:
        pass
    else:
        raise AssertionError("an unknown group was described")
