"""The cases the differential test against Kafka's Java assignors found (spec §7.3, §7.6),
by the names they have in tests/integration/test_assignor_differential.py, where each also
runs against Java."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kgroup._core._assignors import Assignor, MemberSubscription
from kgroup._core._consumer_protocol import TopicPartition
from kgroup._core._sticky import CooperativeStickyAssignor, StickyAssignor
from tests.unit.test_sticky import coop_member, counts, readable, sticky_member, tps

TP = TopicPartition


MakeMember = Callable[..., MemberSubscription]
BOTH: list[tuple[Assignor, MakeMember]] = [
    (StickyAssignor(), sticky_member),
    (CooperativeStickyAssignor(), coop_member),
]


@pytest.mark.parametrize(("assignor", "make"), BOTH, ids=["sticky", "cooperative-sticky"])
def test_extra_slot_not_to_owner(assignor: Assignor, make: MakeMember) -> None:
    # a owned all of t0; b and c are new on t0, d on t1 (unequal subscriptions). Of the
    # uneven split 2/1/1 of t0, the 2 goes to a: two moves, not three.
    members = [
        make("a", "t0", owned=tps("t0", 0, 1, 2, 3)),
        make("b", "t0", generation=-1),
        make("c", "t0", generation=-1),
        make("d", "t1", generation=-1),
    ]
    result = readable(assignor.assign({"t0": 4, "t1": 1}, members))
    if assignor.name == "sticky":
        assert result == {"a": ["t0-0", "t0-1"], "b": ["t0-2"], "c": ["t0-3"], "d": ["t1-0"]}
    else:  # t0-2 and t0-3 are withheld until a has revoked them
        assert result == {"a": ["t0-0", "t0-1"], "b": [], "c": [], "d": ["t1-0"]}


@pytest.mark.parametrize(("assignor", "make"), BOTH, ids=["sticky", "cooperative-sticky"])
def test_uneven_within_equal_subscriptions(assignor: Assignor, make: MakeMember) -> None:
    # 8 partitions, 3 members: 3/3/2. The 2 goes to m2 (t0 and t1), so that m0 and m1, which
    # share a subscription, get 3 each.
    members = [make("m0", "t0"), make("m1", "t0"), make("m2", "t0", "t1", instance="i4")]
    assert counts(assignor.assign({"t0": 6, "t1": 2}, members)) == {"m0": 3, "m1": 3, "m2": 2}


def test_new_member_left_empty() -> None:
    # m2 gives up two of its four (withheld this round); the free t0-0 goes to the new m0,
    # which has nothing, not to m1, which keeps t0-5.
    members = [
        coop_member("m0", "t0", generation=-1),
        coop_member("m1", "t0", owned=tps("t0", 5), instance="04"),
        coop_member("m2", "t0", owned=tps("t0", 1, 2, 3, 4)),
    ]
    result = CooperativeStickyAssignor().assign({"t0": 6}, members)
    assert readable(result) == {"m1": ["t0-5"], "m0": ["t0-0"], "m2": ["t0-1", "t0-2"]}


def test_contested_claim() -> None:
    # m0 and m1 both claim t0-0 in generation 1: nobody gets it until both have revoked it
    # (docs/design/deviations.md, row 7).
    members = [
        coop_member("m0", "t0", owned=tps("t0", 0)),
        coop_member("m1", "t0", "t1", owned=tps("t0", 0)),
    ]
    result = CooperativeStickyAssignor().assign({"t0": 2, "t1": 1}, members)
    assert readable(result) == {"m0": ["t0-1"], "m1": ["t1-0"]}


def test_balance_before_stickiness() -> None:
    # Only 5/5/5 is balanced, and it takes both t0 partitions m1 owned: Java stops at 4/5/6
    # and moves one (docs/design/deviations.md, row 11); kgroup balances.
    members = [
        sticky_member("m0", "t0", generation=-1),
        sticky_member("m1", "t0", "t1", owned=(TP("t0", 1), TP("t0", 3), TP("t1", 2))),
        sticky_member("m2", "t1", generation=-1),
    ]
    result = StickyAssignor().assign({"t0": 5, "t1": 10}, members)
    assert counts(result) == {"m0": 5, "m1": 5, "m2": 5}
    assert TP("t1", 2) in result["m1"].partitions
