"""Invariant 5's checks (:mod:`._records`) on hand-made lines, without a broker: a record
nobody processed, a record processed again below a commit made before the hold began, and
the duplicates at least once allows (after a crash, before a commit returned)."""

from __future__ import annotations

from ._records import RecordLedger


def test_every_acknowledged_record_must_be_processed() -> None:
    ledger = RecordLedger()
    ledger.assigned("m1", 1.0, [0, 1])
    ledger.records("m1", 2.0, 0, 0, 9)
    ledger.records("m1", 2.1, 1, 0, 3)
    acked = {0: set(range(10)), 1: set(range(6))}
    assert ledger.missing(acked) == {1: [4, 5]}
    ledger.records("m1", 2.2, 1, 4, 5)
    assert ledger.missing(acked) == {}
    # Records processed that were never acknowledged (a send that timed out) are fine.
    ledger.records("m1", 2.3, 1, 6, 6)
    assert ledger.missing(acked) == {}


def test_a_record_processed_again_below_an_earlier_commit_breaks_the_invariant() -> None:
    ledger = RecordLedger()
    ledger.assigned("m1", 1.0, [0])
    ledger.records("m1", 2.0, 0, 0, 9)
    ledger.committed("m1", 2.1, 0, 10)
    ledger.assigned("m2", 3.0, [0])  # m1's commit returned before m2's hold began
    ledger.records("m2", 3.5, 0, 8, 12)
    found = ledger.duplicates_below_commits()
    assert len(found) == 1
    assert "m2 processed partition 0 offsets 8..12" in found[0]
    assert "below offset 10 that m1 had committed" in found[0]


def test_at_least_once_allows_what_no_returned_commit_covered() -> None:
    ledger = RecordLedger()
    ledger.assigned("m1", 1.0, [0, 1])
    ledger.records("m1", 2.0, 0, 0, 9)
    ledger.committed("m1", 2.1, 0, 10)
    ledger.records("m1", 2.2, 0, 10, 14)  # m1 crashes before this commit returns
    ledger.records("m1", 2.3, 1, 0, 4)
    ledger.assigned("m2", 3.0, [0, 1])
    ledger.records("m2", 3.1, 0, 10, 14)  # again, from the last commit: allowed
    ledger.records("m2", 3.2, 1, 0, 4)  # nothing committed on 1: allowed
    # A commit that returns only after the next hold began does not count against it.
    ledger.assigned("m3", 4.0, [1])
    ledger.committed("m2", 4.1, 1, 5)
    ledger.records("m3", 4.2, 1, 0, 4)
    assert ledger.duplicates_below_commits() == []
    # The committed offset never moves back: a lower commit later leaves the floor.
    ledger.committed("m3", 4.3, 1, 3)
    ledger.assigned("m4", 5.0, [1])
    ledger.records("m4", 5.1, 1, 4, 4)
    assert ledger.duplicates_below_commits() == [
        "m4 processed partition 1 offsets 4..4 at 5.100, below offset 5 that m2 had "
        "committed at 4.100, before this hold began"
    ]
