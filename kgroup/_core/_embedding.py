"""The consumer embedded protocol's decisions, sans-I/O (spec §6.2-§6.4, §7).

The membership core is generic: it carries opaque metadata and assignment bytes. This module
is the ``"consumer"`` embedding that gives them meaning: it encodes the Subscription for each
assignor, runs the leader's assignor, and decides which listener callback fires with which
partitions on prepare, completion and leave. It performs no I/O and calls no user code: it
returns :class:`ListenerCall` values for the runtime to run in order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import AssignmentError, RemoteProtocolError
from ._assignors import (
    Assignor,
    MemberSubscription,
    RebalanceProtocol,
    get_builtin_assignor,
    select_rebalance_protocol,
)
from ._consumer_protocol import PROTOCOL_TYPE, Assignment, Subscription, TopicPartition
from ._messages import JoinGroupMember
from ._racks import TopicLayout
from ._state import Generation
from ._sticky import CooperativeStickyAssignor

__all__ = ["Completion", "ConsumerEmbedding", "ListenerCall"]

Callback = Literal["on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost"]

#: DEVIATION (spec §6.4 step 5, §7.6; deviations.md row 9): a COOPERATIVE member also
#: rejoins when its assignment leaves out something its JoinGroup claimed that it no longer
#: owns. The lease (row 6) can report what the member holds lost while its JoinGroup or
#: SyncGroup is in flight; the leader, which read the claim, withheld from the others what
#: it moves away from this member, and only this member's rejoin lets the next rebalance
#: hand that over (Java never loses partitions mid-join, so there owned == claimed).
CLAIMS_LOST_REJOIN = "claimed partitions were lost during the rebalance: re-join to release them"

#: DEVIATION (spec §7.6; deviations.md row 12): when a member must give up something it
#: claimed, its revocation is followed by another rebalance for certain (it rejoins soon
#: after revoking). A kgroup leader then marks every assignment of the generation with
#: these bytes (after the last field of the consumer Assignment; a flag in kgroup's own
#: assignment layout). A kgroup member that reads them and revokes nothing expects that
#: rebalance (``Completion.follow_up``): it heartbeats faster until the coordinator
#: announces it, instead of learning of it one heartbeat interval later, and rejoins by
#: itself if it has not started within an interval. Every other reader of the consumer
#: protocol ignores bytes after the layout it knows (Java's, librdkafka's, kafka-python's,
#: and Kafka's own when it converts a classic group to a consumer group, which refuses a
#: group whose assignments carry user data: where earlier kgroup leaders wrote this mark,
#: and where a member still recognises it).
FOLLOW_UP_MARKER = b"kgroup/follow-up-rebalance/1"


@dataclass(frozen=True, slots=True)
class ListenerCall:
    """One listener callback to run: ``partitions`` are TopicPartitions for a consumer,
    item names for a :class:`~kgroup.GroupProtocol` member."""

    callback: Callback
    partitions: frozenset[Any]


@dataclass(frozen=True, slots=True)
class Completion:
    calls: tuple[ListenerCall, ...] = ()
    rejoin_reason: str | None = None
    assignment: frozenset[Any] = field(default_factory=frozenset)
    #: The leader marked the generation: a follow-up rebalance is certain
    #: (:data:`FOLLOW_UP_MARKER`; passed to ``MemberCore.join_completed``).
    follow_up: bool = False


class ConsumerEmbedding:
    """Subscription, assignment and listener decisions of a consumer-protocol member.

    ``owned`` is the current assignment; only this object changes it.
    """

    protocol_type = PROTOCOL_TYPE

    def __init__(
        self,
        topics: Sequence[str],
        assignors: Sequence[str | Assignor],
        *,
        rack_id: str | None = None,
    ) -> None:
        self.topics = tuple(topics)
        self.assignors: tuple[Assignor, ...] = tuple(
            get_builtin_assignor(a) if isinstance(a, str) else a for a in assignors
        )
        self.rebalance_protocol = select_rebalance_protocol(self.assignors)
        self.rack_id = rack_id
        self.owned: frozenset[TopicPartition] = frozenset()
        #: COOPERATIVE: the partitions the last JoinGroup claimed as owned (see complete()).
        self.claimed: frozenset[TopicPartition] = frozenset()
        #: The topics the last JoinGroup subscribed to: a subscription that changes after
        #: it was sent (a pattern refresh, ``subscribe()``) needs one more rebalance.
        self.joined_topics: frozenset[str] = frozenset(self.topics)
        #: A pattern subscription (``topics`` is then what it matched at the last refresh).
        self.pattern: re.Pattern[str] | None = None
        #: The leader's view of the subscribed topics' partition counts when it assigned
        #: (§6.3 step 7; ``None``: the topic had no metadata). Cleared at every PrepareJoin;
        #: set again by :meth:`assign`, so it is the current leader's, or by :meth:`watch`
        #: in a generation whose JoinGroup named no leader.
        self.assignment_snapshot: dict[str, int | None] | None = None
        #: With it, the replica racks of those topics' partitions, when the leader assigned
        #: rack-aware (some member had a rack and the metadata carried racks; KIP-881).
        self.rack_snapshot: dict[str, tuple[frozenset[str], ...]] | None = None

    # -- subscription ----------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str], pattern: re.Pattern[str] | None = None) -> bool:
        """Subscribe to ``topics`` (what ``pattern`` matched, for a pattern subscription).
        True when the topic set changed: the member must rejoin (§2.3)."""
        new = tuple(sorted(dict.fromkeys(topics)))
        self.pattern = pattern
        if frozenset(new) == frozenset(self.topics):
            return False
        self.topics = new
        return True

    def matching(self, topics: Iterable[str]) -> list[str]:
        """The topics among ``topics`` that the pattern subscription takes (sorted)."""
        pattern = self.pattern
        if pattern is None:
            return sorted(self.topics)
        return sorted(t for t in set(topics) if pattern.fullmatch(t))

    def watch(self, partitions_per_topic: Mapping[str, int]) -> None:
        """Take the subscribed topics' partition counts as the snapshot to compare with, in
        a generation whose JoinGroup named no leader (deviations.md row 21)."""
        self.assignment_snapshot = {t: partitions_per_topic.get(t) for t in self.topics}

    def metadata_changed(self, partitions_per_topic: Mapping[str, int]) -> str | None:
        """§7.7: how fresh metadata differs from the snapshot the leader assigned with (a
        reason for the rejoin), or None when it does not (or there is no snapshot)."""
        snapshot = self.assignment_snapshot
        if snapshot is None:
            return None
        changes = []
        for topic in sorted(snapshot):
            before, after = snapshot[topic], partitions_per_topic.get(topic)
            if before != after:
                changes.append(
                    f"{topic}: {'no metadata' if before is None else f'{before} partitions'}"
                    f" -> {'no metadata' if after is None else f'{after} partitions'}"
                )
        racks = self.rack_snapshot
        if racks is not None and isinstance(partitions_per_topic, TopicLayout):
            for topic in sorted(racks):
                now = partition_racks(partitions_per_topic, topic)
                if len(now) == len(racks[topic]) and now != racks[topic]:
                    changes.append(f"{topic}: replica racks changed")
        if not changes:
            return None
        return "metadata changed since the assignment (" + "; ".join(changes) + ")"

    # -- handoff on close ----------------------------------------------------------------------

    def handoff_assignor(self, generation: Generation) -> CooperativeStickyAssignor | None:
        """The assignor a handoff on close marks (deviations.md row 14): kgroup's built-in
        ``cooperative-sticky`` when the member's generation uses it under COOPERATIVE and
        the member owns something; None otherwise (close() then releases as it always
        does)."""
        if self.rebalance_protocol is not RebalanceProtocol.COOPERATIVE or not self.owned:
            return None
        for assignor in self.assignors:
            if assignor.name == generation.protocol_name:
                return assignor if isinstance(assignor, CooperativeStickyAssignor) else None
        return None

    def begin_handoff(self, generation: Generation) -> bool:
        """Mark the next JoinGroup's ``cooperative-sticky`` user data as leaving. False (and
        nothing marked) when :meth:`handoff_assignor` finds none."""
        assignor = self.handoff_assignor(generation)
        if assignor is None:
            return False
        assignor.leaving = True
        return True

    def end_handoff(self) -> None:
        """Stop marking the user data as leaving."""
        for assignor in self.assignors:
            if isinstance(assignor, CooperativeStickyAssignor):
                assignor.leaving = False

    # -- JoinGroup metadata ----------------------------------------------------------------------

    def metadata(self, generation: Generation) -> list[tuple[str, bytes]]:
        """One (assignor name, Subscription v3) per assignor, in preference order (§4.2)."""
        cooperative = self.rebalance_protocol is RebalanceProtocol.COOPERATIVE
        owned = tuple(sorted(self.owned)) if cooperative else ()
        self.claimed = frozenset(owned)
        self.joined_topics = frozenset(self.topics)
        return [
            (
                assignor.name,
                Subscription(
                    topics=self.topics,
                    user_data=assignor.user_data(self.topics),
                    owned_partitions=owned,
                    generation_id=generation.generation_id,
                    rack_id=self.rack_id,
                ).encode(),
            )
            for assignor in self.assignors
        ]

    # -- leader ------------------------------------------------------------------------------------

    def _decode_members(self, members: Sequence[JoinGroupMember]) -> list[MemberSubscription]:
        decoded = []
        for member in members:
            try:
                subscription = Subscription.decode(member.metadata)
            except RemoteProtocolError as exc:
                raise AssignmentError(
                    f"member {member.member_id!r} sent a malformed subscription: {exc}"
                ) from exc
            decoded.append(
                MemberSubscription(member.member_id, member.group_instance_id, subscription)
            )
        return decoded

    def metadata_topics(self, members: Sequence[JoinGroupMember]) -> list[str]:
        """The union of every member's subscribed topics: the leader refreshes these (§6.3)."""
        topics: set[str] = set()
        for member in self._decode_members(members):
            topics.update(member.subscription.topics)
        return sorted(topics)

    def assign(
        self,
        protocol_name: str,
        members: Sequence[JoinGroupMember],
        partitions_per_topic: Mapping[str, int],
    ) -> dict[str, bytes]:
        """Run the selected assignor; an encoded Assignment for every member."""
        assignor = next((a for a in self.assignors if a.name == protocol_name), None)
        if assignor is None:
            raise AssignmentError(
                f"the coordinator selected assignor {protocol_name!r}, which this member does "
                f"not have ({', '.join(a.name for a in self.assignors)})"
            )
        subscriptions = self._decode_members(members)
        topics = sorted({t for m in subscriptions for t in m.subscription.topics})
        self.assignment_snapshot = {t: partitions_per_topic.get(t) for t in topics}
        self.rack_snapshot = None
        if isinstance(partitions_per_topic, TopicLayout) and any(
            m.subscription.rack_id for m in subscriptions
        ):
            self.rack_snapshot = {
                t: partition_racks(partitions_per_topic, t)
                for t in topics
                if t in partitions_per_topic
            }
        result = assignor.assign(partitions_per_topic, subscriptions)
        if self.rebalance_protocol is RebalanceProtocol.COOPERATIVE:
            _check_cooperative(protocol_name, subscriptions, result)
        follow_up = follow_up_needed(
            {m.member_id: frozenset(m.subscription.owned_partitions) for m in subscriptions},
            {mid: frozenset(a.partitions) for mid, a in result.items()},
        )
        mark = FOLLOW_UP_MARKER if follow_up else b""
        out: dict[str, bytes] = {}
        for member in subscriptions:
            assignment = result.get(member.member_id) or Assignment(partitions=(), user_data=None)
            out[member.member_id] = assignment.encode() + mark
        unknown = set(result) - set(out)
        if unknown:
            raise AssignmentError(
                f"assignor {protocol_name!r} assigned to unknown members {sorted(unknown)}"
            )
        return out

    # -- listener decisions ------------------------------------------------------------------------

    def prepare(self, *, lost: bool) -> tuple[ListenerCall, ...]:
        """Pre-join hook (§6.2): lost if the Generation was reset, revoked otherwise."""
        self.assignment_snapshot = self.rack_snapshot = None
        owned = self.owned
        if lost:
            self.owned = frozenset()
            return (ListenerCall("on_partitions_lost", owned),) if owned else ()
        if self.rebalance_protocol is RebalanceProtocol.EAGER:
            self.owned = frozenset()
            return (ListenerCall("on_partitions_revoked", owned),)
        subscribed = frozenset(self.topics)
        unsubscribed = frozenset(tp for tp in owned if tp.topic not in subscribed)
        self.owned = owned - unsubscribed
        return (ListenerCall("on_partitions_revoked", unsubscribed),) if unsubscribed else ()

    def complete(self, generation: Generation, data: bytes) -> Completion:
        """Completion (§6.4): decode the assignment, install it, say which callbacks fire."""
        if len(data) < 2:
            raise AssignmentError(
                f"SyncGroup returned a {len(data)}-byte assignment: the leader left this "
                "member out of the assignment"
            )
        try:
            assignment, tail = Assignment.decode_with_tail(data)
        except RemoteProtocolError as exc:
            raise AssignmentError(f"malformed assignment from the leader: {exc}") from exc
        if not any(a.name == generation.protocol_name for a in self.assignors):
            raise AssignmentError(
                f"the group uses assignor {generation.protocol_name!r}, which this member does "
                f"not have ({', '.join(a.name for a in self.assignors)})"
            )
        follow_up = tail == FOLLOW_UP_MARKER
        if assignment.user_data == FOLLOW_UP_MARKER:  # where earlier kgroup leaders put it
            follow_up = True
            assignment = Assignment(partitions=assignment.partitions, user_data=None)
        assigned = frozenset(assignment.partitions)
        if any(tp.topic not in self.topics for tp in assigned):
            return Completion(
                rejoin_reason="received assignment does not match the current subscription"
            )
        calls, rejoin = cooperative_revocation(
            self.rebalance_protocol, self.owned, self.claimed, assigned, "partitions"
        )
        added = assigned - self.owned
        for assignor in self.assignors:
            if assignor.name == generation.protocol_name:
                assignor.on_assignment(assignment, generation.generation_id)
                break
        self.owned = assigned
        calls.append(ListenerCall("on_partitions_assigned", added))
        if rejoin is None and self.joined_topics != frozenset(self.topics):
            # The leader assigned by the subscription this member joined with; the topics
            # it subscribes to now reach the leader only through another JoinGroup.
            rejoin = "the subscription changed while the member was joining"
        return Completion(tuple(calls), rejoin, assigned, follow_up)

    def release(self, *, lost: bool) -> tuple[ListenerCall, ...]:
        """Leave (close/unsubscribe): lost or revoked, only when something is owned."""
        owned, self.owned = self.owned, frozenset()
        return release_calls(owned, lost=lost)


