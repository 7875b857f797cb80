"""The chaos runner's part for KIP-848's consumer protocol (``_runner.py`` uses it).

- :func:`group_setup`: before any member joins, the consumer-protocol group gets the
  schedule's session and heartbeat interval as group configs (Kafka's own default session
  is 45 s; the broker's interval is already 500 ms on the test broker).
- :func:`confluent_argv`: a confluent-kafka member process (``_confluent_proc.py``).
- :func:`java_protocol_args`: what a Java member on the consumer protocol is told on top.
- :func:`why_not_stable_consumer`: invariant 2 for a group in which consumer-protocol members
  run. Under KIP-848 a member's "generation" is its own member epoch, so "every live member
  in one generation" cannot hold; instead every live member must have settled (a kgroup
  member STABLE: it reconciled to its target and acknowledged it; a Java or confluent member
  has reported its assignment), the assignments must cover every partition exactly once and
  agree with the listeners' holds, and they must be balanced (sizes differing by at most
  one): the broker's assignors (``uniform``, ``range``) balance one topic among members that
  all subscribe to it, so a member still waiting for its share shows as an imbalance while
  the others' shares still cover the topic.
- :func:`why_not_classic_group`: what invariant 2 adds for a migration's classic members
  alone: one of them leads, which only happens in a classic group (inside a consumer group
  a classic member is a follower, its "generation" its own member epoch, spec §10.9), so a
  migration back is only stable once Kafka converted the group back to classic.
- :func:`conversions`: the broker log's record of the group's conversions, for the notes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from kgroup import TopicPartition
from kgroup.testing import set_consumer_group_timeouts

from ._protocols import MIGRATIONS
from ._schedule import MemberSpec, Schedule

__all__ = [
    "CONFLUENT_SCRIPT",
    "confluent_argv",
    "conversions",
    "group_setup",
    "java_protocol_args",
    "unowned_conversions",
    "why_not_classic_group",
    "why_not_stable_consumer",
]

CONFLUENT_SCRIPT = Path(__file__).with_name("_confluent_proc.py")


class _Member(Protocol):
    """What the stability check reads of a member process (``_runner.MemberProc``)."""

    name: str
    status: dict[str, Any] | None

    @property
    def foreign(self) -> bool: ...


async def group_setup(schedule: Schedule, bootstrap: str, group: str) -> str | None:
    """Give a consumer-protocol (or migrating) group the schedule's session timeout and
    heartbeat interval before its members join; what was done, or None for a classic
    schedule."""
    if schedule.protocol == "classic":
        return None
    t = schedule.timeouts
    await set_consumer_group_timeouts(
        bootstrap, group, session_timeout_ms=t.session_ms, heartbeat_interval_ms=t.heartbeat_ms
    )
    return (
        f"group configs: consumer.session.timeout.ms={t.session_ms}, "
        f"consumer.heartbeat.interval.ms={t.heartbeat_ms}"
    )


def timing_flags(t: Any) -> list[str]:
    """The schedule's client timings every member process takes alike (``Timeouts``)."""
    return [
        "--max-poll-ms",
        str(t.max_poll_ms),
        "--request-timeout-ms",
        str(t.request_timeout_ms),
        "--retry-backoff-ms",
        str(t.retry_backoff_ms),
        "--retry-backoff-max-ms",
        str(t.retry_backoff_max_ms),
    ]


def confluent_argv(
    schedule: Schedule,
    spec: MemberSpec,
    name: str,
    bootstrap: str,
    group: str,
    topic: str,
    protocol: str = "consumer",
) -> list[str]:
    """The command line of a confluent-kafka member in ``spec``'s slot on ``protocol``,
    configured like the kgroup members (max poll, request timeout, backoffs; the broker's
    assignor, or on classic the schedule's assignor, session and heartbeat interval).
    ``topic``: a name, or names separated by commas."""
    t = schedule.timeouts
    classic = (
        [
            "--assignor",
            schedule.assignor,
            "--session-ms",
            str(t.session_ms),
            "--heartbeat-ms",
            str(t.heartbeat_ms),
        ]
        if protocol == "classic"
        else []
    )
    return [
        sys.executable,
        str(CONFLUENT_SCRIPT),
        "--bootstrap",
        bootstrap,
        "--group",
        group,
        "--topic",
        topic,
        "--name",
        name,
        "--instance-id",
        spec.instance_id or "",
        "--protocol",
        protocol,
        "--remote-assignor",
        schedule.remote_assignor,
        *classic,
        *timing_flags(t),
        "--revoke-work",
        str(schedule.revoke_work),
    ]


def java_protocol_args(schedule: Schedule, protocol: str) -> list[str]:
    """JavaMember's options for a process on ``protocol``: none on classic; the consumer
    protocol and the broker's assignor otherwise (JavaMember then leaves out the session,
    heartbeat and assignor settings, which the consumer protocol refuses)."""
    if protocol != "consumer":
        return []
    return [
        "--protocol",
        "consumer",
        "--property",
        f"group.remote.assignor={schedule.remote_assignor}",
    ]


