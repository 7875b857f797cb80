"""The handoff on close (deviations.md row 14): a cooperative-sticky member rejoins once with
a leaving mark after its user data; a kgroup leader gives it nothing, withholds what it
owned and marks the generation for a follow-up; the member then revokes and leaves. A
leader that ignores the mark gives the partitions back, and close() falls back to the
ordinary revoke-then-leave."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from kgroup import GroupConfig, GroupMember, MemberState, TopicPartition
from kgroup._core._consumer_protocol import Assignment, Subscription
from kgroup._core._embedding import FOLLOW_UP_MARKER, ConsumerEmbedding
from kgroup._core._messages import JoinGroupMember
from kgroup._core._state import Generation
from kgroup._core._sticky import CooperativeStickyAssignor
from kgroup._core._sticky_user_data import (
    LEAVING_MARK,
    cooperative_sticky_leaving,
    decode_cooperative_sticky_user_data,
    encode_cooperative_sticky_user_data,
)
from kgroup.testing import InMemoryCoordinator, MockTransport
from kgroup.testing import messages as m

TP = TopicPartition
TOPIC = "t"


def tps(*partitions: int) -> tuple[TopicPartition, ...]:
    return tuple(TP(TOPIC, p) for p in partitions)


# --- the user data --------------------------------------------------------------------------


def test_the_leaving_mark_round_trips_after_the_generation() -> None:
    data = encode_cooperative_sticky_user_data(7, leaving=True)
    assert data == b"\x00\x00\x00\x07" + LEAVING_MARK
    assert decode_cooperative_sticky_user_data(data) == 7
    assert cooperative_sticky_leaving(data)


@pytest.mark.parametrize(
    "data",
    [
        None,
        b"",
        b"\x00\x00\x00\x07",  # the plain form, as Java and kgroup always wrote it
        LEAVING_MARK,  # no generation in front
        b"\x00\x00\x00\x07" + LEAVING_MARK + b"x",  # more after the mark
        b"\x00\x00\x00\x07" + LEAVING_MARK[:-1],
    ],
)
def test_only_the_exact_form_is_read_as_leaving(data: bytes | None) -> None:
    assert not cooperative_sticky_leaving(data)


def test_old_user_data_still_decodes() -> None:
    assert decode_cooperative_sticky_user_data(b"\x00\x00\x00\x05") == 5
    assert encode_cooperative_sticky_user_data(5) == b"\x00\x00\x00\x05"
    assert decode_cooperative_sticky_user_data(b"\x00\x01") == -1


# --- the leader -----------------------------------------------------------------------------


def join(
    member_id: str, owned: Sequence[TopicPartition], generation: int, *, leaving: bool = False
) -> JoinGroupMember:
    sub = Subscription(
        topics=(TOPIC,),
        user_data=encode_cooperative_sticky_user_data(generation, leaving=leaving),
        owned_partitions=tuple(owned),
        generation_id=generation,
    )
    return JoinGroupMember(member_id=member_id, group_instance_id=None, metadata=sub.encode())


def assign(
    members: Sequence[JoinGroupMember], partitions: int = 12, *, marks: list[bytes] | None = None
) -> dict[str, Assignment]:
    """The leader's assignments, decoded; ``marks`` gets the bytes after each."""
    leader = ConsumerEmbedding([TOPIC], ["cooperative-sticky"])
    out = leader.assign("cooperative-sticky", members, {TOPIC: partitions})
    decoded = {mid: Assignment.decode_with_tail(data) for mid, data in out.items()}
    if marks is not None:
        marks.extend(tail for _, tail in decoded.values())
    return {mid: assignment for mid, (assignment, _) in decoded.items()}