def cooperative_revocation(
    protocol: RebalanceProtocol,
    owned: frozenset[Any],
    claimed: frozenset[Any],
    assigned: frozenset[Any],
    what: str,
) -> tuple[list[ListenerCall], str | None]:
    """§6.4 step 5 for either embedding (``what``: "partitions" or "items"): under
    COOPERATIVE, revoke ``owned - assigned`` and rejoin; or rejoin when the assignment
    leaves out claims lost mid-join (:data:`CLAIMS_LOST_REJOIN`). Nothing under EAGER."""
    if protocol is not RebalanceProtocol.COOPERATIVE:
        return [], None
    revoked = owned - assigned
    if revoked:
        return [
            ListenerCall("on_partitions_revoked", revoked)
        ], f"need to revoke {what} and re-join"
    if claimed - assigned:
        return [], CLAIMS_LOST_REJOIN
    return [], None


def partition_racks(layout: TopicLayout, topic: str) -> tuple[frozenset[str], ...]:
    """The replica racks of each partition of ``topic`` (empty when it has no metadata)."""
    return tuple(layout.replica_racks(topic, p) for p in range(layout.get(topic, 0)))


def follow_up_needed(
    claims: Mapping[str, frozenset[Any]], assigned: Mapping[str, frozenset[Any]]
) -> bool:
    """Whether some member must give up something its JoinGroup claimed: it will revoke
    and rejoin, so another rebalance follows for certain (:data:`FOLLOW_UP_MARKER`)."""
    return any(owned - assigned.get(mid, frozenset()) for mid, owned in claims.items())


