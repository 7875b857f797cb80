"""The consumer-protocol lease learns the broker's session timeout (issue 14).

- the core (:meth:`ConsumerMemberBase.learn_session_timeout`) lowers the bound its lease
  uses at once, for the proof it already holds too; it raises it (never past the
  configured value) only when two reads in a row agree, and only for proofs sent after
  the second;
- :func:`group_session_timeout` reads ``consumer.session.timeout.ms`` from a GROUP's
  DescribeConfigs answer, and says why when it cannot;
- the runtime reads it once after the first answered heartbeat, in a task of its own, and
  on failure logs ``member.session_timeout_unknown`` once and keeps the configured value
  (a real ``GroupMember`` on a :class:`~kgroup.testing.MockTransport`, no broker).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from kgroup import CoordinatorError, GroupConfig, GroupMember, TopicPartition
from kgroup._core._kip848_state import ConsumerState
from kgroup._core._messages import FindCoordinatorRequest
from kgroup._core._messages_848 import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicIdPartitions,
)
from kgroup._core._messages_configs import (
    CONFIG_SOURCE_GROUP,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribedConfig,
    DescribedConfigs,
)
from kgroup._core._messages_metadata import (
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
)
from kgroup._errors import ErrorCode, RemoteProtocolError, UnsupportedVersion
from kgroup._runtime._group_configs import (
    SESSION_TIMEOUT_KEY,
    GroupConfigUnavailable,
    group_session_timeout,
)
from kgroup._runtime._kip848 import ConsumerProtocolRuntime
from kgroup.testing import MockTransport
from tests.unit.test_scenarios_kip848 import Harness

S = ConsumerState
T1 = uuid.UUID("00000000-0000-0000-0000-0000000000a1")


def _runtime_848(member: GroupMember) -> ConsumerProtocolRuntime:
    """The member's consumer-protocol runtime (its ``MembershipRuntime``)."""
    runtime = member._runtime
    assert isinstance(runtime, ConsumerProtocolRuntime)
    return runtime


# --- the core -------------------------------------------------------------------------------


def test_a_shorter_broker_timeout_bounds_the_lease() -> None:
    h = Harness(settings={"session_timeout_ms": 45_000})
    ack = h.joined()
    h.answer(ack, epoch=5)
    assert h.m.valid_until == ack.sent_at + 45_000
    assert h.m.learn_session_timeout(10_000) == 10_000
    assert h.m.valid_until == ack.sent_at + 10_000  # the proof already held, too
    learned = [f for e, f in h.events if e == "member.session_timeout_learned"]
    assert learned[-1]["broker_ms"] == 10_000 and learned[-1]["session_timeout_ms"] == 10_000


def test_a_longer_broker_timeout_changes_nothing() -> None:
    """The configured value is a ceiling: a user can only make the lease more cautious."""
    h = Harness(settings={"session_timeout_ms": 20_000})
    ack = h.joined()
    h.answer(ack, epoch=5)
    assert h.m.learn_session_timeout(45_000) == 20_000
    assert h.m.valid_until == ack.sent_at + 20_000
    learned = [f for e, f in h.events if e == "member.session_timeout_learned"]
    assert learned == [
        {
            "group_id": "g",
            "member_id": "m-1",
            "member_epoch": 5,
            "protocol": "consumer",
            "broker_ms": 45_000,
            "session_timeout_ms": 20_000,
        }
    ]


def test_one_read_never_raises_the_bound() -> None:
    h = Harness(settings={"session_timeout_ms": 45_000})
    assert h.m.learn_session_timeout(30_000, 0.0) == 30_000
    assert h.m.learn_session_timeout(40_000, 60_000.0) == 30_000  # once: not yet
    assert h.m.learn_session_timeout(6_000, 120_000.0) == 6_000  # lower: at once
    assert h.m.learn_session_timeout(40_000, 180_000.0) == 6_000  # the run starts again
    assert h.m.settings.session_timeout_ms == 6_000