def test_the_leader_gives_a_leaver_nothing_and_withholds_what_it_owned() -> None:
    marks: list[bytes] = []
    out = assign(
        [
            join("a", tps(0, 1, 2, 3), 4),
            join("b", tps(4, 5, 6, 7), 4),
            join("c", tps(8, 9, 10, 11), 4, leaving=True),
        ],
        marks=marks,
    )
    assert out["c"].partitions == ()
    assert set(out["a"].partitions) == set(tps(0, 1, 2, 3))  # survivors keep theirs
    assert set(out["b"].partitions) == set(tps(4, 5, 6, 7))
    assert marks == [FOLLOW_UP_MARKER] * 3
    # The follow-up (the leaver gone) balances its partitions among the others.
    marks.clear()
    again = assign([join(mid, out[mid].partitions, 5) for mid in ("a", "b")], marks=marks)
    assert {len(a.partitions) for a in again.values()} == {6}
    assert set(again["a"].partitions) >= set(tps(0, 1, 2, 3))
    assert marks == [b"", b""]


def test_balance_among_the_others_is_as_if_the_leaver_were_absent() -> None:
    """The others' target is what it would be without the leaver: a survivor that held
    less than its share keeps its claims and gets the free partitions."""
    marks: list[bytes] = []
    out = assign(
        [
            join("a", tps(0, 1), 4),
            join("b", tps(2, 3, 4, 5, 6), 4, leaving=True),
        ],
        partitions=8,
        marks=marks,
    )
    assert out["b"].partitions == ()
    assert set(out["a"].partitions) == set(tps(0, 1, 7))  # 7 was free; b's are withheld
    assert marks == [FOLLOW_UP_MARKER] * 2


def test_a_lone_leaver_gets_nothing() -> None:
    out = assign([join("a", tps(0, 1), 3, leaving=True)], partitions=2)
    assert out["a"].partitions == ()


def test_a_contested_claim_of_a_leaver_is_still_withheld() -> None:
    """b (older generation) and the leaver c both claim partition 0: it goes to nobody
    this generation (a newer claimant still holds it)."""
    out = assign(
        [
            join("a", tps(1), 4),
            join("b", tps(0), 3),
            join("c", tps(0, 2), 4, leaving=True),
        ],
        partitions=3,
    )
    held = [tp for a in out.values() for tp in a.partitions]
    assert TP(TOPIC, 0) not in held and TP(TOPIC, 2) not in held
    assert out["c"].partitions == ()


# --- the member's embedding -----------------------------------------------------------------


def test_the_embedding_marks_only_a_cooperative_sticky_member_that_owns_something() -> None:
    emb = ConsumerEmbedding([TOPIC], ["cooperative-sticky"])
    generation = Generation(3, "a", "cooperative-sticky")
    assert not emb.begin_handoff(generation)  # owns nothing
    emb.owned = frozenset(tps(0))
    assert emb.begin_handoff(generation)
    sub = Subscription.decode(dict(emb.metadata(generation))["cooperative-sticky"])
    assert cooperative_sticky_leaving(sub.user_data)
    assert sub.owned_partitions == tps(0) and sub.generation_id == 3
    emb.end_handoff()
    sub = Subscription.decode(dict(emb.metadata(generation))["cooperative-sticky"])
    assert not cooperative_sticky_leaving(sub.user_data)
    eager = ConsumerEmbedding([TOPIC], ["cooperative-sticky", "range"])
    eager.owned = frozenset(tps(0))
    assert not eager.begin_handoff(Generation(3, "a", "cooperative-sticky"))
    other = ConsumerEmbedding([TOPIC], ["sticky"])
    other.owned = frozenset(tps(0))
    assert not other.begin_handoff(Generation(3, "a", "sticky"))


def test_the_leavers_completion_revokes_everything() -> None:
    emb = ConsumerEmbedding([TOPIC], ["cooperative-sticky"])
    emb.owned = frozenset(tps(0, 1))
    emb.begin_handoff(Generation(3, "a", "cooperative-sticky"))
    emb.metadata(Generation(3, "a", "cooperative-sticky"))
    empty = Assignment(partitions=()).encode() + FOLLOW_UP_MARKER
    completion = emb.complete(Generation(4, "a", "cooperative-sticky"), empty)
    assert [(c.callback, c.partitions) for c in completion.calls] == [
        ("on_partitions_revoked", frozenset(tps(0, 1))),
        ("on_partitions_assigned", frozenset()),
    ]
    assert emb.owned == frozenset()