def release_calls(owned: frozenset[Any], *, lost: bool) -> tuple[ListenerCall, ...]:
    """Leaving: one lost or revoked call for what is owned, none when nothing is."""
    if not owned:
        return ()
    return (ListenerCall("on_partitions_lost" if lost else "on_partitions_revoked", owned),)


def _check_cooperative(
    assignor: str, members: Sequence[MemberSubscription], result: Mapping[str, Assignment]
) -> None:
    """§6.3 step 5, §7.6: under COOPERATIVE no partition may leave one member and reach
    another in the same generation (it must stay unassigned until its owner has revoked it
    and rejoined). An assignor that breaks this would have two members own one partition;
    the leader refuses to send such an assignment (scenario G43). Unlike the Java client,
    kgroup checks its own cooperative-sticky too: the check is cheap and the failure it
    prevents is silent double processing."""
    claims = {m.member_id: frozenset(m.subscription.owned_partitions) for m in members}
    revoked_by: dict[TopicPartition, str] = {}
    for member_id in sorted(claims):
        kept = frozenset(result[member_id].partitions) if member_id in result else frozenset()
        for tp in sorted(claims[member_id] - kept):
            revoked_by.setdefault(tp, member_id)
    moved: list[str] = []
    for member_id in sorted(result):
        for tp in result[member_id].partitions:
            if tp in revoked_by and tp not in claims.get(member_id, frozenset()):
                moved.append(f"{tp} from {revoked_by[tp]!r} to {member_id!r}")
    if moved:
        shown = ", ".join(moved[:5]) + (f" and {len(moved) - 5} more" if len(moved) > 5 else "")
        raise AssignmentError(
            f"assignor {assignor!r} broke the cooperative protocol: it moved partitions that "
            f"are still owned directly to another member ({shown}); a cooperative assignor "
            "must leave a moving partition unassigned until its owner has revoked it"
        )