def test_a_raise_read_twice_bounds_only_proofs_sent_after_the_second_read() -> None:
    """The broker bounded a heartbeat it answered by the timeout it had then: a raise
    applies from the next heartbeat on, and only once two reads (a minute apart in the
    runtime) agree, so the change has surely reached the group's coordinator."""
    h = Harness(settings={"session_timeout_ms": 45_000})
    h.m.learn_session_timeout(10_000, 0.0)
    ack = h.joined()
    h.answer(ack, epoch=5)
    assert h.m.valid_until == ack.sent_at + 10_000
    h.at(ack.sent_at + 1_000)
    assert h.m.learn_session_timeout(30_000, h.now) == 10_000  # first read of the raise
    assert h.m.valid_until == ack.sent_at + 10_000
    h.at(ack.sent_at + 2_000)
    assert h.m.learn_session_timeout(30_000, h.now) == 30_000  # second: taken
    assert h.m.valid_until == ack.sent_at + 10_000  # the proof held was sent before it
    h.at(5_000.0)  # the next heartbeat at the interval
    hb = h.send()
    h.answer(hb, epoch=5)
    assert hb.sent_at > ack.sent_at + 2_000
    assert h.m.valid_until == hb.sent_at + 30_000
    learned = [f for e, f in h.events if e == "member.session_timeout_learned"]
    assert [f["session_timeout_ms"] for f in learned] == [10_000, 10_000, 30_000]


def test_a_raise_stops_at_the_configured_value_and_a_lower_read_cancels_it() -> None:
    h = Harness(settings={"session_timeout_ms": 20_000})
    h.m.learn_session_timeout(6_000, 0.0)
    h.m.learn_session_timeout(45_000, 1.0)
    assert h.m.learn_session_timeout(45_000, 2.0) == 20_000  # the ceiling
    h.m.learn_session_timeout(8_000, 3.0)  # lower: at once, for every proof
    assert h.m.learn_session_timeout(12_000, 4.0) == 8_000
    assert h.m.learn_session_timeout(10_000, 5.0) == 8_000  # not the same value twice
    assert h.m.learn_session_timeout(10_000, 6.0) == 10_000


def _joined_then_raised(h: Harness, first_ms: int, raised_ms: int) -> Any:
    """Learn ``first_ms``, join (acknowledged and answered), then read ``raised_ms`` twice
    (1 and 2 ms after the acknowledgement was sent): the raise applies to later proofs.
    Returns the acknowledgement."""
    h.m.learn_session_timeout(first_ms, 0.0)
    ack = h.joined()
    h.answer(ack, epoch=5)
    h.m.learn_session_timeout(raised_ms, ack.sent_at + 1.0)
    h.m.learn_session_timeout(raised_ms, ack.sent_at + 2.0)
    return ack


def test_a_lower_read_never_lengthens_a_proof_from_before_the_last_raise() -> None:
    """Raised 6 s -> 20 s, then lowered to 10 s: a proof sent before the raise was bounded
    by the broker at 6 s, and keeps that; newer ones get 10 s."""
    h = Harness(settings={"session_timeout_ms": 45_000})
    ack = _joined_then_raised(h, 6_000, 20_000)
    assert h.m.learn_session_timeout(10_000, ack.sent_at + 3.0) == 10_000
    assert h.m.valid_until == ack.sent_at + 6_000
    h.at(5_000.0)
    hb = h.send()
    h.answer(hb, epoch=5)
    assert h.m.valid_until == hb.sent_at + 10_000


def test_a_lower_read_applies_to_proofs_the_last_raise_left_on_the_old_bound() -> None:
    h = Harness(settings={"session_timeout_ms": 45_000})
    ack = _joined_then_raised(h, 10_000, 30_000)
    assert h.m.valid_until == ack.sent_at + 10_000
    h.m.learn_session_timeout(6_000, ack.sent_at + 3.0)
    assert h.m.valid_until == ack.sent_at + 6_000


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "6000", None])
def test_values_that_are_no_timeout_are_ignored(bad: Any) -> None:
    h = Harness(settings={"session_timeout_ms": 45_000})
    assert h.m.learn_session_timeout(bad) == 45_000
    assert h.m.settings.session_timeout_ms == 45_000
    assert "member.session_timeout_learned" not in h.event_names()


def test_a_lowered_bound_that_has_already_passed_fences_at_the_next_step() -> None:
    """Learned late (the broker's timeout is shorter than the time since the last proof):
    the lease has lapsed, and the member fences itself and reports its partitions lost."""
    h = Harness(settings={"session_timeout_ms": 45_000})
    ack = h.joined()
    h.answer(ack, epoch=5)
    h.at(ack.sent_at + 8_000)
    h.m.learn_session_timeout(6_000)
    assert h.m.valid_until == ack.sent_at + 6_000 < h.now
    h.hb()
    assert h.state() is S.FENCED
    assert "member.lease_expired" in h.event_names()
    h.poll()
    assert h.calls[-1] == ("lost", frozenset({TopicPartition("t1", 0), TopicPartition("t1", 1)}))


# --- the DescribeConfigs helper -------------------------------------------------------------