# --- the runtime, on the in-memory coordinator ----------------------------------------------


class Recorder:
    def __init__(self, name: str, log: list[tuple[str, str, frozenset[TopicPartition]]]) -> None:
        self.name, self.log = name, log

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append((self.name, "assigned", partitions))

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append((self.name, "revoked", partitions))

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.log.append((self.name, "lost", partitions))


def config(**overrides: Any) -> GroupConfig:
    settings: dict[str, Any] = {
        "bootstrap_servers": "in-memory:9092",
        "group_id": "g",
        "topics": [TOPIC],
        "assignors": ["cooperative-sticky"],
        "session_timeout_ms": 6_000,
        "heartbeat_interval_ms": 1_000,
        "retry_backoff_ms": 10,
        "retry_backoff_max_ms": 50,
        "request_timeout_ms": 4_000,
    }
    settings.update(overrides)
    return GroupConfig(**settings)


class Group:
    def __init__(self) -> None:
        self.coordinator = InMemoryCoordinator({TOPIC: 6})
        self.log: list[tuple[str, str, frozenset[TopicPartition]]] = []
        self.members: dict[str, GroupMember] = {}
        self.transports: dict[str, MockTransport] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def start(self, name: str, **overrides: Any) -> GroupMember:
        transport = self.coordinator.transport()
        member = GroupMember(
            config(**overrides),
            transport=transport,
            listener=Recorder(name, self.log),
        )
        await member.start()
        self.members[name], self.transports[name] = member, transport

        async def loop() -> None:
            while not member.closed:
                await member.poll(timeout=0.05)

        self.tasks[name] = asyncio.create_task(loop())
        return member

    async def stop_polling(self, name: str) -> None:
        task = self.tasks.pop(name)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    def covered(self, names: Sequence[str]) -> bool:
        owned = [self.members[n].assignment for n in names]
        union = frozenset().union(*owned)
        return (
            all(self.members[n].state is MemberState.STABLE for n in names)
            and sum(len(o) for o in owned) == len(union)
            and union == frozenset(tps(*range(6)))
        )

    async def wait(self, condition: Callable[[], bool]) -> None:
        """Re-check ``condition`` every 10 ms, for at most 20 s."""
        async with asyncio.timeout(20):
            for _ in iter(condition, True):
                await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        for name in list(self.tasks):
            await self.stop_polling(name)
        for member in self.members.values():
            await member.close()


@pytest.fixture
async def group() -> AsyncIterator[Group]:
    g = Group()
    try:
        yield g
    finally:
        await g.aclose()


def no_partition_held_twice(log: Sequence[tuple[str, str, frozenset[TopicPartition]]]) -> None:
    """Replays the callbacks in the order they ran: nobody is assigned a partition another
    member still holds."""
    holder: dict[TopicPartition, str] = {}
    for name, what, partitions in log:
        for tp in partitions:
            if what == "assigned":
                assert holder.get(tp, name) == name, (tp, holder.get(tp), name)
                holder[tp] = name
            elif holder.get(tp) == name:
                del holder[tp]


async def test_close_with_handoff_revokes_after_the_marked_rejoin_then_leaves(
    group: Group,
) -> None:
    for name in ("a", "b", "c"):
        await group.start(name)
    await group.wait(lambda: group.covered(["a", "b", "c"]) and bool(group.members["c"].assignment))
    events: list[tuple[str, Any]] = []
    group.members["c"].add_event_hook(lambda name, fields: events.append((name, dict(fields))))
    held = group.members["c"].assignment
    await group.stop_polling("c")
    await group.members["c"].close(handoff=True)
    sent = [r for r in group.transports["c"].requests if not isinstance(r, m.HeartbeatRequest)]
    joins = [r for r in sent if isinstance(r, m.JoinGroupRequest)]
    user_data = Subscription.decode(joins[-1].protocols[0][1]).user_data
    assert cooperative_sticky_leaving(user_data)
    assert isinstance(sent[-1], m.LeaveGroupRequest)
    c_calls = [(what, ps) for name, what, ps in group.log if name == "c"]
    assert c_calls[-2:] == [("revoked", held), ("assigned", frozenset())]
    done = [f for name, f in events if name == "member.handoff_done"]
    assert [d["outcome"] for d in done] == ["handed_off"]
    await group.wait(lambda: group.covered(["a", "b"]))
    no_partition_held_twice(group.log)
    assert not any(what == "lost" for _, what, _ in group.log)


