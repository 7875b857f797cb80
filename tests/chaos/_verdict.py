"""The chaos run's verdict: invariants 1, 3 and 4 over what the run recorded, once every
member has ended (invariant 2, the stable group, is checked while the run goes on, by the
runner).

1. No partition held by two members at once (the runner's ``OwnershipLog``), except the
   overlaps that no client can avoid, each tolerated on exact terms and noted: a member
   without the lease in its core cut off; Kafka's conversion of a classic group whose
   assignments a rebalance had just reset (limitations.md); a Java or confluent member
   holding on across a Kafka restart that expired it; a tansu restart that forgot the
   group; a hold of a deleted topic's partition beside one of the partition of the same
   name of the topic created again under its name (a new topic id: other partitions).
3. No exception escaped ``poll()`` except the schedule's expected ones, those the runner
   excused, and a broker's known quirks (``BROKER_QUIRK_ERRORS``).
4. Every process that was closed exited 0 and left nothing behind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from kgroup.testing._invariants import Hold

if TYPE_CHECKING:
    from ._runner import ChaosRunner

__all__ = ["BROKER_QUIRK_ERRORS", "describe_hold", "final_checks"]

#: Errors a broker's quirk makes ``poll()`` raise, tolerated (counted, not failures):
#: ``broker -> ((exception type, message prefix, why), ...)``.
BROKER_QUIRK_ERRORS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "mock": (
        (
            "UnexpectedBrokerError",
            "SyncGroup failed with INVALID_REQUEST (42)",
            "librdkafka's mock completes a sync as soon as the leader's SyncGroup carries "
            "every assignment and goes UP; a follower's SyncGroup arriving after that gets "
            "INVALID_REQUEST (Kafka answers it with the member's assignment). kgroup raises "
            "it from poll() as the Java client does (an unexpected SyncGroup error), then "
            "rejoins.",
        ),
    ),
}


def final_checks(runner: ChaosRunner) -> None:
    """Invariants 1, 3 and 4 over everything the run recorded (the module docstring), and
    the second half of invariant 5 (:mod:`._records`); each breach is a failure of the run
    (``runner.fail``), each tolerated overlap a note."""
    s = runner.schedule
    if s.records:
        for text in runner.ledger.duplicates_below_commits():
            runner.fail(f"invariant 5: {text}")
    # Invariant 1. Without the member lease in the core (a member reports lease=false:
    # ``member.lease_expired`` never fires), a paused or cut-off member holds its
    # partitions until it learns it was evicted, so an overlap whose earlier hold is such
    # a member's is the known zombie window: noted, not failed, until the lease lands.
    overlaps = runner.ownership.overlaps()
    no_lease = {mp.name for mp in runner.procs if mp.lease_supported is False}
    overlaps = _tolerate(
        runner,
        overlaps,
        lambda a, b: min(a, b, key=lambda h: h.start).member in no_lease,
        "after a member without the lease in its core was cut off (tolerated: "
        "member.lease_expired does not fire yet)",
    )
    unowned_at = runner._unowned_conversions() if overlaps else []  # the log, read once
    overlaps = _tolerate(
        runner,
        overlaps,
        lambda a, b: _unowned_conversion_overlap(runner, a, b, unowned_at),
        "of a classic member's hold with a consumer-protocol member's after Kafka "
        "converted the group while its assignments were reset (tolerated: Kafka 4.4.0 "
        "then counts the classic members as owning nothing; limitations.md)",
    )
    before = len(overlaps)
    overlaps = _tolerate(
        runner,
        overlaps,
        lambda a, b: _java_restart_overlap(runner, a, b),
        "of a Java member's hold across a Kafka restart that expired it (tolerated: the "
        "Java client has no lease; it held on until it reached the coordinator again and "
        "lost them, within a session of the broker's return)",
    )
    runner.result.java_restart_overlaps += before - len(overlaps)
    overlaps = _tolerate(
        runner,
        overlaps,
        lambda a, b: _state_loss_overlap(runner, a, b),
        "across a tansu restart, which forgot the group: the stale hold ended by its lease "
        "within a session timeout of the broker's return (tolerated: no client can see a "
        "coordinator lose its state)",
    )
    overlaps = _tolerate(
        runner,
        overlaps,
        lambda a, b: _recreated_topic_overlap(runner, a, b),
        "of a deleted topic's partition with the partition of the same name of the topic "
        "created again (tolerated: a new topic id, so to Kafka they are other partitions; "
        "limitations.md)",
    )
    if overlaps:
        clients = {mp.name: mp.client for mp in runner.procs}
        if any(mp.foreign for mp in runner.procs):
            first = Counter(
                clients.get(min(a, b, key=lambda h: h.start).member, "kgroup") for a, b in overlaps
            )
            runner.result.notes.append(
                "overlaps by whose hold came first: "
                + ", ".join(f"{who} {n}" for who, n in sorted(first.items()))
                + " (every one fails the run: Java and confluent members only get faults "
                "they survive)"
            )
        shown = "\n".join(
            f"       {describe_hold(runner, a)}\n         overlaps {describe_hold(runner, b)}"
            for a, b in overlaps[:10]
        )
        more = f"\n       ... and {len(overlaps) - 10} more" if len(overlaps) > 10 else ""
        runner.fail(
            f"invariant 1: {len(overlaps)} overlapping hold(s) of a partition by two members "
            f"(times relative to the fault window):\n{shown}{more}"
        )
    # Invariant 3.
    quirks = BROKER_QUIRK_ERRORS.get(s.broker, ())
    for mp in runner.procs:
        unexpected = []
        for e in mp.errors:
            kind, message = str(e.get("type")), str(e.get("message"))
            if kind in s.expected_errors:
                continue
            if e.get("excused"):
                runner.result.notes.append(f"{mp.name}: {kind} tolerated: {e['excused']}")
                continue
            if any(kind == q and message.startswith(p) for q, p, _ in quirks):
                runner.result.quirk_errors[kind] += 1
                continue
            unexpected.append(e)
        if unexpected:
            kinds = Counter(f"{e.get('type')}: {e.get('message')}" for e in unexpected)
            listed = "; ".join(f"{text} (x{n})" for text, n in kinds.most_common(5))
            runner.fail(f"invariant 3: {mp.name}: poll() raised {listed}")
    # Invariant 4 (a Java member: exit code 0 and a ``closed`` line after close(); the
    # Python leak checks do not apply to a JVM).
    for mp in runner.procs:
        if mp.state == "killed" or mp.terminated_before_ready:
            continue
        problems = []
        if mp.returncode != 0:
            problems.append(f"exit code {mp.returncode}")
        closed = mp.closed
        if closed is None:
            problems.append("no report after close()")
        else:
            for key in ("tasks", "sockets", "transports", "warnings", "loop_errors"):
                if closed.get(key):
                    problems.append(f"{key} left: {closed[key]}")
            if closed.get("close_error"):
                problems.append(f"close() raised {closed['close_error']}")
        if mp.exit is not None and mp.exit.get("warnings"):
            problems.append(f"warnings at exit: {mp.exit['warnings']}")
        if mp.held_at_exit:
            problems.append(f"still held after close(): {mp.held_at_exit}")
        if problems:
            runner.fail(f"invariant 4: {mp.name} (log {mp.log_path}): " + "; ".join(problems))
    supported = {mp.lease_supported for mp in runner.procs if mp.lease_supported is not None}
    runner.result.lease_supported = None if not supported else all(supported)
    runner.result.lease_expirations = sum(mp.lease_expirations for mp in runner.procs)
    runner.result.rebalances = len(runner._generations)


def _state_loss_overlap(runner: ChaosRunner, a: Hold, b: Hold) -> bool:
    """Whether an overlap is explained by a tansu restart, within the lease's bound.

    A restart of tansu (memory storage) forgets every group: the new broker may hand a
    partition to another member while a member of the old group still holds it. The
    member cannot know; its lease ends the hold at most a session timeout after its last
    proof, which the old broker gave at the latest when it went away. So the overlap is
    tolerated when the earlier hold began before a restart, the later one after it
    began, and the earlier one ended no later than a session timeout (plus 1 s of
    process slack) after the broker was back.
    """
    earlier, later = sorted((a, b), key=lambda h: h.start)
    end = float("inf") if earlier.end is None else earlier.end
    session = runner.schedule.timeouts.session
    return any(
        earlier.start < begin <= later.start and end <= back + session + 1.0
        for begin, back in runner._state_losses
    )


def _recreated_topic_overlap(runner: ChaosRunner, a: Hold, b: Hold) -> bool:
    """Whether an overlap is of two topics of one name: the earlier hold began before the
    topic was deleted (the old topic's partition) and the later one once it was being
    created again (the new topic's)."""
    topic = a.partition.topic
    deleted, created = runner.deleted_topics.get(topic), runner.recreated_topics.get(topic)
    earlier, later = sorted((a, b), key=lambda h: h.start)
    return (
        deleted is not None
        and created is not None
        and earlier.start < deleted
        and created <= later.start
    )


def _tolerate(
    runner: ChaosRunner,
    overlaps: list[tuple[Hold, Hold]],
    excused: Callable[[Hold, Hold], bool],
    what: str,
) -> list[tuple[Hold, Hold]]:
    """``overlaps`` without those ``excused`` explains, which are noted (``what``: why
    they are tolerated) rather than failed."""
    found = [pair for pair in overlaps if excused(*pair)]
    if found:
        shown = "; ".join(
            f"{describe_hold(runner, a)} / {describe_hold(runner, b)}" for a, b in found[:3]
        )
        runner.result.notes.append(f"{len(found)} overlap(s) {what}: {shown}")
    return [pair for pair in overlaps if pair not in found]


def _unowned_conversion_overlap(
    runner: ChaosRunner, a: Hold, b: Hold, unowned_at: list[float]
) -> bool:
    """Whether an overlap is Kafka's conversion of a classic group whose assignments a
    rebalance had just reset (:func:`._kip848.unowned_conversions`): the one case
    where a consumer-protocol member is given what a classic member still holds, and
    no client can see it. Tolerated exactly then: the earlier hold is a classic
    process's and began before such a conversion (``unowned_at``: their times, from
    :meth:`ChaosRunner._unowned_conversions`), the later one a consumer-protocol
    process's that began after it, and the earlier one ended no later than a session
    timeout (plus 1 s of process slack) after it: the classic member rejoins at its
    next heartbeat and gives the partition up. The broker's log clock is mapped onto
    the runner's with the wall clock read at the start (0.5 s of slack each way)."""
    earlier, later = sorted((a, b), key=lambda h: h.start)
    protocols = {mp.name: mp.protocol for mp in runner.procs}
    if protocols.get(earlier.member) == "consumer" or protocols.get(later.member) != "consumer":
        return False
    if earlier.end is None:
        return False
    session = runner.schedule.timeouts.session
    return any(
        earlier.start < at + 0.5 and later.start > at - 0.5 and earlier.end <= at + session + 1.0
        for at in unowned_at
    )


def _java_restart_overlap(runner: ChaosRunner, a: Hold, b: Hold) -> bool:
    """Whether an overlap is a Java member holding on across a Kafka restart that
    expired it: the one case where a Java member's overlap is not a failure.

    A Kafka that comes back from a restart (SIGKILL and log recovery, above all) loads
    the group and starts its members' sessions before they can reach it again, so it may
    expire every member and give the partitions to whoever arrives first. A kgroup member
    ended its holds by its lease meanwhile; the Java client has no lease and holds on until
    it reaches the coordinator and hears it is unknown (``onPartitionsLost``). Tolerated
    exactly then: the earlier hold is a Java member's, began before a restart that began
    before the later hold, and ended by ``lost`` no later than a session timeout (plus
    1 s of process slack) after the broker was back. A Java hold that ended any other
    way (revoked: the group still counted it as a member) or later, or a kgroup member's
    earlier hold, still fails. A confluent member (consumer protocol) has no lease either
    and is held to the same terms.
    """
    earlier, later = sorted((a, b), key=lambda h: h.start)
    if not any(mp.foreign and mp.name == earlier.member for mp in runner.procs):
        return False
    if earlier.ended_by != "lost" or earlier.end is None:
        return False
    session = runner.schedule.timeouts.session
    return any(
        earlier.start < begin <= later.start and earlier.end <= back + session + 1.0
        for begin, back in runner._kafka_restarts
    )


def describe_hold(runner: ChaosRunner, hold: Hold) -> str:
    end = "open" if hold.end is None else f"{runner._rel(hold.end)} ({hold.ended_by})"
    start = runner._rel(hold.start)
    client = next((mp.client for mp in runner.procs if mp.name == hold.member), "kgroup")
    who = hold.member if client == "kgroup" else f"{hold.member} ({client})"
    return f"{who} gen {hold.generation} held {hold.partition} {start}..{end}"