class Answers:
    """A connection answering every request with ``answer`` (or raising it)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.sent: list[tuple[Any, float]] = []

    async def request(self, message: Any, timeout_ms: float) -> Any:
        self.sent.append((message, timeout_ms))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def configs(
    *entries: DescribedConfig,
    code: int = 0,
    message: str | None = None,
    name: str = "g",
    kind: int = RESOURCE_GROUP,
) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(
        results=(
            DescribedConfigs(
                error_code=code,
                error_message=message,
                resource_type=kind,
                resource_name=name,
                configs=entries,
            ),
        )
    )


def entry(value: str | None) -> DescribedConfig:
    return DescribedConfig(name=SESSION_TIMEOUT_KEY, value=value, source=CONFIG_SOURCE_GROUP)


async def test_helper_asks_for_the_one_key_of_the_group() -> None:
    conn = Answers(configs(entry("7000")))
    assert await group_session_timeout(conn, "g", 3_000) == 7_000
    ((request, timeout_ms),) = conn.sent
    assert timeout_ms == 3_000
    assert isinstance(request, DescribeConfigsRequest)
    (query,) = request.resources
    assert (query.resource_type, query.resource_name, query.keys) == (
        RESOURCE_GROUP,
        "g",
        ("consumer.session.timeout.ms",),
    )


@pytest.mark.parametrize("value", [None, "", "soon", "0", "-5"])
async def test_helper_answers_none_for_no_usable_value(value: str | None) -> None:
    assert await group_session_timeout(Answers(configs(entry(value))), "g", 1_000) is None
    assert await group_session_timeout(Answers(configs()), "g", 1_000) is None


async def test_helper_names_an_error_answered_for_the_group() -> None:
    conn = Answers(
        configs(code=ErrorCode.GROUP_AUTHORIZATION_FAILED, message="Group authorization failed.")
    )
    with pytest.raises(GroupConfigUnavailable, match="GROUP_AUTHORIZATION_FAILED") as caught:
        await group_session_timeout(conn, "g", 1_000)
    assert caught.value.error_code == 30
    assert "Group authorization failed." in str(caught.value)


@pytest.mark.parametrize(
    "answer",
    [
        configs(entry("7000"), name="other"),
        configs(entry("7000"), kind=RESOURCE_TOPIC),
        DescribeConfigsResponse(),
        ConsumerGroupHeartbeatResponse(error_code=0),
    ],
)
async def test_helper_refuses_an_answer_about_something_else(answer: Any) -> None:
    with pytest.raises(RemoteProtocolError):
        await group_session_timeout(Answers(answer), "g", 1_000)


async def test_helper_passes_transport_and_version_errors_on() -> None:
    for error in (CoordinatorError("gone"), UnsupportedVersion("no DescribeConfigs")):
        with pytest.raises(type(error)):
            await group_session_timeout(Answers(error), "g", 1_000)


# --- the runtime, on a MockTransport ----------------------------------------------------------


class Broker:
    """Answers a consumer-protocol member: a join gets T1's partitions 0 and 1, later
    heartbeats no change; ``describe`` answers DescribeConfigs."""

    def __init__(self, describe: Callable[[DescribeConfigsRequest], Any]) -> None:
        self.describe = describe
        self.described = 0

    def __call__(self, request: Any) -> Any:
        match request:
            case FindCoordinatorRequest():
                return None  # the transport's default coordinator
            case ConsumerGroupHeartbeatRequest(member_epoch=epoch):
                joining = epoch == 0
                return ConsumerGroupHeartbeatResponse(
                    error_code=0,
                    member_id=request.member_id,
                    member_epoch=1 if epoch <= 0 else epoch,
                    heartbeat_interval_ms=50,
                    assignment=(
                        (TopicIdPartitions(topic_id=T1, partitions=(0, 1)),) if joining else None
                    ),
                )
            case MetadataRequest():
                return MetadataResponse(
                    topics=(
                        MetadataTopic(
                            error_code=0,
                            name="t1",
                            topic_id=T1,
                            partitions=tuple(
                                MetadataPartition(partition=p, leader_id=1) for p in (0, 1)
                            ),
                        ),
                    )
                )
            case DescribeConfigsRequest():
                self.described += 1
                return self.describe(request)
        raise AssertionError(f"unexpected {request!r}")


def member_config(**overrides: Any) -> GroupConfig:
    values: dict[str, Any] = {
        "bootstrap_servers": "in-memory:9092",
        "group_id": "g",
        "topics": ["t1"],
        "group_protocol": "consumer",
        "retry_backoff_ms": 10,
        "retry_backoff_max_ms": 20,
        "request_timeout_ms": 1_000,
    }
    values.update(overrides)
    return GroupConfig(**values)


async def run_member(broker: Broker, **overrides: Any) -> tuple[GroupMember, list[str]]:
    """Start a member, poll until it owns T1's partitions and its read of the session
    timeout is over (learned or given up), and return it open with its hook events."""
    member = GroupMember(member_config(**overrides), transport=MockTransport(broker))
    seen: list[str] = []
    member.add_event_hook(lambda event, fields: seen.append(event))
    await member.start()
    async with asyncio.timeout(10):
        while not member.assignment or not _runtime_848(member)._session_timeout._done:
            await member.poll(timeout=0.02)
    return member, seen


def group_answer(value: str) -> Callable[[DescribeConfigsRequest], Any]:
    return lambda request: configs(entry(value))


async def test_runtime_learns_the_broker_value_after_the_first_answer() -> None:
    broker = Broker(group_answer("6000"))
    with capture_logs() as logs:
        member, seen = await run_member(broker, consumer_session_timeout_ms=45_000)
        try:
            core = _runtime_848(member).core
            assert core.settings.session_timeout_ms == 6_000
            proof = core._session_proof
            assert proof is not None and core.valid_until == proof + 6_000
            assert member.valid_until == (proof + 6_000) / 1000.0
            assert broker.described == 1  # once, not per heartbeat
        finally:
            await member.close()
    assert "member.session_timeout_learned" in seen
    assert not [x for x in logs if x["event"] == "member.session_timeout_unknown"]


async def test_runtime_keeps_a_shorter_configured_value() -> None:
    broker = Broker(group_answer("45000"))
    member, seen = await run_member(broker, consumer_session_timeout_ms=10_000)
    try:
        assert _runtime_848(member).core.settings.session_timeout_ms == 10_000
    finally:
        await member.close()
    assert "member.session_timeout_learned" in seen


@pytest.mark.parametrize(
    ("describe", "reads", "problem"),
    [
        (
            lambda r: configs(code=30, message="Group authorization failed."),
            1,
            "GROUP_AUTHORIZATION_FAILED (30): Group authorization failed.",
        ),
        (lambda r: configs(), 1, "did not list consumer.session.timeout.ms"),
        (lambda r: configs(entry("7000"), name="other"), 1, "did not answer for group"),
    ],
    ids=["no-permission", "not-listed", "malformed"],
)
async def test_runtime_warns_once_and_keeps_the_configured_value(
    describe: Callable[[DescribeConfigsRequest], Any], reads: int, problem: str
) -> None:
    broker = Broker(describe)
    with capture_logs() as logs:
        member, _ = await run_member(broker, consumer_session_timeout_ms=45_000)
        try:
            core = _runtime_848(member).core
            assert core.settings.session_timeout_ms == 45_000
            assert core.state is S.STABLE  # the membership goes on
        finally:
            await member.close()
    assert broker.described == reads
    warnings = [x for x in logs if x["event"] == "member.session_timeout_unknown"]
    assert len(warnings) == 1
    assert problem in warnings[0]["error"]
    assert warnings[0]["session_timeout_ms"] == 45_000 and warnings[0]["log_level"] == "warning"


async def test_runtime_retries_a_transport_failure_then_gives_up() -> None:
    """A retriable failure is read again after a later answered heartbeat, three reads in
    all; the heartbeats go on meanwhile."""

    def broken(request: DescribeConfigsRequest) -> Any:
        raise CoordinatorError("connection reset")

    broker = Broker(broken)
    with capture_logs() as logs:
        member, _ = await run_member(broker)
        try:
            assert _runtime_848(member).core.state is S.STABLE
        finally:
            await member.close()
    assert broker.described == 3
    warnings = [x for x in logs if x["event"] == "member.session_timeout_unknown"]
    assert len(warnings) == 1 and "connection reset" in warnings[0]["error"]


async def test_runtime_learns_after_a_transient_failure() -> None:
    answers: list[Any] = [CoordinatorError("connection reset"), configs(entry("8000"))]

    def flaky(request: DescribeConfigsRequest) -> Any:
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    broker = Broker(flaky)
    with capture_logs() as logs:
        member, _ = await run_member(broker)
        try:
            assert _runtime_848(member).core.settings.session_timeout_ms == 8_000
        finally:
            await member.close()
    assert broker.described == 2
    assert not [x for x in logs if x["event"] == "member.session_timeout_unknown"]
