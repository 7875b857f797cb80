"""Built-in eager assignors (spec §7.3) and rebalance-protocol selection (§7.5)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgroup._core._assignors import (
    Assignor,
    BaseAssignor,
    MemberSubscription,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    get_builtin_assignor,
    select_rebalance_protocol,
    sort_members,
)
from kgroup._core._consumer_protocol import Assignment, Subscription, TopicPartition
from kgroup._errors import AssignmentError, ConfigError
from tests.unit._docs import run_doc_example

TP = TopicPartition
EAGER = RebalanceProtocol.EAGER
COOPERATIVE = RebalanceProtocol.COOPERATIVE


def member(member_id: str, *topics: str, instance: str | None = None) -> MemberSubscription:
    return MemberSubscription(member_id, instance, Subscription(topics=topics))


def partitions(result: dict[str, Assignment]) -> dict[str, list[str]]:
    """Readable form: member id -> ["t0-0", ...]."""
    return {mid: [str(tp) for tp in asg.partitions] for mid, asg in result.items()}


# --- range ---------------------------------------------------------------------------------


def test_a3_range_two_dynamic_members_two_topics() -> None:
    members = [member("b-7f3c", "t0", "t1"), member("a-19e2", "t0", "t1")]
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, members)
    assert partitions(result) == {
        "a-19e2": ["t0-0", "t0-1", "t1-0", "t1-1"],
        "b-7f3c": ["t0-2", "t1-2"],
    }


def test_a4_range_orders_static_members_by_instance_id() -> None:
    members = [member("a-1", "t", instance="i2"), member("z-1", "t", instance="i1")]
    result = RangeAssignor().assign({"t": 3}, members)
    assert partitions(result) == {"z-1": ["t-0", "t-1"], "a-1": ["t-2"]}


def test_static_members_come_before_dynamic_ones() -> None:
    members = [member("a-1", "t"), member("z-1", "t", instance="i9")]
    result = RangeAssignor().assign({"t": 3}, members)
    assert partitions(result) == {"z-1": ["t-0", "t-1"], "a-1": ["t-2"]}


def test_sort_members_order() -> None:
    members = [
        member("m3"),
        member("m9", instance="b"),
        member("m1"),
        member("m0", instance="a"),
    ]
    assert [m.member_id for m in sort_members(members)] == ["m0", "m9", "m1", "m3"]


def test_member_ids_sort_in_java_string_order() -> None:
    # Java's String.compareTo compares UTF-16 code units: U+1F600 is the surrogate pair
    # D83D DE00, which sorts before U+E000, although its code point is larger.
    members = [member("\ue000", "t0"), member("\U0001f600", "t0")]
    assert [m.member_id for m in sort_members(members)] == ["\U0001f600", "\ue000"]
    for assignor in (RangeAssignor(), RoundRobinAssignor()):
        assert partitions(assignor.assign({"t0": 2}, members)) == {
            "\U0001f600": ["t0-0"],
            "\ue000": ["t0-1"],
        }
    statics = [member("a", instance="\ue000"), member("b", instance="\U0001f600")]
    assert [m.member_id for m in sort_members(statics)] == ["b", "a"]


def test_range_members_with_different_subscriptions() -> None:
    # Java RangeAssignor/RoundRobinAssignor javadoc case: t0, t1, t2 have 1, 2, 3 partitions.
    members = [member("c0", "t0"), member("c1", "t0", "t1"), member("c2", "t0", "t1", "t2")]
    result = RangeAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, members)
    assert partitions(result) == {
        "c0": ["t0-0"],
        "c1": ["t1-0"],
        "c2": ["t1-1", "t2-0", "t2-1", "t2-2"],
    }


def test_range_extra_partitions_go_to_the_first_members() -> None:
    members = [member(f"m{i}", "t") for i in range(3)]
    result = RangeAssignor().assign({"t": 8}, members)
    assert partitions(result) == {
        "m0": ["t-0", "t-1", "t-2"],
        "m1": ["t-3", "t-4", "t-5"],
        "m2": ["t-6", "t-7"],
    }


# --- roundrobin ----------------------------------------------------------------------------


def test_roundrobin_identical_subscriptions() -> None:
    # Java RoundRobinAssignor javadoc: C0 and C1 on t0 and t1, 3 partitions each.
    members = [member("C1", "t0", "t1"), member("C0", "t0", "t1")]
    result = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, members)
    assert partitions(result) == {
        "C0": ["t0-0", "t0-2", "t1-1"],
        "C1": ["t0-1", "t1-0", "t1-2"],
    }


def test_roundrobin_members_with_different_subscriptions() -> None:
    # Java RoundRobinAssignor javadoc: t0, t1, t2 have 1, 2, 3 partitions.
    members = [member("c0", "t0"), member("c1", "t0", "t1"), member("c2", "t0", "t1", "t2")]
    result = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, members)
    assert partitions(result) == {
        "c0": ["t0-0"],
        "c1": ["t1-0"],
        "c2": ["t1-1", "t2-0", "t2-1", "t2-2"],
    }


def test_roundrobin_can_be_uneven_for_identical_subscriptions_in_a_mixed_group() -> None:
    # The circle's position carries over between topics: after y takes t1-0 the circle is
    # back at a, so a also gets t2-0 and b gets nothing. This is the Java reference's
    # behaviour (only a group of identical subscriptions is guaranteed balanced).
    members = [member("a", "t0", "t2"), member("b", "t0", "t2"), member("y", "t1")]
    result = RoundRobinAssignor().assign({"t0": 1, "t1": 1, "t2": 1}, members)
    assert partitions(result) == {"a": ["t0-0", "t2-0"], "b": [], "y": ["t1-0"]}


def test_roundrobin_static_order() -> None:
    members = [member("a", "t", instance="i2"), member("z", "t", instance="i1")]
    result = RoundRobinAssignor().assign({"t": 3}, members)
    assert partitions(result) == {"z": ["t-0", "t-2"], "a": ["t-1"]}


# --- shared behaviour ----------------------------------------------------------------------

ASSIGNORS = [RangeAssignor(), RoundRobinAssignor()]


@pytest.mark.parametrize("assignor", ASSIGNORS, ids=lambda a: a.name)
def test_member_without_partitions_still_gets_an_empty_entry(assignor: Assignor) -> None:
    members = [member("m1", "t"), member("m2", "t"), member("m3", "unknown"), member("m4")]
    result = assignor.assign({"t": 1}, members)
    assert set(result) == {"m1", "m2", "m3", "m4"}
    assert result["m2"] == Assignment(partitions=(), user_data=None)
    assert result["m3"] == Assignment(partitions=(), user_data=None)
    assert result["m4"] == Assignment(partitions=(), user_data=None)


@pytest.mark.parametrize("assignor", ASSIGNORS, ids=lambda a: a.name)
def test_topics_without_metadata_are_skipped(assignor: Assignor) -> None:
    members = [member("m1", "t", "gone"), member("m2", "gone")]
    result = assignor.assign({"t": 2, "unsubscribed": 4}, members)
    assert partitions(result) == {"m1": ["t-0", "t-1"], "m2": []}


@pytest.mark.parametrize("assignor", ASSIGNORS, ids=lambda a: a.name)
def test_no_members(assignor: Assignor) -> None:
    assert assignor.assign({"t": 3}, []) == {}


@pytest.mark.parametrize("assignor", ASSIGNORS, ids=lambda a: a.name)
def test_duplicate_member_id_is_an_assignment_error(assignor: Assignor) -> None:
    with pytest.raises(AssignmentError, match="'m1' appears twice"):
        assignor.assign({"t": 3}, [member("m1", "t"), member("m1", "t")])


@pytest.mark.parametrize("assignor", ASSIGNORS, ids=lambda a: a.name)
def test_negative_partition_count_is_an_assignment_error(assignor: Assignor) -> None:
    with pytest.raises(AssignmentError, match="partition count -1 for topic 't'"):
        assignor.assign({"t": -1}, [member("m1", "t")])


@pytest.mark.parametrize("assignor", ASSIGNORS, ids=lambda a: a.name)
def test_builtin_assignor_surface(assignor: Assignor) -> None:
    assert isinstance(assignor, Assignor)
    assert assignor.supported_protocols == (EAGER,)
    assert assignor.user_data(["t"]) is None
    assignor.on_assignment(Assignment(partitions=()), 3)  # accepted and ignored


def test_get_builtin_assignor() -> None:
    assert isinstance(get_builtin_assignor("range"), RangeAssignor)
    assert isinstance(get_builtin_assignor("roundrobin"), RoundRobinAssignor)
    assert get_builtin_assignor("range").name == "range"
    assert get_builtin_assignor("range") is not get_builtin_assignor("range")


def test_get_builtin_assignor_unknown_name_lists_known_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"'fancy'.*cooperative-sticky, range, roundrobin, sticky"
    ) as info:
        get_builtin_assignor("fancy")
    assert info.value.field == "assignors"


# --- rebalance protocol selection (§7.5, G44) ---------------------------------------------


class FakeAssignor(BaseAssignor):
    def __init__(self, name: str, *protocols: RebalanceProtocol) -> None:
        self.name = name
        self.supported_protocols = protocols

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, Assignment]:
        return {m.member_id: Assignment(partitions=()) for m in members}


COOPERATIVE_STICKY = FakeAssignor("cooperative-sticky", COOPERATIVE, EAGER)


def test_g44_range_and_roundrobin_is_eager() -> None:
    assert select_rebalance_protocol([RangeAssignor(), RoundRobinAssignor()]) is EAGER


def test_g44_range_and_cooperative_sticky_is_eager() -> None:
    assert select_rebalance_protocol([RangeAssignor(), COOPERATIVE_STICKY]) is EAGER


def test_g44_cooperative_sticky_alone_is_cooperative() -> None:
    assert select_rebalance_protocol([COOPERATIVE_STICKY]) is COOPERATIVE


def test_empty_assignor_list_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        select_rebalance_protocol([])
    assert info.value.field == "assignors"


def test_no_common_protocol_is_a_config_error() -> None:
    cooperative_only = FakeAssignor("coop", COOPERATIVE)
    with pytest.raises(ConfigError, match="no rebalance protocol") as info:
        select_rebalance_protocol([RangeAssignor(), cooperative_only])
    assert info.value.field == "assignors"
    assert "coop: COOPERATIVE" in str(info.value)


def test_duplicate_assignor_names_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"duplicate assignor name.*range"):
        select_rebalance_protocol([RangeAssignor(), RoundRobinAssignor(), RangeAssignor()])


def test_custom_assignor_satisfies_the_protocol() -> None:
    class Custom:
        name = "custom"
        supported_protocols = (COOPERATIVE,)

        def user_data(self, topics: Collection[str]) -> bytes | None:
            return b"x"

        def assign(
            self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
        ) -> dict[str, Assignment]:
            return {}

        def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
            pass

    custom: Assignor = Custom()
    assert isinstance(custom, Assignor)
    assert select_rebalance_protocol([custom]) is COOPERATIVE


# --- properties ----------------------------------------------------------------------------

TOPIC_POOL = ("t0", "t1", "t2", "t3")  # t3 never has metadata


@st.composite
def groups(
    draw: st.DrawFn, identical: bool = False
) -> tuple[dict[str, int], list[MemberSubscription]]:
    partitions_per_topic = draw(
        st.dictionaries(st.sampled_from((*TOPIC_POOL[:3], "other")), st.integers(0, 13))
    )
    member_ids = draw(
        st.lists(st.text("abcxyz-019", min_size=1, max_size=5), max_size=8, unique=True)
    )
    instance_pool = draw(st.permutations([f"i{n}" for n in range(len(member_ids))]))
    topic_sets = st.frozensets(st.sampled_from(TOPIC_POOL))
    shared = draw(topic_sets)
    members = []
    for member_id, instance in zip(member_ids, instance_pool, strict=True):
        topics = shared if identical else draw(topic_sets)
        static = draw(st.booleans())
        members.append(
            MemberSubscription(
                member_id,
                instance if static else None,
                Subscription(topics=tuple(sorted(topics))),
            )
        )
    return partitions_per_topic, members


def check_valid(
    partitions_per_topic: dict[str, int],
    members: list[MemberSubscription],
    result: dict[str, Assignment],
) -> None:
    """Every member has an entry; every partition of every subscribed topic with metadata is
    assigned exactly once, to a member that subscribes to its topic; nothing else is."""
    assert set(result) == {m.member_id for m in members}
    subscribed = {m.member_id: set(m.subscription.topics) for m in members}
    owners: Counter[TopicPartition] = Counter()
    for member_id, asg in result.items():
        assert isinstance(asg, Assignment)
        assert asg.user_data is None
        assert list(asg.partitions) == sorted(asg.partitions)
        for tp in asg.partitions:
            assert tp.topic in subscribed[member_id]
            owners[tp] += 1
    all_subscribed = set().union(*subscribed.values())
    expected = {
        TP(topic, p)
        for topic, count in partitions_per_topic.items()
        if topic in all_subscribed
        for p in range(count)
    }
    assert set(owners) == expected
    assert all(n == 1 for n in owners.values())


@given(groups())
def test_range_property(group: tuple[dict[str, int], list[MemberSubscription]]) -> None:
    partitions_per_topic, members = group
    result = RangeAssignor().assign(partitions_per_topic, members)
    check_valid(partitions_per_topic, members, result)
    ordered = sort_members(members)
    for topic, count in partitions_per_topic.items():
        subscribers = [m.member_id for m in ordered if topic in m.subscription.topics]
        per_member = [
            [tp.partition for tp in result[mid].partitions if tp.topic == topic]
            for mid in subscribers
        ]
        sizes = [len(ps) for ps in per_member]
        if sizes:
            assert max(sizes) - min(sizes) <= 1
            assert sizes == sorted(sizes, reverse=True)  # the extra ones go to the first members
            # consecutive blocks, in member order
            assert [p for ps in per_member for p in ps] == list(range(count))


@given(groups())
def test_roundrobin_property(group: tuple[dict[str, int], list[MemberSubscription]]) -> None:
    partitions_per_topic, members = group
    check_valid(
        partitions_per_topic, members, RoundRobinAssignor().assign(partitions_per_topic, members)
    )


@given(groups(identical=True))
def test_roundrobin_balanced_when_subscriptions_are_identical(
    group: tuple[dict[str, int], list[MemberSubscription]],
) -> None:
    partitions_per_topic, members = group
    result = RoundRobinAssignor().assign(partitions_per_topic, members)
    check_valid(partitions_per_topic, members, result)
    sizes = [len(asg.partitions) for asg in result.values()]
    if sizes:
        assert max(sizes) - min(sizes) <= 1


@given(groups(), st.data())
def test_output_does_not_depend_on_member_input_order(
    group: tuple[dict[str, int], list[MemberSubscription]], data: st.DataObject
) -> None:
    partitions_per_topic, members = group
    shuffled = data.draw(st.permutations(members))
    for assignor in ASSIGNORS:
        assert assignor.assign(partitions_per_topic, members) == assignor.assign(
            partitions_per_topic, shuffled
        )


@given(groups())
def test_assignments_survive_the_wire(
    group: tuple[dict[str, int], list[MemberSubscription]],
) -> None:
    partitions_per_topic, members = group
    for assignor in ASSIGNORS:
        for asg in assignor.assign(partitions_per_topic, members).values():
            assert Assignment.decode(asg.encode()) == asg


def test_the_member_guides_custom_assignor_runs() -> None:
    """docs/guide/member.md, "Writing your own assignor": the class as printed."""
    from kgroup import Subscription

    namespace = run_doc_example("guide/member.md", "### Writing your own assignor")
    assignor = namespace["ByRegion"]()  # type: ignore[operator]
    members = [
        MemberSubscription("a", None, Subscription(topics=("t",), rack_id="region-0")),
        MemberSubscription("b", None, Subscription(topics=("t",), rack_id="region-1")),
    ]
    result = assignor.assign({"t": 4}, members)
    assert result["a"].partitions == (TopicPartition("t", 0), TopicPartition("t", 2))
    assert result["b"].partitions == (TopicPartition("t", 1), TopicPartition("t", 3))
