"""Rack-aware assignment (KIP-881): the TopicLayout, replica racks from Metadata, ``range``
on hand-checked cases and properties, and the sticky assignors' rack alignment against
every possible assignment of small groups. Exactness against Java's own assignors is in
tests/integration/test_assignor_differential.py."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from aiokafka.protocol.metadata import MetadataResponse_v0, MetadataResponse_v5
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kgroup import (
    Assignment,
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RemoteProtocolError,
    StickyAssignor,
    Subscription,
    TopicLayout,
    TopicPartition,
)
from kgroup._core._embedding import ConsumerEmbedding
from kgroup._core._messages import JoinGroupMember
from kgroup._core._racks import rack_aware
from kgroup._runtime._connection import Cluster
from tests.unit._docs import run_doc_example

TP = TopicPartition
Group = tuple[TopicLayout, list[MemberSubscription]]
RACKS = ("r0", "r1", "r2")
FAST = settings(max_examples=150, deadline=None)


def member(
    member_id: str,
    topics: Sequence[str],
    rack: str | None,
    owned: Sequence[TopicPartition] = (),
) -> MemberSubscription:
    sub = Subscription(
        topics=tuple(topics),
        user_data=b"\x00\x00\x00\x01",
        owned_partitions=tuple(owned),
        generation_id=1 if owned else -1,
        rack_id=rack,
    )
    return MemberSubscription(member_id, None, sub)


def plain(result: Mapping[str, Assignment]) -> dict[str, list[TopicPartition]]:
    return {m: sorted(a.partitions) for m, a in result.items()}


# --- TopicLayout ---------------------------------------------------------------------------


def test_topic_layout_is_the_counts_with_replica_racks() -> None:
    layout = TopicLayout({"a": [{"r1", "r2"}, (), ["r2"]], "b": []})
    assert dict(layout) == {"a": 3, "b": 0}
    assert layout == {"a": 3, "b": 0}
    assert layout.replica_racks("a", 0) == {"r1", "r2"}
    assert layout.replica_racks("a", 1) == frozenset()
    assert layout.replica_racks("a", 3) == frozenset()
    assert layout.replica_racks("nope", 0) == frozenset()
    assert TopicLayout.without_racks({"a": 2}).replica_racks("a", 1) == frozenset()
    assert "r2" in repr(layout)


def test_the_guide_example_of_a_topic_layout_runs() -> None:
    assert isinstance(
        run_doc_example("guide/member.md", "### Rack-aware assignment")["layout"], TopicLayout
    )


# --- replica racks from Metadata -----------------------------------------------------------


class _Conn:
    where = "broker:9092"

    def __init__(self, response: Any) -> None:
        self.response = response
        self.closed = False

    async def raw_request(self, request: Any, timeout_ms: float) -> Any:
        return self.response

    def close(self, reason: str = "") -> None:
        self.closed = True


def _metadata(response: Any, topics: list[str] | None = None) -> tuple[TopicLayout, _Conn]:
    cluster = Cluster([("localhost", 9092)], client_id="c", request_timeout_ms=1000)
    conn = _Conn(response)

    async def connection() -> _Conn:
        return conn

    cluster.connection = connection  # type: ignore[method-assign,assignment]
    return asyncio.run(cluster._metadata(topics)), conn


def test_metadata_gives_each_partition_the_racks_of_its_replicas() -> None:
    response = MetadataResponse_v5(
        throttle_time_ms=0,
        brokers=[(1, "h1", 9092, "r1"), (2, "h2", 9092, "r2"), (3, "h3", 9092, None)],
        cluster_id="c",
        controller_id=1,
        topics=[
            # partitions listed out of order; replica 4 is not among the brokers
            (0, "t", False, [(0, 1, 2, [2, 3], [2], []), (0, 0, 1, [1, 2, 4], [1], [])]),
            (0, "__consumer_offsets", True, [(0, 0, 1, [1], [1], [])]),
            (3, "missing", False, []),
        ],
    )
    layout, _ = _metadata(response)
    assert dict(layout) == {"t": 2}
    assert layout.replica_racks("t", 0) == {"r1", "r2"}
    assert layout.replica_racks("t", 1) == {"r2"}


def test_metadata_v0_has_no_racks() -> None:
    response = MetadataResponse_v0(
        brokers=[(1, "h1", 9092)], topics=[(0, "t", [(0, 0, 1, [1], [1])])]
    )
    layout, _ = _metadata(response, ["t"])
    assert dict(layout) == {"t": 1}
    assert layout.replica_racks("t", 0) == frozenset()


def test_malformed_metadata_is_a_remote_protocol_error() -> None:
    response = MetadataResponse_v5(
        throttle_time_ms=0,
        brokers=[(1, "h1", 9092, "r1")],
        cluster_id="c",
        controller_id=1,
        topics=[(0, "t", False, [(0, 0, 1)])],  # a partition without its replicas
    )
    with pytest.raises(RemoteProtocolError, match="malformed"):
        _metadata(response)


# --- Kafka's condition -----------------------------------------------------------------------


def test_rack_aware_only_where_racks_can_make_a_difference() -> None:
    r1, r12 = frozenset({"r1"}), frozenset({"r1", "r2"})
    assert rack_aware({"r1"}, [r1, r12])
    assert not rack_aware(set(), [r1, r12])  # no member rack
    assert not rack_aware({"r3"}, [r1, r12])  # no replica on a member's rack
    assert not rack_aware({"r1"}, [r12, r12])  # every partition on every rack
    assert rack_aware({"r1"}, [r12, frozenset()])  # a partition without racks


# --- range -----------------------------------------------------------------------------------


def test_range_gives_each_member_the_partitions_on_its_rack() -> None:
    layout = TopicLayout({"t": [["r2"], ["r2"], ["r1"], ["r1"]]})
    members = [member("a", ["t"], "r1"), member("b", ["t"], "r2")]
    assert plain(RangeAssignor().assign(layout, members)) == {
        "a": [TP("t", 2), TP("t", 3)],
        "b": [TP("t", 0), TP("t", 1)],
    }
    # the same counts without racks: plain ranges
    assert plain(RangeAssignor().assign(dict(layout), members))["a"] == [TP("t", 0), TP("t", 1)]


def test_range_ignores_racks_when_every_partition_is_on_every_member_rack() -> None:
    layout = TopicLayout({"t": [["r1", "r2"]] * 4})
    members = [member("a", ["t"], "r2"), member("b", ["t"], "r1")]
    assert plain(RangeAssignor().assign(layout, members)) == plain(
        RangeAssignor().assign(dict(layout), members)
    )


def test_range_keeps_co_partitioned_topics_together() -> None:
    # x-1 is on r1 and y-1 is not: a takes partition 0 of both, b partition 1 of both
    layout = TopicLayout({"x": [["r1"], ["r1"]], "y": [["r1"], ["r2"]]})
    members = [member("a", ["x", "y"], "r1"), member("b", ["x", "y"], "r2")]
    assert plain(RangeAssignor().assign(layout, members)) == {
        "a": [TP("x", 0), TP("y", 0)],
        "b": [TP("x", 1), TP("y", 1)],
    }


@st.composite
def rack_groups(draw: st.DrawFn, max_partitions: int = 8, max_members: int = 5) -> Group:
    topics = [f"t{i}" for i in range(draw(st.integers(1, 3)))]
    rack_sets = st.lists(st.sampled_from(RACKS), max_size=2, unique=True)
    racks = {t: draw(st.lists(rack_sets, max_size=max_partitions)) for t in topics}
    if draw(st.booleans()):  # co-partitioned: the same count everywhere
        n = len(racks[topics[0]])
        racks = {t: (r + [[]] * n)[:n] for t, r in racks.items()}
    count = draw(st.integers(1, max_members))
    members = [
        member(
            f"m{i}",
            draw(st.lists(st.sampled_from(topics), min_size=1, unique=True)),
            draw(st.sampled_from((*RACKS, None))),
        )
        for i in range(count)
    ]
    return TopicLayout(racks), members


@given(rack_groups(max_partitions=12, max_members=6))
@FAST
def test_range_with_racks_keeps_the_per_topic_quotas_and_co_partitioning(group: Group) -> None:
    layout, members = group
    result = plain(RangeAssignor().assign(layout, members))
    for topic, n in layout.items():
        subscribers = [m.member_id for m in members if topic in m.subscription.topics]
        if not subscribers:
            continue
        got = Counter({m: sum(1 for tp in result[m] if tp.topic == topic) for m in subscribers})
        quota, extra = divmod(n, len(subscribers))
        assert sorted(got.values()) == sorted(
            [quota + 1] * extra + [quota] * (len(subscribers) - extra)
        )
    by_subscribers: dict[tuple[tuple[str, ...], int], list[str]] = {}
    for topic, n in layout.items():
        key = tuple(m.member_id for m in members if topic in m.subscription.topics)
        by_subscribers.setdefault((key, n), []).append(topic)
    for (sharing, _), same in by_subscribers.items():
        for m in sharing:
            numbers = {t: [tp.partition for tp in result[m] if tp.topic == t] for t in same}
            assert len({tuple(p) for p in numbers.values()}) == 1, numbers


# --- sticky: rack alignment, the best any balanced assignment reaches -------------------------


def _aligned(
    layout: TopicLayout, members: Sequence[MemberSubscription], owners: Mapping[TopicPartition, str]
) -> int:
    rack = {m.member_id: m.subscription.rack_id for m in members}
    return sum(
        1 for tp, m in owners.items() if rack[m] in layout.replica_racks(tp.topic, tp.partition)
    )


def _best(
    layout: TopicLayout, members: Sequence[MemberSubscription], aware: bool
) -> tuple[int, int, int]:
    """Over every complete assignment: the least (sum of squares, -aligned, -claims kept)."""
    subscribed = {t for m in members for t in m.subscription.topics}
    everything = [TP(t, p) for t, n in layout.items() if t in subscribed for p in range(n)]
    eligible = [
        [m.member_id for m in members if tp.topic in m.subscription.topics] for tp in everything
    ]
    claimed = {tp: m.member_id for m in members for tp in m.subscription.owned_partitions}
    best: tuple[int, int, int] | None = None
    for choice in itertools.product(*eligible):
        squares = sum(n * n for n in Counter(choice).values())
        owners = dict(zip(everything, choice, strict=True))
        aligned = _aligned(layout, members, owners) if aware else 0
        kept = sum(1 for tp, m in owners.items() if claimed.get(tp) == m)
        if best is None or (squares, -aligned, -kept) < best:
            best = (squares, -aligned, -kept)
    assert best is not None
    return best


@st.composite
def tiny_rack_groups(draw: st.DrawFn) -> Group:
    layout, members = draw(rack_groups(max_partitions=4, max_members=4))
    everything = [TP(t, p) for t, n in layout.items() for p in range(n)]
    if len(everything) > 7:
        layout = TopicLayout(
            {t: [layout.replica_racks(t, p) for p in range(n)][:2] for t, n in layout.items()}
        )
        everything = [TP(t, p) for t, n in layout.items() for p in range(n)]
    claims: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
    for tp in everything:  # one previous owner at most, among the subscribers
        owner = draw(
            st.sampled_from(
                [None, *[m.member_id for m in members if tp.topic in m.subscription.topics]]
            )
        )
        if owner is not None:
            claims[owner].append(tp)
    members = [
        member(m.member_id, m.subscription.topics, m.subscription.rack_id, claims[m.member_id])
        for m in members
    ]
    return layout, members


class _Target(CooperativeStickyAssignor):
    def _withhold_moves(self) -> bool:
        return False


@given(tiny_rack_groups())
@settings(max_examples=200, deadline=None)
@example(
    (
        TopicLayout({"t": [["r1"], ["r2"]]}),
        # a owns the partition on b's rack and b the one on a's: both move for alignment
        [member("a", ["t"], "r1", [TP("t", 1)]), member("b", ["t"], "r2", [TP("t", 0)])],
    )
)
def test_sticky_target_is_the_most_aligned_balanced_assignment_then_stickiest(group: Group) -> None:
    layout, members = group
    racks = {m.subscription.rack_id for m in members if m.subscription.rack_id}
    subscribed = {t for m in members for t in m.subscription.topics}
    aware = rack_aware(
        racks, [layout.replica_racks(t, p) for t in subscribed for p in range(layout[t])]
    )
    result = plain(_Target().assign(layout, members))
    owners = {tp: m for m, tps in result.items() for tp in tps}
    claimed = {tp: m.member_id for m in members for tp in m.subscription.owned_partitions}
    squares = sum(len(tps) ** 2 for tps in result.values())
    aligned = _aligned(layout, members, owners) if aware else 0
    kept = sum(1 for tp, m in owners.items() if claimed.get(tp) == m)
    assert (squares, -aligned, -kept) == _best(layout, members, aware)


@given(rack_groups(max_partitions=10, max_members=6))
@FAST
def test_sticky_ignores_racks_where_kafka_would(group: Group) -> None:
    layout, members = group
    flat = TopicLayout({t: [set(RACKS)] * n for t, n in layout.items()})  # every rack everywhere
    for assignor in (StickyAssignor(), CooperativeStickyAssignor()):
        assert plain(assignor.assign(flat, members)) == plain(assignor.assign(dict(flat), members))
    rackless = [member(m.member_id, m.subscription.topics, None) for m in members]
    assert plain(StickyAssignor().assign(layout, rackless)) == plain(
        StickyAssignor().assign(dict(layout), rackless)
    )


# --- the leader's metadata watch ------------------------------------------------------------------


def _leader_assigned(rack: str | None, layout: TopicLayout) -> ConsumerEmbedding:
    leader = ConsumerEmbedding(["t"], ["range"], rack_id=rack)
    sub = Subscription(topics=("t",), rack_id=rack).encode()
    leader.assign(
        "range", [JoinGroupMember(member_id="a", group_instance_id=None, metadata=sub)], layout
    )
    return leader


def test_the_leader_notices_replica_racks_changing() -> None:
    before = TopicLayout({"t": [{"r1"}, {"r2"}]})
    moved = TopicLayout({"t": [{"r2"}, {"r2"}]})
    leader = _leader_assigned("r1", before)
    assert leader.metadata_changed(TopicLayout({"t": [{"r1"}, {"r2"}]})) is None
    reason = leader.metadata_changed(moved)
    assert reason is not None and "t: replica racks changed" in reason
    grown = TopicLayout({"t": [{"r1"}, {"r2"}, {"r1"}]})
    assert leader.metadata_changed(grown) == (
        "metadata changed since the assignment (t: 2 partitions -> 3 partitions)"
    )
    assert leader.metadata_changed({"t": 2}) is None  # counts only: nothing to compare


def test_rack_changes_do_not_matter_without_member_racks() -> None:
    leader = _leader_assigned(None, TopicLayout({"t": [{"r1"}, {"r2"}]}))
    assert leader.metadata_changed(TopicLayout({"t": [{"r2"}, {"r2"}]})) is None
