"""Rack-aware assignment (KIP-881) end to end: kgroup members with ``rack_id`` set, a leader
reading replica racks from a real Metadata response, and the assignment it hands out.

* librdkafka's mock cluster: three brokers on racks r1, r2, r3, one replica per partition;
  members on r1 and r2 each get every partition whose replica is on their rack (without
  racks, ``range`` hands out consecutive blocks instead). Real wire protocol, several racks.
* Apache Kafka: the fixture's broker is single-node, so every partition has the same
  replica racks and Kafka's condition turns rack awareness off: the leader reads
  ``broker.rack`` from the broker's Metadata, and the members on r1 and r2 get plain ranges.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kgroup import GroupConfig, TopicLayout, TopicPartition
from kgroup._runtime._transport import KafkaTransport
from kgroup.testing import KafkaBroker, MockCluster
from kgroup.testing._members import MemberGroup, MemberRunner
from tests.integration.conftest import HasBootstrap, group_config

TIMEOUT = 60.0


async def _layout(config: GroupConfig, topic: str) -> dict[int, frozenset[str]]:
    """Each partition's replica racks, as the leader's transport reads them."""
    transport = KafkaTransport(config)
    try:
        layout = await transport.partitions_for([topic])
    finally:
        await transport.aclose()
    assert isinstance(layout, TopicLayout)
    return {p: layout.replica_racks(topic, p) for p in range(layout[topic])}


async def _group(
    broker: HasBootstrap, group_id: str, topic: str, partitions: int, assignor: str
) -> tuple[MemberGroup, list[MemberRunner]]:
    group = MemberGroup()
    runners = []
    for rack in ("r1", "r2"):
        config = group_config(broker, group_id, topic, rack_id=rack, assignors=[assignor])
        runners.append(await group.start(config, name=rack))
    await group.wait_stable(topic, partitions, timeout=TIMEOUT)
    return group, runners


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
async def test_members_get_the_partitions_on_their_rack_on_the_mock_cluster(
    mock_cluster: MockCluster, make_topic: Callable[..., str], unique_group: str, assignor: str
) -> None:
    for broker_id, rack in zip(mock_cluster.broker_ids, ("r1", "r2", "r3"), strict=True):
        mock_cluster.set_rack(broker_id, rack)
    topic = make_topic(6)
    racks = await _layout(group_config(mock_cluster, unique_group, topic), topic)
    on = {
        rack: {TopicPartition(topic, p) for p, r in racks.items() if rack in r}
        for rack in "r1 r2 r3".split()
    }
    assert all(len(tps) == 2 for tps in on.values()), racks  # the mock spreads replicas evenly
    # Without racks, range would give r1 partitions 0-2 and r2 partitions 3-5.
    assert on["r1"] != {TopicPartition(topic, p) for p in range(3)} or on["r2"] != {
        TopicPartition(topic, p) for p in range(3, 6)
    }
    group, runners = await _group(mock_cluster, unique_group, topic, 6, assignor)
    async with group:
        for runner in runners:
            assert on[runner.name] <= runner.assignment, (runner.name, racks)
            assert len(runner.assignment) == 3


async def test_kafka_broker_rack_reaches_the_leader(
    kafka_broker_factory: Callable[..., KafkaBroker],
    make_topic: Callable[..., str],
    unique_group: str,
) -> None:
    broker = kafka_broker_factory(extra_config={"broker.rack": "r1"})
    topic = make_topic(4, broker=broker)
    racks = await _layout(group_config(broker, unique_group, topic), topic)
    assert racks == {p: frozenset({"r1"}) for p in range(4)}
    group, runners = await _group(broker, unique_group, topic, 4, "range")
    async with group:
        # One broker: every partition has replicas on every rack that any has, so rack
        # awareness stays off (as in Java): plain ranges in member id order, whichever
        # member is on r1.
        ordered = sorted(runners, key=lambda r: r.member.generation.member_id)
        assert [r.assignment for r in ordered] == [
            {TopicPartition(topic, p) for p in range(2)},
            {TopicPartition(topic, p) for p in range(2, 4)},
        ]