async def test_a_leader_that_ignores_the_mark_gets_an_ordinary_close(group: Group) -> None:
    """A leader whose cooperative-sticky does not know the mark (Java's, an older kgroup)
    gives the leaver its partitions back: close() then revokes them and leaves."""

    class Unaware(CooperativeStickyAssignor):
        def _leaving(self, member: Any) -> bool:
            return False

    await group.start("a", assignors=[Unaware()])  # the first member leads
    await group.start("b")
    await group.wait(lambda: group.covered(["a", "b"]) and bool(group.members["b"].assignment))
    events: list[tuple[str, Any]] = []
    group.members["b"].add_event_hook(lambda name, fields: events.append((name, dict(fields))))
    held = group.members["b"].assignment
    await group.stop_polling("b")
    await group.members["b"].close(handoff=True)
    done = [f for name, f in events if name == "member.handoff_done"]
    assert [d["outcome"] for d in done] == ["kept"]
    b_calls = [(what, ps) for name, what, ps in group.log if name == "b"]
    assert b_calls[-2:] == [("assigned", frozenset()), ("revoked", held)]
    assert isinstance(group.transports["b"].requests[-1], m.LeaveGroupRequest)
    await group.wait(lambda: group.covered(["a"]))
    no_partition_held_twice(group.log)


async def test_a_failed_handoff_falls_back_within_the_budget(group: Group) -> None:
    """The handoff's JoinGroup never completes (another member stops answering): close()
    gives up after three quarters of its budget, revokes and leaves."""
    await group.start("a")
    await group.start("b")
    await group.wait(lambda: group.covered(["a", "b"]) and bool(group.members["b"].assignment))
    await group.stop_polling("a")  # a never rejoins: the join barrier never completes
    held = group.members["b"].assignment
    await group.stop_polling("b")
    loop = asyncio.get_running_loop()
    start = loop.time()
    b = group.members["b"]
    closing = asyncio.create_task(b.close(handoff=True))
    # Mid-handoff, its JoinGroup held: b still holds its partitions, under its lease.
    await group.wait(lambda: b.state is MemberState.PREPARING_REBALANCE)
    assert b.assignment == held
    assert b.valid_until is not None and b.valid_until > loop.time()
    await closing
    assert loop.time() - start < 4.0  # min(close_timeout_ms, request_timeout_ms) = 4 s
    b_calls = [(what, ps) for name, what, ps in group.log if name == "b"]
    assert b_calls[-1] == ("revoked", held)  # the lease still vouches: revoked, not lost
    assert isinstance(group.transports["b"].requests[-1], m.LeaveGroupRequest)


async def test_handoff_is_skipped_when_close_sends_no_leave_group(group: Group) -> None:
    await group.start("a")
    await group.start("b", leave_group_on_close=False)
    await group.wait(lambda: group.covered(["a", "b"]) and bool(group.members["b"].assignment))
    await group.stop_polling("b")
    before = len(group.transports["b"].requests)
    await group.members["b"].close(handoff=True)
    assert not any(
        isinstance(r, m.JoinGroupRequest | m.LeaveGroupRequest)
        for r in group.transports["b"].requests[before:]
    )


async def test_the_config_default_turns_the_handoff_on(group: Group) -> None:
    await group.start("a")
    b = await group.start("b", handoff_on_close=True)
    await group.wait(lambda: group.covered(["a", "b"]) and bool(b.assignment))
    await group.stop_polling("b")
    await b.close()
    joins = [r for r in group.transports["b"].requests if isinstance(r, m.JoinGroupRequest)]
    assert cooperative_sticky_leaving(Subscription.decode(joins[-1].protocols[0][1]).user_data)
