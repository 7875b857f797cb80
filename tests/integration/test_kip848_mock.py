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


@pytest.mark.parametrize(
    "code", [FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID], ids=["fenced", "unknown"]
)
async def test_fenced_member_loses_its_partitions_and_rejoins(
    mock: MockCluster, make_topic: Callable[..., str], unique_group: str, code: int
) -> None:
    """§10.7: FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID on a heartbeat: every partition is
    lost (``on_partitions_lost``, not revoked), and the member rejoins with epoch 0 and a
    full heartbeat, getting its partitions back."""
    topic = make_topic(3, broker=mock)
    async with MemberGroup() as group:
        a = await joined(group, config(mock, unique_group, topic), topic, 3)
        seen = recorder(a.member, "member.fenced")
        revoked_before = len(callbacks(a, "on_partitions_revoked"))
        mock.push_request_errors(CGHB, code)
        await group.wait_until(
            lambda: (
                bool(callbacks(a, "on_partitions_lost")) and covered([a], topic, 3) and a.stable
            ),
            timeout=60,
            what="lost, then owning every partition again",
        )
        assert callbacks(a, "on_partitions_lost") == [tps(topic, 0, 1, 2)]
        assert len(callbacks(a, "on_partitions_revoked")) == revoked_before
        assert len(seen) == 1 and str(code) in seen[0][1]["reason"]
        assert callbacks(a, "on_partitions_assigned")[-1] == tps(topic, 0, 1, 2)
        assert not a.errors


async def test_static_member_retries_an_unreleased_instance_id(
    mock: MockCluster, make_topic: Callable[..., str], unique_group: str
) -> None:
    """Deviation 16: UNRELEASED_INSTANCE_ID on a static member's join is retried (its own
    earlier incarnation may still hold the id) and, once the broker lets it in, the member
    joins with nothing raised from poll()."""
    topic = make_topic(2, broker=mock)
    cfg = config(mock, unique_group, topic, group_instance_id="static-1")
    mock.push_request_errors(CGHB, *[UNRELEASED_INSTANCE_ID] * 3)
    async with MemberGroup() as group:
        runner = MemberRunner(group, cfg, name="static")
        seen = recorder(runner.member, "member.heartbeat_failed")
        group.runners.append(runner)
        await runner.start()
        await group.wait_until(
            lambda: covered([runner], topic, 2) and runner.stable, timeout=60, what="joined"
        )
        assert not runner.errors
        assert len(seen) == 3
        assert all("UNRELEASED_INSTANCE_ID" in fields["error"] for _, fields in seen)


async def test_unreleased_instance_id_for_two_sessions_is_fatal(
    mock: MockCluster, make_topic: Callable[..., str], unique_group: str
) -> None:
    """Deviation 16's limit: once UNRELEASED_INSTANCE_ID answers have come for two session
    timeouts in a row (here 2 x the 2 s the user gives, since the mock does not describe
    group configs), the error is fatal and raised from poll(), naming the error."""
    topic = make_topic(2, broker=mock)
    cfg = config(
        mock, unique_group, topic, group_instance_id="static-1", consumer_session_timeout_ms=2_000
    )
    mock.push_request_errors(CGHB, *[UNRELEASED_INSTANCE_ID] * 500)
    try:
        async with MemberGroup() as group:
            runner = await group.start(cfg, stop_on_error=True)
            await group.wait_until(lambda: bool(runner.errors), timeout=60, what="a fatal error")
            assert "UNRELEASED_INSTANCE_ID" in str(runner.errors[0])
            assert runner.assignment == frozenset()
    finally:
        mock.clear_request_errors(CGHB)


