"""OwnershipLog: holds from listener events, and the no-two-holders check."""

from __future__ import annotations

import pytest

from kgroup import TopicPartition
from kgroup.testing import OwnershipLog, OwnershipViolation

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_handover_after_revoke_returns_is_clean() -> None:
    log = OwnershipLog()
    log.assigned("a", [P0, P1], 1, at=1.0)
    log.revoked("a", [P0, P1], at=2.0)  # revoke callback returned at 2.0
    log.assigned("b", [P0], 2, at=2.0)
    log.assigned("a", [P1], 2, at=2.1)
    log.check()
    assert log.holders() == {P0: ["b"], P1: ["a"]}


def test_overlap_is_reported_with_both_holds() -> None:
    log = OwnershipLog()
    log.assigned("a", [P0], 1, at=1.0)
    log.assigned("b", [P0], 2, at=1.5)  # a never let go
    with pytest.raises(OwnershipViolation, match=r"a gen 1 held t-?\[?0.*\n.*b gen 2"):
        log.check()
    assert len(log.overlaps()) == 1


def test_revoke_still_running_when_new_owner_starts_is_an_overlap() -> None:
    log = OwnershipLog()
    log.assigned("a", [P0], 1, at=1.0)
    log.assigned("b", [P0], 2, at=1.9)
    log.revoked("a", [P0], at=2.0)  # a's callback (say, a commit) was still running
    assert [(x.member, y.member) for x, y in log.overlaps()] == [("a", "b")]


def test_lost_ends_the_hold_at_its_start() -> None:
    log = OwnershipLog()
    log.assigned("a", [P0], 1, at=1.0)
    log.lost("a", [P0], at=5.0)
    log.assigned("b", [P0], 2, at=5.0)
    log.check()


def test_lease_deadline_ends_holds_retroactively() -> None:
    log = OwnershipLog()
    log.assigned("a", [P0], 1, at=1.0)
    log.assigned("b", [P0], 2, at=8.0)  # the broker moved P0 while a was cut off
    log.lease_expired("a", deadline=7.5)  # a's lease had run out before that
    log.lost("a", [P0], at=9.0)  # a's callback came later: its hold ended at 7.5
    log.check()
    held_by_a = [h for h in log.holds if h.member == "a"]
    assert [(h.end, h.ended_by) for h in held_by_a] == [(7.5, "lease_expired")]


def test_lease_deadline_after_the_new_owner_started_is_an_overlap() -> None:
    log = OwnershipLog()
    log.assigned("a", [P0], 1, at=1.0)
    log.assigned("b", [P0], 2, at=8.0)
    log.lease_expired("a", deadline=8.5)
    with pytest.raises(OwnershipViolation):
        log.check()


def test_lease_does_not_end_holds_that_began_after_it() -> None:
    log = OwnershipLog()
    log.lease_expired("a", deadline=1.0)
    log.assigned("a", [P0], 3, at=2.0)
    log.lease_expired("a", deadline=1.5)  # a late report of an older deadline
    assert log.holders() == {P0: ["a"]}


def test_death_ends_everything_and_reassigning_same_member_is_one_hold() -> None:
    log = OwnershipLog()
    log.assigned("a", [P0], 1, at=1.0)
    log.assigned("a", [P0], 2, at=2.0)  # kept across a rebalance: still one hold
    log.died("a", at=3.0)
    log.assigned("b", [P0], 3, at=9.0)
    log.check()
    assert [(h.member, h.start, h.end) for h in log.holds] == [("a", 1.0, 3.0), ("b", 9.0, None)]


def test_late_lease_report_shortens_a_hold_that_already_closed() -> None:
    log = OwnershipLog()
    log.assigned("a", [P0], 1, at=1.0)
    log.assigned("b", [P0], 2, at=6.0)
    log.revoked("a", [P0], at=7.0)  # a's revoke callback ran past its lease...
    log.lease_expired("a", deadline=5.0)  # ...which had lapsed at 5.0, reported late
    log.check()
    assert [(h.end, h.ended_by) for h in log.holds if h.member == "a"] == [(5.0, "lease_expired")]
