"""``kgroup groups`` and ``kgroup describe`` against Apache Kafka and tansu.

Two kgroup members share a 4-partition topic with records in it and committed offsets;
the inspection must show both members with their decoded assignments, the committed
offsets, log end offsets, lag and owners, as text and as JSON; and fail with the
documented exit codes for an unknown group and an unreachable broker.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from kgroup import GroupConfig, GroupMember, TopicPartition
from kgroup._inspect import GroupNotFound, describe_group, list_groups
from kgroup._runtime._offsets import commit_offsets
from kgroup.testing import Broker
from kgroup.testing._ports import free_port

pytestmark = pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True)

PARTITIONS = 4
RECORDS_PER_PARTITION = 10
COMMITTED = 3


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kgroup", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


async def produce(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        # One record per batch: tansu (0.6) answers ListOffsets(latest) with the last
        # batch's base offset + 1 (a single 10-record batch gives 1, not 10), so batching
        # here would make the expected lag broker-specific.
        for partition in range(PARTITIONS):
            for i in range(RECORDS_PER_PARTITION):
                await producer.send_and_wait(topic, f"v{i}".encode(), partition=partition)
    finally:
        await producer.stop()


async def two_members_with_commits(
    broker: Broker, group: str, topic: str, stack: list[GroupMember]
) -> list[GroupMember]:
    config = GroupConfig(
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        topics=[topic],
        client_id="inspect-test",
        session_timeout_ms=6_000,
        heartbeat_interval_ms=500,
    )
    members = [GroupMember(config), GroupMember(config)]
    for m in members:
        await m.start()
        stack.append(m)

    def covered() -> bool:
        owned = [tp for m in members for tp in m.assignment]
        return len(owned) == len(set(owned)) == PARTITIONS and all(m.assignment for m in members)

    async with asyncio.timeout(60):
        while not covered():
            await asyncio.gather(*(m.poll(timeout=0.2) for m in members))
    for m in members:
        await commit_offsets(m, dict.fromkeys(m.assignment, COMMITTED))
    return members


async def test_describe_shows_members_assignments_offsets_and_lag(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(PARTITIONS)
    await produce(broker.bootstrap, topic)
    stack: list[GroupMember] = []
    try:
        members = await two_members_with_commits(broker, unique_group, topic, stack)

        # Keep heartbeating while the CLI runs in a subprocess.
        stop = asyncio.Event()

        async def keep_polling(m: GroupMember) -> None:
            while not stop.is_set():
                await m.poll(timeout=0.2)

        pollers = [asyncio.create_task(keep_polling(m)) for m in members]
        try:
            desc = await describe_group(broker.bootstrap, unique_group)
            text, as_json = await asyncio.gather(
                asyncio.to_thread(cli, "describe", unique_group, "--bootstrap", broker.bootstrap),
                asyncio.to_thread(
                    cli, "describe", unique_group, "--bootstrap", broker.bootstrap, "--json"
                ),
            )
            listing = await list_groups(broker.bootstrap)
            groups_text = await asyncio.to_thread(cli, "groups", "--bootstrap", broker.bootstrap)
        finally:
            stop.set()
            await asyncio.gather(*pollers)
        held = {m.member_id: m.assignment for m in members}  # before close() forgets them
    finally:
        for m in stack:
            await m.close()

    kafka = type(broker).__name__ == "KafkaBroker"
    assert desc.state == "Stable" and desc.protocol_type == "consumer"
    # tansu (0.6) leaves the protocol name, the members' client ids and their assignments
    # of a described group empty; Kafka gives all three.
    assert desc.protocol == ("range" if kafka else "")
    by_id = {m.member_id: m for m in desc.members}
    assert set(by_id) == set(held)
    for member_id, assignment in held.items():
        shown = by_id[member_id]
        expected = tuple(str(tp) for tp in sorted(assignment)) if kafka else ()
        assert shown.assignment == expected
        assert shown.client_id == ("inspect-test" if kafka else "")
    assert len(desc.offsets) == PARTITIONS
    owners = {tp: member_id for member_id, tps in held.items() for tp in tps} if kafka else {}
    for row in desc.offsets:
        assert row.committed == COMMITTED
        assert row.log_end == RECORDS_PER_PARTITION
        assert row.lag == RECORDS_PER_PARTITION - COMMITTED
        assert row.owner == owners.get(TopicPartition(row.topic, row.partition))

    assert text.returncode == 0, text.stderr
    for member_id in held:
        assert member_id in text.stdout
    assert "LAG" in text.stdout and "Stable" in text.stdout

    assert as_json.returncode == 0, as_json.stderr
    data: dict[str, Any] = json.loads(as_json.stdout)
    assert data["group_id"] == unique_group and data["state"] == "Stable"
    assert {m["member_id"] for m in data["members"]} == set(by_id)
    assert sorted(o["lag"] for o in data["offsets"]) == [RECORDS_PER_PARTITION - COMMITTED] * 4

    assert unique_group in {g.group_id for g in listing}
    listed = next(g for g in listing if g.group_id == unique_group)
    assert listed.protocol_type == "consumer"
    assert groups_text.returncode == 0 and unique_group in groups_text.stdout


async def test_unknown_group_exit_code(broker: Broker, unique_group: str) -> None:
    with pytest.raises(GroupNotFound):
        await describe_group(broker.bootstrap, unique_group + "-nobody")
    result = await asyncio.to_thread(
        cli, "describe", unique_group + "-nobody", "--bootstrap", broker.bootstrap
    )
    assert result.returncode == 4, (result.stdout, result.stderr)
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr


async def test_unreachable_broker_exit_code_is_fast(broker: Broker) -> None:
    port = free_port()  # nothing listens there
    started = time.monotonic()
    result = await asyncio.to_thread(
        cli, "describe", "g", "--bootstrap", f"127.0.0.1:{port}", "--timeout", "5"
    )
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert f"127.0.0.1:{port}" in result.stderr and "Traceback" not in result.stderr
    result = await asyncio.to_thread(cli, "groups", "--bootstrap", f"127.0.0.1:{port}")
    assert result.returncode == 3
    assert time.monotonic() - started < 30
