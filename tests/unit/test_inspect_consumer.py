"""``kgroup groups`` / ``kgroup describe`` for KIP-848 ``consumer`` groups, without a broker.

- ListGroups v5 on the wire (bytes by hand from the JSON schemas): the types filter and
  each group's type;
- which groups are described by ConsumerGroupDescribe (``_consumer_group``: a coordinator
  that offers ConsumerGroupHeartbeat and ConsumerGroupDescribe, and a group it knows as a
  consumer-protocol group) and which fall back to DescribeGroups;
- the description built from a ConsumerGroupDescribe answer (``_describe_consumer``) and
  its text rendering.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kgroup._cli import _print_consumer_group
from kgroup._core._messages import (
    FetchedOffset,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetFetchResponse,
)
from kgroup._core._messages_describe import (
    MEMBER_TYPE_CLASSIC,
    MEMBER_TYPE_CONSUMER,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribedConsumerGroup,
    DescribedConsumerMember,
    DescribedTopicPartitions,
)
from kgroup._errors import ErrorCode, UnsupportedVersion
from kgroup._inspect import (
    GroupNotFound,
    InspectError,
    PartitionOffsets,
    _consumer_group,
    _describe_consumer,
)
from kgroup._protocol import from_wire, to_wire
from kgroup._protocol._schemas import REQUEST_STRUCTS

T1 = uuid.UUID("00000000-0000-0000-0000-0000000000a1")
T2 = uuid.UUID("00000000-0000-0000-0000-0000000000b2")


# --- ListGroups v5 --------------------------------------------------------------------------


def test_list_groups_v5_request_and_response() -> None:
    wire = to_wire(ListGroupsRequest())
    struct = wire.prepare({16: (0, 5)})
    assert struct.API_VERSION == 5
    # states_filter [], types_filter [] (all groups), tags
    assert bytes(struct.encode()) == b"\x01\x01\x00"
    raw = (
        b"\x00\x00\x00\x00"  # throttle_time_ms
        b"\x00\x00"  # error_code
        b"\x03"  # groups: 2
        b"\x03cg\x09consumer\x07Stable\x09consumer\x00"
        b"\x03cl\x09consumer\x06Empty\x08classic\x00"
        b"\x00"
    )
    response = from_wire(REQUEST_STRUCTS[16][5].RESPONSE_TYPE.decode(raw))
    cg = ListedGroup(group_id="cg", protocol_type="consumer", state="Stable", group_type="consumer")
    cl = ListedGroup(group_id="cl", protocol_type="consumer", state="Empty", group_type="classic")
    assert response == ListGroupsResponse(groups=(cg, cl))


def test_list_groups_v4_has_no_type() -> None:
    raw = b"\x00\x00\x00\x00\x00\x00\x02\x03cg\x09consumer\x07Stable\x00\x00"
    response = from_wire(REQUEST_STRUCTS[16][4].RESPONSE_TYPE.decode(raw))
    assert isinstance(response, ListGroupsResponse)
    assert response.groups[0].group_type is None


# --- which path describes the group ---------------------------------------------------------


class Coordinator:
    """A connection with ApiVersions ``versions`` answering ConsumerGroupDescribe."""

    def __init__(self, answer: Any, versions: dict[int, tuple[int, int]] | None = None) -> None:
        self.answer = answer
        self.api_versions = {68: (0, 1), 69: (0, 1)} if versions is None else versions
        self.sent: list[Any] = []

    async def request(self, message: Any, timeout_ms: float) -> Any:
        assert isinstance(message, ConsumerGroupDescribeRequest)
        self.sent.append(message)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def group(**fields: Any) -> DescribedConsumerGroup:
    values: dict[str, Any] = {
        "error_code": 0,
        "group_id": "g",
        "state": "Stable",
        "group_epoch": 7,
        "assignment_epoch": 6,
        "assignor_name": "range",
    }
    values.update(fields)
    return DescribedConsumerGroup(**values)


def answer(*groups: DescribedConsumerGroup) -> ConsumerGroupDescribeResponse:
    return ConsumerGroupDescribeResponse(groups=groups)


async def test_a_consumer_group_is_described_by_consumer_group_describe() -> None:
    conn = Coordinator(answer(group()))
    found = await _consumer_group(conn, "g", 1_000)  # type: ignore[arg-type]
    assert found == group()
    assert conn.sent == [ConsumerGroupDescribeRequest(group_ids=("g",))]


@pytest.mark.parametrize(
    "versions",
    [{69: (0, 0)}, {68: (0, 1)}, {}],
    ids=["tansu-no-heartbeat", "no-describe", "neither"],
)
async def test_a_broker_without_the_consumer_protocol_is_not_asked(
    versions: dict[int, tuple[int, int]],
) -> None:
    """tansu offers ConsumerGroupDescribe v0 without ConsumerGroupHeartbeat and answers
    every id with an "Empty" group: it cannot have consumer-protocol groups."""
    conn = Coordinator(answer(group(state="Empty", group_epoch=-1)), versions)
    assert await _consumer_group(conn, "g", 1_000) is None  # type: ignore[arg-type]
    assert conn.sent == []


@pytest.mark.parametrize(
    "reply",
    [
        answer(group(error_code=69, error_message="Group g is not a consumer group.")),
        answer(group(error_code=69, error_message="Group g not found.")),
        answer(group(error_code=ErrorCode.UNSUPPORTED_VERSION)),
        UnsupportedVersion("ConsumerGroupDescribe: no version in common"),
    ],
    ids=["classic-group", "no-group", "protocol-off", "no-common-version"],
)  # fmt: skip
async def test_other_groups_fall_back_to_describe_groups(reply: Any) -> None:
    assert await _consumer_group(Coordinator(reply), "g", 1_000) is None  # type: ignore[arg-type]


async def test_an_error_for_the_group_is_reported() -> None:
    reply = answer(
        group(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="not allowed")
    )
    with pytest.raises(InspectError, match=r"GROUP_AUTHORIZATION_FAILED \(30\): not allowed"):
        await _consumer_group(Coordinator(reply), "g", 1_000)  # type: ignore[arg-type]
    with pytest.raises(InspectError, match="did not answer for group 'g'"):
        await _consumer_group(Coordinator(answer(group(group_id="h"))), "g", 1_000)  # type: ignore[arg-type]


# --- the description ------------------------------------------------------------------------


def member(member_id: str, **fields: Any) -> DescribedConsumerMember:
    values: dict[str, Any] = {
        "member_id": member_id,
        "instance_id": None,
        "rack_id": None,
        "member_epoch": 7,
        "client_id": "c",
        "client_host": "/10.0.0.1",
        "subscribed_topic_names": ("t1", "t2"),
        "subscribed_topic_regex": "",
        "assignment": (),
        "target_assignment": (),
        "member_type": MEMBER_TYPE_CONSUMER,
    }
    values.update(fields)
    return DescribedConsumerMember(**values)


def parts(topic_id: uuid.UUID, name: str, *partitions: int) -> DescribedTopicPartitions:
    return DescribedTopicPartitions(topic_id=topic_id, topic_name=name, partitions=partitions)


RECONCILING = group(
    state="Reconciling",
    members=(
        # a still owns t1-1, which the target gives to b; b waits for it
        member(
            "a",
            instance_id="i-a",
            rack_id="r1",
            assignment=(parts(T1, "t1", 1, 0),),
            target_assignment=(parts(T1, "t1", 0),),
        ),
        member(
            "b",
            member_epoch=6,
            subscribed_topic_names=(),
            subscribed_topic_regex="t.*",
            assignment=(parts(T2, "t2", 0),),
            target_assignment=(parts(T2, "t2", 0), parts(T1, "t1", 1)),
            member_type=MEMBER_TYPE_CLASSIC,
        ),
    ),
)


def committed(topic: str, partition: int, offset: int) -> FetchedOffset:
    return FetchedOffset(
        topic=topic,
        partition=partition,
        offset=offset,
        leader_epoch=-1,
        metadata=None,
        error_code=0,
    )


FETCHED = OffsetFetchResponse(
    partitions=(committed("t1", 0, 5), committed("t2", 3, 9), committed("t2", 0, -1))
)


def test_description_of_a_reconciling_group() -> None:
    desc = _describe_consumer("b1:9092", RECONCILING, FETCHED)
    assert (desc.group_type, desc.protocol_type, desc.protocol) == ("consumer", "consumer", "range")
    assert (desc.state, desc.group_epoch, desc.assignment_epoch) == ("Reconciling", 7, 6)
    a, b = desc.members
    assert (a.group_instance_id, a.rack_id, a.member_epoch, a.member_type) == (
        "i-a",
        "r1",
        7,
        "consumer",
    )
    assert a.assignment == ("t1-0", "t1-1") and a.target_assignment == ("t1-0",)
    assert a.subscription == ("t1", "t2") and a.subscribed_topic_regex is None  # "" is none
    assert b.assignment == ("t2-0",) and b.target_assignment == ("t1-1", "t2-0")
    assert (b.subscription, b.subscribed_topic_regex, b.member_type) == ((), "t.*", "classic")
    assert a.assignment_bytes == 0
    # A row for every partition owned, targeted or committed; owners from the current
    # assignments only (t1-1 is a's until it revokes it).
    assert desc.offsets == (
        PartitionOffsets("t1", 0, 5, None, None, "a"),
        PartitionOffsets("t1", 1, None, None, None, "a"),
        PartitionOffsets("t2", 0, None, None, None, "b"),
        PartitionOffsets("t2", 3, 9, None, None, None),
    )  # fmt: skip
    assert desc.as_dict()["members"][1]["target_assignment"] == ("t1-1", "t2-0")


def test_a_topic_the_broker_cannot_name_keeps_its_id() -> None:
    g = group(members=(member("a", assignment=(parts(T2, "", 0),)),))
    desc = _describe_consumer("b1:9092", g, OffsetFetchResponse())
    assert desc.members[0].assignment == (f"{T2}-0",)


def test_a_dead_consumer_group_does_not_exist() -> None:
    with pytest.raises(GroupNotFound, match="does not exist"):
        _describe_consumer("b1:9092", group(state="Dead"), OffsetFetchResponse())


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    _print_consumer_group(_describe_consumer("b1:9092", RECONCILING, FETCHED))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "GROUP g  TYPE consumer  STATE Reconciling  GROUP-EPOCH 7  ASSIGNMENT-EPOCH 6  "
        "ASSIGNOR range  COORDINATOR b1:9092  MEMBERS 2"
    )
    header = lines[2].split()
    assert header == [
        "MEMBER-ID", "INSTANCE-ID", "RACK", "CLIENT-ID", "HOST", "EPOCH", "SUBSCRIPTION",
        "#PARTITIONS", "ASSIGNMENT", "TARGET-ASSIGNMENT",
    ]  # fmt: skip
    assert lines[3].split() == [
        "a", "i-a", "r1", "c", "/10.0.0.1", "7", "t1,t2", "2", "t1-0,t1-1", "t1-0",
    ]  # fmt: skip
    assert lines[4].split() == [
        "b", "-", "-", "c", "/10.0.0.1", "6", "/t.*/", "1", "t2-0", "t1-1,t2-0",
    ]  # fmt: skip
    assert lines[6].split()[:5] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert lines[7].split() == ["t1", "0", "5", "-", "-", "a"]


def test_text_output_of_a_stable_member_and_an_empty_group(
    capsys: pytest.CaptureFixture[str],
) -> None:
    owned = (parts(T1, "t1", 0),)
    g = group(members=(member("a", assignment=owned, target_assignment=owned),))
    _print_consumer_group(_describe_consumer("b1:9092", g, OffsetFetchResponse()))
    row = capsys.readouterr().out.splitlines()[3].split()
    assert row[-3:] == ["1", "t1-0", "(same)"]
    _print_consumer_group(
        _describe_consumer("b1:9092", group(state="Empty"), OffsetFetchResponse())
    )
    out = capsys.readouterr().out
    assert "STATE Empty" in out and "MEMBERS 0" in out and "MEMBER-ID" not in out


class _Coordinators:
    """A cluster whose FindCoordinator answers are scripted."""

    def __init__(self, *codes: int) -> None:
        self.codes = list(codes)
        self.asked = 0

    async def find_coordinator(self, request: Any) -> Any:
        from kgroup._core._messages import FindCoordinatorResponse

        self.asked += 1
        code = self.codes.pop(0)
        return FindCoordinatorResponse(error_code=code, node_id=1, host="b", port=9092)


class _GroupCoordinator:
    """A coordinator connection answering each request from a script: one answer per
    request, in order, for each of ConsumerGroupDescribe, DescribeGroups, OffsetFetch."""

    def __init__(self, **answers: list[Any]) -> None:
        self.api_versions = {68: (0, 1), 69: (0, 1)}
        self.answers = answers
        self.sent: list[str] = []
        self.opened = self.closed = 0

    async def request(self, message: Any, timeout_ms: float) -> Any:
        name = type(message).__name__.removesuffix("Request")
        self.sent.append(name)
        return self.answers[name].pop(0)

    async def open(self, host: str, port: int) -> Any:
        assert (host, port) == ("b", 9092)
        self.opened += 1
        return self

    async def aclose(self) -> None:
        self.closed += 1


def _classic(code: int) -> Any:
    from kgroup._core._messages import DescribedGroup, DescribeGroupsResponse

    described = DescribedGroup(
        error_code=code, group_id="g", state="Stable", protocol_type="consumer", protocol="range"
    )
    return DescribeGroupsResponse(groups=(described,))


async def _ask(cluster: Any, conn: _GroupCoordinator) -> tuple[Any, list[float], list[str]]:
    from kgroup._inspect import _ask_coordinator

    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    waited_on: list[str] = []
    answers = await _ask_coordinator(
        cluster, "g", 1_000, conn.open, waited_on=waited_on, sleep=sleep
    )
    return answers, waits, waited_on


async def test_find_coordinator_is_asked_again_while_the_coordinator_is_not_ready() -> None:
    """A fresh Kafka broker answers the first group request COORDINATOR_NOT_AVAILABLE while
    it creates the offsets topic (a flaky CI run): describe asks again, backing off."""
    cluster = _Coordinators(
        ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, 0
    )
    conn = _GroupCoordinator(
        ConsumerGroupDescribe=[answer(group())], OffsetFetch=[OffsetFetchResponse()]
    )
    answers, waits, waited_on = await _ask(cluster, conn)
    assert answers.consumer == group() and answers.where == "b:9092"
    assert cluster.asked == 3 and waits == [0.1, 0.2]
    assert waited_on == [
        "FindCoordinator: COORDINATOR_NOT_AVAILABLE (15)",
        "FindCoordinator: COORDINATOR_LOAD_IN_PROGRESS (14)",
    ]
    assert conn.opened == conn.closed == 1


@pytest.mark.parametrize(
    "script",
    [
        # A fresh Kafka broker: FindCoordinator names a coordinator that then answers
        # NOT_COORDINATOR to ConsumerGroupDescribe (a CI run failed on it).
        {
            "ConsumerGroupDescribe": [
                answer(group(error_code=ErrorCode.NOT_COORDINATOR)),
                answer(group()),
            ],
            "OffsetFetch": [OffsetFetchResponse()],
        },
        {
            "ConsumerGroupDescribe": [
                answer(group(error_code=ErrorCode.GROUP_ID_NOT_FOUND)),
                answer(group(error_code=ErrorCode.GROUP_ID_NOT_FOUND)),
            ],
            "DescribeGroups": [_classic(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), _classic(0)],
            "OffsetFetch": [OffsetFetchResponse()],
        },
        {
            "ConsumerGroupDescribe": [answer(group()), answer(group())],
            "OffsetFetch": [
                OffsetFetchResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE),
                OffsetFetchResponse(),
            ],
        },
    ],
    ids=["consumer-group-describe", "describe-groups", "offset-fetch"],
)
async def test_a_coordinator_that_is_not_ready_is_found_and_asked_again(
    script: dict[str, list[Any]],
) -> None:
    cluster = _Coordinators(0, 0)
    conn = _GroupCoordinator(**script)
    answers, waits, waited_on = await _ask(cluster, conn)
    assert cluster.asked == 2 and waits == [0.1] and len(waited_on) == 1
    assert conn.opened == conn.closed == 2, "each round's connection is closed"
    assert all(not remaining for remaining in conn.answers.values()), conn.answers
    assert answers.fetched == OffsetFetchResponse()


async def test_find_coordinator_other_errors_are_not_retried() -> None:
    cluster = _Coordinators(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    conn = _GroupCoordinator()
    with pytest.raises(InspectError, match="GROUP_AUTHORIZATION_FAILED") as caught:
        await _ask(cluster, conn)
    assert caught.value.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert cluster.asked == 1 and conn.opened == 0


async def test_other_group_errors_are_not_retried() -> None:
    cluster = _Coordinators(0)
    conn = _GroupCoordinator(
        ConsumerGroupDescribe=[answer(group(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))]
    )
    with pytest.raises(InspectError, match="GROUP_AUTHORIZATION_FAILED"):
        await _ask(cluster, conn)
    assert cluster.asked == 1 and conn.opened == conn.closed == 1
