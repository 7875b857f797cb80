"""The KIP-848 ``consumer`` protocol under scripted faults, on librdkafka's mock cluster.

The mock (librdkafka 2.16, bundled with confluent-kafka) serves ConsumerGroupHeartbeat v1,
assigns by a range of its own unless a test scripts the target assignment
(:meth:`~kgroup.testing.MockCluster.set_consumer_target_assignment`), and answers any
request with pushed error codes. Each test below injects one fault of spec §10.7 into a
running GroupMember and checks its reaction end to end: what the listener saw, what the
member sent next, and that it ends STABLE with the partitions it should own. The mock's
own settings: a 500 ms heartbeat interval and a 6 s session.

Every MemberGroup checks on exit that no partition was held by two members at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kgroup import GroupConfig, GroupMember, TopicPartition
from kgroup.testing import MockCluster
from kgroup.testing._members import MemberGroup, MemberRunner, covered

CGHB = 68  # ConsumerGroupHeartbeat

UNKNOWN_MEMBER_ID = 25
NOT_COORDINATOR = 16
COORDINATOR_NOT_AVAILABLE = 15
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
TRANSPORT = -195  # librdkafka: the broker drops the connection instead of answering

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def mock(mock_cluster: MockCluster) -> MockCluster:
    mock_cluster.set_group_consumer_heartbeat_interval_ms(500)
    mock_cluster.set_group_consumer_session_timeout_ms(6_000)
    return mock_cluster


def config(mock: MockCluster, group: str, topic: str, **overrides: Any) -> GroupConfig:
    values: dict[str, Any] = {
        "bootstrap_servers": mock.bootstrap,
        "group_id": group,
        "topics": [topic],
        "group_protocol": "consumer",
        "max_poll_interval_ms": 30_000,
        "request_timeout_ms": 5_000,
        "retry_backoff_ms": 50,
    }
    values.update(overrides)
    return GroupConfig(**values)


def recorder(member: GroupMember, *wanted: str) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []

    def hook(event: str, fields: Mapping[str, Any]) -> None:
        if event in wanted:
            found.append((event, dict(fields)))

    member.add_event_hook(hook)
    return found


def callbacks(runner: MemberRunner, name: str) -> list[frozenset[TopicPartition]]:
    return [e.partitions for e in runner.events if e.callback == name]


def tps(topic: str, *partitions: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, p) for p in partitions)


async def joined(group: MemberGroup, cfg: GroupConfig, topic: str, partitions: int) -> MemberRunner:
    runner = await group.start(cfg)
    await group.wait_until(
        lambda: covered([runner], topic, partitions) and runner.stable,
        timeout=60,
        what="joined and owning every partition",
    )
    return runner


async def test_member_joins_and_resolves_its_assignment(
    mock: MockCluster, make_topic: Callable[..., str], unique_group: str
) -> None:
    """The mock's assignment arrives by topic id; the member resolves it through Metadata
    (whose mock answers carry one harmless extra byte) and owns every partition."""
    topic = make_topic(3, broker=mock)
    async with MemberGroup() as group:
        a = await joined(group, config(mock, unique_group, topic), topic, 3)
        assert callbacks(a, "on_partitions_assigned")[-1] == tps(topic, 0, 1, 2)
        assert a.member.generation.generation_id > 0