def why_not_stable_consumer(
    live: Sequence[_Member],
    partitions: Iterable[TopicPartition],
    holders: Mapping[TopicPartition, list[str]],
    client: Mapping[str, str],
) -> str | None:
    """None when a group with consumer-protocol members is stable (see the module's
    docstring), otherwise why not. ``client`` names each member's client for the message."""
    if not live:
        return "no live member"
    for p in live:
        if p.foreign:
            if p.status is None:
                return f"{p.name} ({client[p.name]}) has not reported an assignment"
        elif p.status is None or p.status.get("state") != "STABLE":
            state = None if p.status is None else p.status.get("state")
            return f"{p.name} is {state}"
    owners: dict[TopicPartition, list[str]] = {}
    sizes: dict[str, int] = {}
    per_topic: dict[str, dict[str, int]] = {}
    for p in live:
        assert p.status is not None
        assignment = p.status.get("assignment", [])
        sizes[p.name] = len(assignment)
        for topic, partition in assignment:
            owners.setdefault(TopicPartition(topic, partition), []).append(p.name)
    wanted = frozenset(partitions)
    for tp in wanted:
        per_topic.setdefault(tp.topic, dict.fromkeys(sizes, 0))
    for tp, who in owners.items():
        for name in who:
            per_topic.setdefault(tp.topic, dict.fromkeys(sizes, 0))[name] += 1
    missing = sorted(str(tp) for tp in wanted - owners.keys())
    if missing:
        return f"unassigned: {missing}"
    gone = sorted(str(tp) for tp in owners.keys() - wanted)
    if gone:
        return f"still assigned, of a deleted topic: {gone}"
    doubled = {str(tp): who for tp, who in owners.items() if len(who) > 1}
    if doubled:
        return f"assigned twice: {doubled}"
    # ``uniform`` balances the members' totals, ``range`` each topic on its own (a schedule
    # whose pattern came to match a second topic has two).
    if max(sizes.values()) - min(sizes.values()) > 1 and any(
        max(counts.values()) - min(counts.values()) > 1 for counts in per_topic.values()
    ):
        return f"not balanced yet (partitions per member): {sizes}"
    for tp in sorted(wanted):
        if holders.get(tp, []) != owners[tp]:
            return f"{tp}: held by {holders.get(tp, [])}, assigned to {owners[tp]}"
    held = sorted(str(tp) for tp, who in holders.items() if who and tp not in wanted)
    if held:
        return f"still held, of a deleted topic: {held}"
    return None


def why_not_classic_group(
    schedule: Schedule, live: Sequence[_Member], conversions: Callable[[], list[str]]
) -> str | None:
    """For a migration whose live members all run the classic protocol: None when one of
    them leads its generation, or when none does but the broker's log says it converted
    the group back to classic (``conversions``, the broker's conversions of the group so
    far): a static member's replacement converts it without a rebalance, so nobody was
    told it leads, and kgroup's members, whose JoinGroup named no leader, watch the
    partition counts themselves (deviations.md row 21). With a Java or confluent member,
    which does not say whether it leads, also None when the group was never converted (a
    classic group all along); otherwise why not (a consumer group whose consumer-protocol
    members the broker has not fenced yet). None for other schedules."""
    if schedule.protocol not in MIGRATIONS:
        return None
    if any(p.status is not None and p.status.get("leader") for p in live):
        return None
    seen = conversions()
    if seen[-1:] == ["consumer->classic"]:
        return None
    if any(p.foreign for p in live):
        if not seen:
            return None
        return "a consumer group still: the broker's log shows no conversion back yet"
    return "no member leads: a consumer group still (classic members are followers there)"


_CONVERTED = re.compile(r"Converted the (?:empty )?(classic|consumer) group to a (\w+) group")


_LOG_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) ")
_STABILIZED = re.compile(r"Stabilized group (\S+) generation")
_PREPARING = re.compile(r"Preparing to rebalance group (\S+) in state")
_ASSIGNMENT = re.compile(r"Assignment received from leader \S+ for group (\S+) for generation")


def unowned_conversions(broker_log: Path, group: str) -> list[float]:
    """When (seconds since midnight, the broker's log clock) Kafka converted ``group`` to a
    consumer group while every classic member's assignment was empty: after a rebalance
    prepared while the group completed one (``prepareRebalance`` from CompletingRebalance
    resets every member's assignment) and before the leader's next SyncGroup. Such a
    conversion treats the classic members as owning nothing, so the first consumer-protocol
    member may be given partitions they still hold (limitations.md; the Kafka test
    ``test_kafka_converts_a_classic_group_reset_mid_rebalance_as_if_nobody_owned_anything``).
    """
    try:
        text = broker_log.read_bytes().decode("utf-8", "replace")
    except OSError:
        return []
    found: list[float] = []
    completing = empty = False
    for line in text.splitlines():
        if group not in line:
            continue
        stamp = _LOG_TIME.match(line)
        if (m := _STABILIZED.search(line)) and m[1] == group:
            completing = True
        elif (m := _PREPARING.search(line)) and m[1] == group:
            empty, completing = empty or completing, False
        elif (m := _ASSIGNMENT.search(line)) and m[1] == group:
            empty = completing = False
        elif (m := _CONVERTED.search(line)) and f"[GroupId {group}]" in line:
            if f"{m[1]}->{m[2]}" == "classic->consumer" and empty and stamp:
                h, mi, sec, ms = (int(x) for x in stamp.groups())
                found.append(h * 3600 + mi * 60 + sec + ms / 1000)
            empty = completing = False
    return found


def conversions(broker_log: Path, group: str, start: int = 0) -> tuple[list[str], int]:
    """The broker's conversions of ``group`` in its log from byte ``start`` on, in order
    (``"classic->consumer"`` and ``"consumer->classic"``: the "Converted the [empty] ...
    group to a ... group" lines), and the byte to read on from next time (the end of the
    last whole line: Kafka appends to one log across restarts)."""
    try:
        with broker_log.open("rb") as log:
            log.seek(start)
            data = log.read()
    except OSError:
        return [], start
    whole = data[: data.rfind(b"\n") + 1]
    found = []
    for line in whole.decode("utf-8", "replace").splitlines():
        match = _CONVERTED.search(line)
        if match and f"[GroupId {group}]" in line:
            found.append(f"{match[1]}->{match[2]}")
    return found, start + len(whole)
