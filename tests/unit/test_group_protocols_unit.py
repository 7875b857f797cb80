"""Groups that are not consumers: GroupProtocol's wire format, the cooperative rule for
items, the built-in LeaderElection and WorkSharding, and real members over the in-memory
coordinator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgroup import (
    LEADER,
    ConfigError,
    GroupMember,
    GroupProtocol,
    LeaderElection,
    MemberState,
    ProtocolAssignment,
    ProtocolMember,
    RemoteProtocolError,
    UsageError,
    WorkSharding,
)
from kgroup._core._group_protocol import (
    ProtocolEmbedding,
    balanced_sticky,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
    owners_by_claim,
    withhold_moves,
)
from kgroup._core._messages import JoinGroupMember
from kgroup._core._state import Generation
from kgroup.testing import InMemoryCoordinator
from tests.unit._docs import run_doc_example
from tests.unit.test_in_memory_coordinator import Members, config

# --- wire format --------------------------------------------------------------------------------


def test_metadata_and_assignment_round_trip() -> None:
    data = encode_metadata(b"\x01\x02", {"b", "a"}, 7)
    assert data[:2] == b"\x00\x00"  # version 0
    assert decode_metadata(data) == (b"\x01\x02", frozenset({"a", "b"}), 7)
    assignment = ProtocolAssignment(frozenset({"x", "y"}), b"who")
    assert decode_assignment(encode_assignment(assignment)) == assignment
    # a later version with more fields: the v0 fields are read, the rest ignored
    assert decode_metadata(b"\x00\x05" + data[2:] + b"more") == (b"\x01\x02", frozenset("ab"), 7)


@pytest.mark.parametrize("cut", [0, 1, 3, 7, 12])
def test_truncated_metadata_is_a_remote_protocol_error(cut: int) -> None:
    data = encode_metadata(b"abc", {"item"}, 3)
    with pytest.raises(RemoteProtocolError, match="GroupProtocol metadata"):
        decode_metadata(data[:cut])


# --- the cooperative rule and claims ------------------------------------------------------------


def pm(mid: str, owned: Sequence[str] = (), gen: int = 1, meta: bytes = b"") -> ProtocolMember:
    return ProtocolMember(mid, None, meta, frozenset(owned), gen)


def test_claims_resolve_by_generation_and_cancel_on_ties() -> None:
    members = [pm("a", ["x", "y"], 3), pm("b", ["x"], 4), pm("c", ["y"], 3)]
    assert owners_by_claim(members) == {"x": "b"}  # y: a and c tie in generation 3


def test_moves_are_withheld_under_cooperative() -> None:
    members = [pm("a", ["x", "y"]), pm("b")]
    target = {"a": ProtocolAssignment(frozenset({"x"})), "b": ProtocolAssignment(frozenset({"y"}))}
    out = withhold_moves(members, target)
    assert out["a"].items == {"x"}
    assert out["b"].items == frozenset()  # y waits until a has revoked it


def test_an_item_given_twice_is_an_assignment_error() -> None:
    from kgroup import AssignmentError

    target = {"a": ProtocolAssignment(frozenset({"x"})), "b": ProtocolAssignment(frozenset({"x"}))}
    with pytest.raises(AssignmentError, match="'x' assigned to both"):
        withhold_moves([pm("a"), pm("b")], target)


@settings(max_examples=200, deadline=None)
@given(
    items=st.sets(st.text("abcdefgh", min_size=1, max_size=3), max_size=30),
    n=st.integers(1, 8),
    data=st.data(),
)
def test_balanced_sticky_is_balanced_complete_and_sticky(items: set[str], n: int, data) -> None:
    ids = [f"m{i}" for i in range(n)]
    universe = sorted(items)
    prior = {i: data.draw(st.sampled_from([None, *ids])) for i in universe}
    members = [pm(m, [i for i in universe if prior[i] == m]) for m in ids]
    shares = balanced_sticky(universe, members)
    counts = [len(shares[m]) for m in ids]
    assert max(counts) - min(counts) <= 1
    assert sorted(i for s in shares.values() for i in s) == universe  # each item once
    quota = {m: len(shares[m]) for m in ids}
    for m in ids:  # a member keeps what it owned, up to its share
        kept = shares[m] & {i for i in universe if prior[i] == m}
        assert len(kept) == min(quota[m], sum(1 for i in universe if prior[i] == m))
    assert balanced_sticky(universe, list(reversed(members))) == shares  # deterministic


# --- built-ins, leader side ---------------------------------------------------------------------


def election_members(holder: str | None = None) -> list[ProtocolMember]:
    return [
        ProtocolMember(
            mid,
            None,
            LeaderElection(info=mid.encode()).metadata(),
            frozenset({LEADER}) if mid == holder else frozenset(),
            5,
        )
        for mid in ("m-b", "m-a", "m-c")
    ]


def test_leader_election_picks_one_and_keeps_the_holder() -> None:
    election = LeaderElection()
    first = election.assign(election_members())
    assert [m for m, a in first.items() if a.items] == ["m-a"]
    again = election.assign(election_members(holder="m-c"))
    assert [m for m, a in again.items() if a.items] == ["m-c"]
    election.on_assignment(again["m-b"], 6)
    assert (election.leader, election.leader_info, election.generation) == ("m-c", b"m-c", 6)


def test_leader_election_survives_unreadable_data() -> None:
    election = LeaderElection()
    election.on_assignment(ProtocolAssignment(frozenset(), b"\xff"), 3)
    assert election.leader is None


def test_work_sharding_shares_the_union_of_advertised_resources() -> None:
    a, b = WorkSharding(["r1", "r2"]), WorkSharding(["r3"])
    members = [pm("a", meta=a.metadata()), pm("b", meta=b.metadata()), pm("c", meta=b"\x01")]
    shares = a.assign(members)
    assert sorted(i for s in shares.values() for i in s.items) == ["r1", "r2", "r3"]
    assert sorted(len(s.items) for s in shares.values()) == [1, 1, 1]
    assert a.set_resources(["r1"]) and not a.set_resources({"r1"})
    with pytest.raises(ConfigError, match="resources"):
        WorkSharding([""])


class NotAType(GroupProtocol):
    protocol_type = "consumer"

    def assign(self, members: Sequence[ProtocolMember]) -> Mapping[str, ProtocolAssignment]:
        return {}


def test_protocol_type_consumer_is_refused() -> None:
    with pytest.raises(ConfigError, match="other than 'consumer'"):
        ProtocolEmbedding(NotAType())


def test_embedding_listener_decisions_eager_and_cooperative() -> None:
    eager = ProtocolEmbedding(WorkSharding(["r"], cooperative=False))
    eager.owned = frozenset({"r"})
    assert [c.callback for c in eager.prepare(lost=False)] == ["on_partitions_revoked"]
    coop = ProtocolEmbedding(WorkSharding(["r", "s"]))
    coop.owned = frozenset({"r", "s"})
    assert coop.prepare(lost=False) == ()
    ((_name, meta),) = coop.metadata(Generation(4, "m", "balanced-sticky"))
    assert decode_metadata(meta)[1:] == (frozenset({"r", "s"}), 4)
    completion = coop.complete(
        Generation(5, "m", "balanced-sticky"),
        encode_assignment(ProtocolAssignment(frozenset({"r"}))),
    )
    assert [(c.callback, c.partitions) for c in completion.calls] == [
        ("on_partitions_revoked", frozenset({"s"})),
        ("on_partitions_assigned", frozenset()),
    ]
    assert completion.rejoin_reason is not None
    leader_view = coop.assign(
        "balanced-sticky",
        [JoinGroupMember(member_id="m", group_instance_id=None, metadata=meta)],
        {},
    )
    assert decode_assignment(leader_view["m"]).items == {"r", "s"}


# --- real members over the in-memory coordinator ------------------------------------------------


@pytest.fixture
async def group() -> AsyncIterator[Members]:
    members = Members(InMemoryCoordinator({}))
    try:
        yield members
    finally:
        await members.aclose()


async def start(group: Members, protocol: GroupProtocol) -> GroupMember:
    return await group.start(protocol, topics=())


def stable(members: Sequence[GroupMember]) -> bool:
    return all(m.state is MemberState.STABLE for m in members)


async def test_one_leader_and_everyone_knows_it(group: Members) -> None:
    elections = [LeaderElection(info=f"host-{i}".encode()) for i in range(3)]
    members = [await start(group, e) for e in elections]
    await group.wait(
        lambda: (
            stable(members)
            and sum(LEADER in m.assignment for m in members) == 1
            and len({e.leader for e in elections}) == 1
            and elections[0].leader is not None
        ),
        "one leader",
    )
    leader = next(m for m in members if LEADER in m.assignment)
    index = members.index(leader)
    assert elections[1].leader_info == f"host-{index}".encode()
    await leader.close()
    rest = [m for m in members if m is not leader]
    await group.wait(
        lambda: stable(rest) and sum(LEADER in m.assignment for m in rest) == 1, "new leader"
    )
    new = next(m for m in rest if LEADER in m.assignment)
    assert all(e.leader == new.member_id for i, e in enumerate(elections) if i != index)


async def test_work_is_sharded_and_follows_changes(group: Members) -> None:
    names = [f"r{i}" for i in range(10)]
    shardings = [WorkSharding(names) for _ in range(3)]
    members = [await start(group, s) for s in shardings]

    def spread(ms: Sequence[GroupMember], total: int) -> bool:
        held = [i for m in ms for i in m.assignment]
        counts = [len(m.assignment) for m in ms]
        return (
            stable(ms) and len(held) == len(set(held)) == total and max(counts) - min(counts) <= 1
        )

    await group.wait(lambda: spread(members, 10), "10 over 3")
    for s, m in zip(shardings, members, strict=True):
        s.set_resources([*names, "r10", "r11"])
        m.enforce_rebalance("resources changed")
    await group.wait(lambda: spread(members, 12), "12 over 3")
    await members[2].close()
    await group.wait(lambda: spread(members[:2], 12), "12 over 2")
    with pytest.raises(UsageError, match="consumer groups"):
        await members[0].subscribe(["t"])


def test_a_protocol_member_takes_no_topics() -> None:
    with pytest.raises(ConfigError, match="subscribes to no topics"):
        GroupMember(config(), protocol=LeaderElection())


def test_the_guides_own_protocol_example_runs() -> None:
    """docs/guide/groups.md, "Writing your own protocol": the class as printed, run as the
    leader would run it (through the embedding, cooperative rule included)."""
    namespace = run_doc_example("guide/groups.md", "## Writing your own protocol")
    protocol = namespace["Partitioned"](2)  # type: ignore[operator]
    embedding = ProtocolEmbedding(protocol)
    ((name, meta),) = embedding.metadata(Generation(-1, "", None))
    other = ProtocolEmbedding(namespace["Partitioned"](1))  # type: ignore[operator]
    ((_, other_meta),) = other.metadata(Generation(-1, "", None))
    out = embedding.assign(
        name,
        [
            JoinGroupMember(member_id="a", group_instance_id=None, metadata=meta),
            JoinGroupMember(member_id="b", group_instance_id=None, metadata=other_meta),
        ],
        {},
    )
    assert decode_assignment(out["a"]).items == {"slot-0", "slot-1"}
    assert decode_assignment(out["b"]).items == {"slot-2"}


def test_a_static_leader_with_a_new_member_id_asks_for_a_rebalance() -> None:
    """KIP-345: a static leader restarted within its session gets its stored assignment
    back under a new member id, with no rebalance; the data names the old id. It asks for
    one rebalance so that every member learns the new id (simulation seed 246)."""
    leader = LeaderElection()
    stored = leader.assign([ProtocolMember("i1-old", "i1", b"", frozenset(), -1), pm("m-2")])[
        "i1-old"
    ]
    embedding = ProtocolEmbedding(LeaderElection())
    completion = embedding.complete(
        Generation(4, "i1-new", "sticky-leader"), encode_assignment(stored)
    )
    assert completion.rejoin_reason is not None and "member id changed" in completion.rejoin_reason
    same = ProtocolEmbedding(LeaderElection())
    assert (
        same.complete(
            Generation(4, "i1-old", "sticky-leader"), encode_assignment(stored)
        ).rejoin_reason
        is None
    )
    follower = ProtocolEmbedding(LeaderElection())
    other = leader.assign([ProtocolMember("i1-old", "i1", b"", frozenset(), -1), pm("m-2")])["m-2"]
    assert (
        follower.complete(
            Generation(4, "m-2", "sticky-leader"), encode_assignment(other)
        ).rejoin_reason
        is None
    )