async def test_coordinator_move_keeps_the_assignment(
    mock: MockCluster, make_topic: Callable[..., str], unique_group: str
) -> None:
    """The group's coordinator moves to another broker: the old one answers
    NOT_COORDINATOR, the member finds the new one and goes on heartbeating there with its
    partitions kept (nothing revoked or lost)."""
    topic = make_topic(3, broker=mock)
    mock.set_coordinator(unique_group, 1)
    async with MemberGroup() as group:
        a = await joined(group, config(mock, unique_group, topic), topic, 3)
        found = recorder(a.member, "member.coordinator_found", "member.heartbeat_ok")
        assigned = len(callbacks(a, "on_partitions_assigned"))
        mock.set_coordinator(unique_group, 2)
        await group.wait_until(
            lambda: (
                any(
                    name == "member.coordinator_found" and fields["node_id"] == 2
                    for name, fields in found
                )
                and found[-1][0] == "member.heartbeat_ok"
            ),
            timeout=60,
            what="heartbeats answered by broker 2",
        )
        assert a.stable and covered([a], topic, 3)
        assert not callbacks(a, "on_partitions_lost") and not callbacks(a, "on_partitions_revoked")
        assert len(callbacks(a, "on_partitions_assigned")) == assigned


@pytest.mark.parametrize("fault", ["dropped connection", "late answer"])
async def test_lost_heartbeat_answer_keeps_the_assignment(
    mock: MockCluster, make_topic: Callable[..., str], unique_group: str, fault: str
) -> None:
    """A heartbeat's answer never arrives: the broker drops the connection, or answers
    after the request timeout. The member reconnects and sends a full heartbeat (§10.2:
    forget what was sent after any error) within the session, and keeps its partitions."""
    topic = make_topic(3, broker=mock)
    mock.set_coordinator(unique_group, 1)
    cfg = config(mock, unique_group, topic, request_timeout_ms=1_500)
    async with MemberGroup() as group:
        a = await joined(group, cfg, topic, 3)
        seen = recorder(a.member, "member.heartbeat_failed", "member.heartbeat_ok")
        if fault == "dropped connection":
            mock.push_request_errors(CGHB, TRANSPORT)
        else:
            mock.broker_push_request_error_rtts(1, CGHB, [(0, 3_000)])

        def recovered() -> bool:
            names = [name for name, _ in seen]
            if "member.heartbeat_failed" not in names:
                return False
            after = names[names.index("member.heartbeat_failed") :]
            return after.count("member.heartbeat_ok") >= 2

        await group.wait_until(
            recovered,
            timeout=60,
            what="a failed heartbeat, then two answered",
        )
        assert a.stable and covered([a], topic, 3)
        assert not callbacks(a, "on_partitions_lost") and not callbacks(a, "on_partitions_revoked")


async def test_scripted_move_revokes_before_the_other_member_gets_it(
    mock: MockCluster, make_topic: Callable[..., str], unique_group: str
) -> None:
    """A target assignment scripted on the mock moves partition 0 from a to b: a revokes it
    (``on_partitions_revoked``) and acknowledges; only then does b get it. The ownership
    log checks on exit that it was never held twice."""
    topic = make_topic(3, broker=mock)
    cfg = config(mock, unique_group, topic)
    async with MemberGroup() as group:
        a = await joined(group, cfg, topic, 3)
        b = await group.start(cfg)
        ids = {a.member.member_id, b.member.member_id}
        await group.wait_until(
            lambda: covered([a, b], topic, 3) and a.stable and b.stable and bool(b.assignment),
            timeout=60,
            what="a and b share the topic",
        )
        mock.set_consumer_target_assignment(
            unique_group,
            {a.member.member_id: [(topic, 1)], b.member.member_id: [(topic, 0), (topic, 2)]},
        )
        await group.wait_until(
            lambda: (
                a.assignment == tps(topic, 1)
                and b.assignment == tps(topic, 0, 2)
                and a.stable
                and b.stable
            ),
            timeout=60,
            what="the scripted assignment",
        )
        mock.set_consumer_target_assignment(
            unique_group,
            {a.member.member_id: [(topic, 0), (topic, 1)], b.member.member_id: [(topic, 2)]},
        )
        await group.wait_until(
            lambda: (
                a.assignment == tps(topic, 0, 1)
                and b.assignment == tps(topic, 2)
                and a.stable
                and b.stable
            ),
            timeout=60,
            what="partition 0 moved back to a",
        )
        assert tps(topic, 0) in callbacks(b, "on_partitions_revoked")
        assert len(ids) == 2 and not a.errors and not b.errors
