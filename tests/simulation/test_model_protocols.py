"""The coordinator model's protocol rules, driven directly (no members, no network).

Kafka's classic coordinator (``ClassicGroup.supportsProtocols`` / ``selectProtocol``):
the first member of an EMPTY group sets its protocol type; after that a member whose type
differs, or that lists no protocol name every member lists, is refused with
INCONSISTENT_GROUP_PROTOCOL before it gets a member id. The protocol is chosen by vote:
the candidates are the names every member lists, each member votes for the first
candidate in its own list, and the most votes win. The simulation's rolling upgrades
(``_groups.UPGRADES``) rest on these rules.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kgroup._core._messages import JoinGroupRequest, JoinGroupResponse
from kgroup._errors import ErrorCode

from ._model import BrokerConfig, ClassicGroupModel, GroupRecord, GroupState, Timers

E = ErrorCode


class ManualTimers(Timers):
    def __init__(self) -> None:
        self.due: dict[str, Callable[[], None]] = {}

    def schedule(self, key: str, delay_ms: float, fn: Callable[[], None]) -> None:
        self.due[key] = fn

    def cancel(self, key: str) -> None:
        self.due.pop(key, None)

    def fire(self, prefix: str) -> None:
        for key in [k for k in self.due if k.startswith(prefix)]:
            self.due.pop(key)()


class Coordinator:
    def __init__(self) -> None:
        self.timers = ManualTimers()
        self.records: list[GroupRecord] = []
        self.formed: list[tuple[int, str, dict[str, tuple[str, ...]]]] = []
        ids = iter(range(1, 1000))
        self.group = ClassicGroupModel(
            "g",
            config=BrokerConfig(initial_rebalance_delay_ms=0),
            timers=self.timers,
            persist=self.records.append,
            new_id=lambda prefix: f"{prefix}-{next(ids)}",
            on_generation=lambda gen, name, members: self.formed.append((gen, name, members)),
        )

    def join(
        self,
        names: tuple[str, ...],
        *,
        member_id: str = "",
        instance: str | None = None,
        protocol_type: str = "consumer",
    ) -> list[JoinGroupResponse]:
        answers: list[JoinGroupResponse] = []
        request = JoinGroupRequest(
            group_id="g",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type=protocol_type,
            protocols=tuple((n, n.encode()) for n in names),
        )
        self.group.join(request, "client", answers.append)
        return answers

    def member(self, names: tuple[str, ...], protocol_type: str = "consumer") -> str:
        """A dynamic member joins (MEMBER_ID_REQUIRED, then again with its id)."""
        (first,) = self.join(names, protocol_type=protocol_type)
        assert first.error_code == E.MEMBER_ID_REQUIRED
        assert self.join(names, member_id=first.member_id, protocol_type=protocol_type) == []
        return first.member_id

    def form(self) -> str:
        """Complete the join phase (the initial delay, extended while members arrive)."""
        for _ in range(10):
            if self.group.state is not GroupState.PREPARING_REBALANCE:
                break
            self.timers.fire("join:")
        assert self.group.state is GroupState.COMPLETING_REBALANCE
        name = self.group.protocol_name
        assert name is not None
        return name


@pytest.mark.parametrize(
    ("lists", "selected"),
    [
        # eager -> bridge: range is the only name everyone lists
        ([("range",), ("cooperative-sticky", "range"), ("range",)], "range"),
        # bridge -> cooperative: cooperative-sticky is the only common name
        ([("cooperative-sticky", "range"), ("cooperative-sticky",)], "cooperative-sticky"),
        # everyone on the bridge: both names are common, every member votes for its first
        ([("cooperative-sticky", "range"), ("cooperative-sticky", "range")], "cooperative-sticky"),
        # a vote: two members put range first, one cooperative-sticky
        (
            [("range", "cooperative-sticky"), ("cooperative-sticky", "range"), ("range", "x")],
            "range",
        ),
    ],
)
def test_the_protocol_is_chosen_by_vote_among_the_common_names(
    lists: list[tuple[str, ...]], selected: str
) -> None:
    c = Coordinator()
    for names in lists:
        c.member(names)
    assert c.form() == selected
    gen, name, members = c.formed[-1]
    assert (gen, name) == (1, selected)
    assert sorted(members.values()) == sorted(lists)


def test_a_member_with_no_common_name_is_refused_before_it_gets_an_id() -> None:
    c = Coordinator()
    c.member(("range",))
    (answer,) = c.join(("cooperative-sticky",))
    assert answer.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert answer.member_id == ""
    assert not c.group.pending_join
    # the bridge list has a name in common with both
    c.member(("cooperative-sticky", "range"))
    assert c.form() == "range"


def test_a_static_member_replaced_with_no_common_name_is_refused() -> None:
    c = Coordinator()
    assert c.join(("range",), instance="i0") == []  # parked in the initial rebalance
    c.member(("range",))
    c.form()
    first = c.group.static_members["i0"]
    (answer,) = c.join(("cooperative-sticky",), instance="i0")
    assert answer.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert c.group.static_members["i0"] == first  # not replaced


@pytest.mark.parametrize("group_type", ["consumer", "kgroup-leader", "kgroup-shards"])
def test_any_protocol_type_and_only_one_per_group(group_type: str) -> None:
    c = Coordinator()
    c.member(("p",), protocol_type=group_type)
    assert c.group.protocol_type == group_type
    other = "kgroup-leader" if group_type != "kgroup-leader" else "consumer"
    (answer,) = c.join(("p",), protocol_type=other)
    assert answer.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    c.member(("p",), protocol_type=group_type)
    assert c.form() == "p"


def test_an_empty_group_takes_a_new_protocol_type() -> None:
    c = Coordinator()
    member_id = c.member(("p",), protocol_type="kgroup-leader")
    c.form()
    c.group._remove(member_id)  # the last member goes
    c.group._transition(GroupState.PREPARING_REBALANCE)
    c.group._complete_join_phase()
    assert c.group.state is GroupState.EMPTY
    c.member(("range",), protocol_type="consumer")
    assert c.group.protocol_type == "consumer"
