"""The handoff on close: a cooperative member rejoins once, marked as leaving, before it
revokes and leaves. DEVIATION (spec §6.4 on close, §7.6; deviations.md row 14): the Java
client revokes everything and leaves at once.

A ``cooperative-sticky`` member that closes the ordinary way revokes everything and then
sends LeaveGroup; the others learn of the rebalance only at their next heartbeat, so its
partitions are unowned for up to a heartbeat interval plus a rebalance. With the handoff it
first rejoins with the leaving mark in its user data, keeping its partitions meanwhile; a
kgroup leader gives it nothing, withholds what it owned and marks the generation for a
follow-up (row 12), so the others heartbeat fast once they have their assignment. The
leaver then revokes (its empty assignment says so) and leaves, and the follow-up hands its
partitions out within milliseconds (the others' schedule: ``MemberBase.follow_up_interval``).

:func:`hand_off` drives that one rebalance from close() with the core's join actions, as
``poll()`` does, and stops at the first completion: the caller then releases what is still
owned and leaves as close() always does. Anything else (a leader that ignores the mark and
gives partitions back, a lost coordinator or generation, a lapsed lease, a fatal error, the
deadline) ends the handoff early and leaves the rest to that ordinary path; a join that
fails retriably is retried within the deadline.
"""

from __future__ import annotations

import asyncio
from typing import Literal, assert_never

from .._core._embedding import ConsumerEmbedding
from .._core._member import (
    AwaitJoin,
    AwaitLeaseProof,
    CompleteJoin,
    FindCoordinator,
    Idle,
    PrepareJoin,
    RaiseFatal,
    SendJoinGroup,
    Sleep,
)
from .._errors import AssignmentError, ListenerError
from ._rebalance import RebalanceDriver
from ._shared import Shared

__all__ = ["Outcome", "hand_off"]

Outcome = Literal["handed_off", "kept", "failed", "timed_out"]
"""``handed_off``: the member's assignment came back empty and it revoked what it owned;
``kept``: the leader gave it partitions (a leader that ignores the mark); ``failed`` and
``timed_out``: the rebalance did not complete. For all but the first, close() releases what
is still owned as it does without a handoff."""


async def hand_off(
    shared: Shared, driver: RebalanceDriver, until: float, errors: list[ListenerError]
) -> Outcome | None:
    """Run the handoff rebalance until its completion or ``until`` (ms on the member's
    clock). None when the member cannot hand off (see ``MemberCore.may_hand_off`` and
    ``ConsumerEmbedding.handoff_assignor``): close() then goes on as without one."""
    embedding = shared.embedding
    if shared.core is None or not isinstance(embedding, ConsumerEmbedding):
        return None  # a GroupProtocol member: no handoff
    with shared.step() as core:
        if not core.may_hand_off() or not embedding.begin_handoff(core.generation):
            return None
        core.begin_handoff(shared.now())
        owned = embedding.owned
    outcome: Outcome = "timed_out"
    try:
        outcome = await _run(shared, driver, until, errors)
    except AssignmentError:
        outcome = "failed"
    finally:
        embedding.end_handoff()
        with shared.step() as core:
            core.handoff_ended(outcome, sorted(str(tp) for tp in owned))
    return outcome


async def _run(
    shared: Shared, driver: RebalanceDriver, until: float, errors: list[ListenerError]
) -> Outcome:
    """The join actions of one rebalance, as ``poll()`` runs them, until its completion."""
    embedding = shared.embedding
    while shared.open and shared.now() < until:
        shared.poll_wake.clear()
        with shared.step() as core:
            action = core.next_join_action(shared.now())
        match action:
            case CompleteJoin():
                await driver.advance(action, until, errors)
                return "kept" if embedding.owned else "handed_off"
            case PrepareJoin(lost=lost):
                # The pre-join hook: revoke what left the subscription, or (generation or
                # lease gone) report everything lost; then there is nothing to hand off.
                await driver.advance(action, until, errors)
                if lost:
                    return "failed"
            case AwaitLeaseProof() | SendJoinGroup() | AwaitJoin():
                await driver.advance(action, until, errors)
            case Sleep(until=retry_at):
                # A join that failed retriably (the group rebalancing again under it) backs
                # off: still rejoining, still marked; retry within the handoff's budget.
                await asyncio.sleep(max(0.0, (min(retry_at, until) - shared.now()) / 1000))
            case Idle() | RaiseFatal() | FindCoordinator():
                # Not rejoining (any more), a fatal error, or the coordinator lost: the
                # handoff is over; close() releases and leaves.
                return "failed"
            case _:
                assert_never(action)
    return "timed_out"
