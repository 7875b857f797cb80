"""A model of Kafka 4.4's consumer-group coordinator (KIP-848, the ``consumer`` protocol).

What the simulated broker answers to ConsumerGroupHeartbeat, following Apache Kafka's
group coordinator (``GroupMetadataManager.consumerGroupHeartbeat``, ``consumerGroupLeave``,
``CurrentAssignmentBuilder``; spec §10.3) and the answers of a 4.4.0 broker where they
differ from the 2024 sources (``test_model_vs_kafka_848.py`` keeps them compared):

- **Group epoch.** Bumped when a member joins (a new member id, or a new static instance)
  or leaves (-1, session expiry, revocation deadline). A new group starts at epoch 1, so
  the first member's join makes it 2 (Kafka 4.3+, KAFKA-20268).
- **Target assignment.** Recomputed on the first heartbeat (from any member) that finds the
  group epoch ahead of the assignment epoch (``group.consumer.assignment.interval.ms`` = 0),
  by the schedule's server assignor (``BrokerConfig848.assignor``, :mod:`._assign_848`):
  ``range`` as Kafka 4.4.0's (consecutive ranges per topic in member order, not sticky), or
  ``uniform``, modelled as sticky and balanced: every member keeps what it had
  up to its quota, the rest go to the members below theirs. It meets the members in the
  order of their ids; Kafka's meets them in the order of a Java ``HashMap`` of the ids
  (measured: the ``growth`` script places the new partitions the other way round when the
  buckets are), so which member gets which free partition or extra quota can differ. The
  model-vs-Kafka scripts draw ids on which both orders agree.
- **Revocation before assignment** (``CurrentAssignmentBuilder``): a member whose target
  drops partitions stays at its epoch in UNREVOKED_PARTITIONS, its assignment cut to what
  it keeps, until a heartbeat reports them no longer owned; it then moves on. A partition
  still held (assigned or pending revocation) by another member is withheld
  (UNRELEASED_PARTITIONS) and given at a later heartbeat once released.
- **The revocation deadline.** Entering UNREVOKED_PARTITIONS arms a timer of the member's
  rebalance timeout; if the member is still at that epoch when it fires, it is removed.
- **Session expiry.** Every accepted heartbeat re-arms a session timer; an error answer
  does not. On expiry the member is removed. A coordinator that loads the group re-arms
  every member's session timer, and the revocation timer of every member in
  UNREVOKED_PARTITIONS (``onLoaded``).
- **Epoch validation** (§10.3): a higher epoch, or a lower one that is not exactly the
  previous epoch with owned partitions a subset of the assignment, is FENCED_MEMBER_EPOCH;
  the member stays in the group (a fenced answer changes nothing). A dynamic member that
  rejoins with epoch 0 under its member id is accepted at its current epoch (4.4.0; the
  2024 sources fenced it).
- **Static members.** -2 keeps the member and its partitions (epoch -2, pending revocation
  dropped) until its session expires; a join (epoch 0) with its instance id replaces it
  (the new member id takes over its assignment and target, no group epoch bump). While the
  holder has not left with -2, a join with the instance id is UNRELEASED_INSTANCE_ID, even
  from the holder's own member id (4.4.0); a heartbeat (epoch > 0) from a replaced member
  id is FENCED_INSTANCE_ID.

- **Partitions added** (:meth:`ConsumerGroupModel.topics_changed`): the group epoch is
  bumped at once and the next heartbeat computes a target over every partition (Kafka
  does so at the next heartbeat after its metadata image changed; compared with Kafka by
  the ``growth`` script of ``test_model_vs_kafka_848.py``).
- **A topic deleted** (the same method, without the topic): its partitions leave the
  target, and each owner revokes them like any other before it moves to the new epoch
  (compared with Kafka by the ``deletion`` script).
- **A topic created** that the members subscribe to (the same method, with it): its
  partitions join the target (compared with Kafka by the ``creation`` script, with
  ``range``).
- **A topic deleted and created again under its name** (the same method, with a new
  incarnation, :attr:`BrokerConfig848.incarnations`): the new topic has a new id, so its
  partitions are other partitions than the old one's. Each owner of an old partition
  revokes it before it is given a new one, and another member may be given the new
  partition of a name while the old one's owner still revokes it (compared with Kafka by
  the ``recreation`` script).

- **Regex subscriptions** (``SubscribedTopicRegex``, Kafka's
  ``maybeUpdateRegularExpressions`` and ``handleRegularExpressionsResult``): a regex is
  resolved by the coordinator in the background (:data:`RESOLVE_MS` later), in one batch
  with every regex of the group, only from inside a heartbeat and at most once every
  :data:`REGEX_REFRESH_MIN_MS`: when a regex in use is unresolved, when a topic was
  created since the last resolution (and once after a coordinator loads the group, whose
  metadata image is newer than any resolution before), or every
  :data:`REGEX_REFRESH_INTERVAL_MS`. A member
  that joins with a regex nobody uses yet gets nothing at first and no group epoch bump;
  the resolution bumps the epoch when a regex's topics changed (an unresolved regex
  matches nothing). A member that joins with a regex already resolved bumps it at once.
  A regex nobody uses any more is forgotten. Matching is a whole-name match. The group's
  partitions are those of the topics its members subscribe to by name or by a resolved
  regex; a metadata change bumps the group epoch only when it touches those (compared
  with Kafka by the ``regex`` script).

Not modelled: rack awareness, classic members in a consumer group,
the group size limit, assignment batching (interval 0), stored offsets (commits are
validated, :meth:`ConsumerGroupModel.commit`, not kept), an invalid regex
(INVALID_REGULAR_EXPRESSION), a member with both names and a regex. Every change is durable
at once (the persisted record is the whole state): a coordinator that loads the group
sees every answered change.

:meth:`ConsumerGroupModel.check` is invariant 4 for these groups.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from kgroup._core._consumer_protocol import TopicPartition
from kgroup._core._kip848_state import IdPartition
from kgroup._errors import ErrorCode
from kgroup.testing.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    FetchedOffset,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    TopicIdPartitions,
)

from ._assign_848 import range_assign, sticky_assign
from ._model import ModelError, Timers

__all__ = [
    "BrokerConfig848",
    "ConsumerGroupModel",
    "GroupRecord848",
    "Member848",
    "MemberState848",
    "topic_id",
]

E = ErrorCode
P = IdPartition
JOIN, LEAVE, LEAVE_STATIC = 0, -1, -2


def topic_id(name: str, incarnation: int = 0) -> uuid.UUID:
    """The simulated cluster's id of topic ``name`` (stable across runs); ``incarnation``
    counts the times the topic was created again under its name (a new id each time)."""
    if incarnation == 0:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"kgroup-sim/{name}")
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kgroup-sim/{name}#{incarnation}")


class MemberState848(enum.Enum):
    """``MemberState`` of Kafka's coordinator (the broker's view of one member)."""

    STABLE = "STABLE"
    UNREVOKED_PARTITIONS = "UNREVOKED_PARTITIONS"
    UNRELEASED_PARTITIONS = "UNRELEASED_PARTITIONS"


MS = MemberState848


@dataclass(frozen=True)
class Member848:
    member_id: str
    instance_id: str | None
    epoch: int
    previous_epoch: int
    state: MemberState848
    assigned: frozenset[IdPartition]
    pending: frozenset[IdPartition]  # pending revocation
    rebalance_timeout_ms: int
    subscribed: tuple[str, ...]
    client: str = ""
    #: SubscribedTopicRegex ("" for none)
    regex: str = ""
    #: the epoch each partition it holds (assigned or pending revocation) was assigned at
    #: (KIP-1251): an older commit epoch is checked against it
    assignment_epochs: Mapping[IdPartition, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupRecord848:
    """What the coordinator persisted (every change, at once)."""

    group_epoch: int
    assignment_epoch: int
    members: Mapping[str, Member848]
    target: Mapping[str, frozenset[IdPartition]]
    #: resolved regexes (the ConsumerGroupRegularExpression records): regex -> topics
    resolved: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: when the last resolution ended (ms; the records' timestamp)
    last_refresh_ms: float = float("-inf")


@dataclass(frozen=True)
class BrokerConfig848:
    session_timeout_ms: int
    heartbeat_interval_ms: int
    #: topic name -> partition count
    topics: Mapping[str, int] = field(default_factory=dict)
    #: the server assignor: ``uniform`` (Kafka's default) or ``range``
    assignor: str = "uniform"
    #: topic name -> how many times it was created again under that name (absent: 0)
    incarnations: Mapping[str, int] = field(default_factory=dict)

    def ids(self) -> dict[str, uuid.UUID]:
        """Every topic's current id, by name."""
        return {t: topic_id(t, self.incarnations.get(t, 0)) for t in self.topics}


def by_topic(parts: Iterable[IdPartition]) -> tuple[TopicIdPartitions, ...]:
    grouped: dict[uuid.UUID, list[int]] = {}
    for p in parts:
        grouped.setdefault(p.topic_id, []).append(p.partition)
    return tuple(
        TopicIdPartitions(topic_id=t, partitions=tuple(sorted(grouped[t])))
        for t in sorted(grouped, key=str)
    )


def owned_of(parts: tuple[TopicIdPartitions, ...] | None) -> frozenset[IdPartition] | None:
    if parts is None:
        return None
    return frozenset(P(t.topic_id, p) for t in parts for p in t.partitions)


class _Refused(Exception):
    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message)
        self.code = code


#: How long after it is started the coordinator's background resolution of the group's
#: regexes ends (an executor task in Kafka; a few milliseconds).
RESOLVE_MS = 1.0
#: Kafka's ``REGEX_BATCH_REFRESH_MIN_INTERVAL_MS``: a group's regexes are resolved at most
#: this often.
REGEX_REFRESH_MIN_MS = 10_000.0
#: ``group.consumer.regex.refresh.interval.ms`` (default): resolved again this often anyway.
REGEX_REFRESH_INTERVAL_MS = 600_000.0


def _universe(config: BrokerConfig848, subscribed: Iterable[str]) -> list[IdPartition]:
    """Every partition of the ``subscribed`` topics that exist, in a stable order."""
    ids = config.ids()
    wanted = set(subscribed)
    return sorted(
        (P(ids[t], p) for t, n in config.topics.items() if t in wanted for p in range(n)),
        key=lambda p: (str(p.topic_id), p.partition),
    )


class ConsumerGroupModel:
    """One consumer group on its coordinator (see the module docstring)."""

    def __init__(
        self,
        group_id: str,
        config: BrokerConfig848,
        *,
        timers: Timers,
        persist: Callable[[GroupRecord848], None] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.group_id = group_id
        self.config = config
        self.timers = timers
        self._persist = persist
        self._log = log
        self.exists = False
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, Member848] = {}
        self.target: dict[str, frozenset[IdPartition]] = {}
        #: Group epoch bumps (the summary's "rebalances").
        self.rebalances = 0
        #: Resolved regexes (regex -> topic names), and when the last resolution ended.
        self.resolved: dict[str, frozenset[str]] = {}
        self.last_refresh_ms = float("-inf")
        self._refreshing = False  # a background resolution runs
        self._topics_created = False  # a topic was created since it last started

    @classmethod
    def load(
        cls,
        group_id: str,
        record: GroupRecord848 | None,
        *,
        config: BrokerConfig848,
        timers: Timers,
        persist: Callable[[GroupRecord848], None] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> ConsumerGroupModel:
        """A coordinator loads the group (``onLoaded``): every member's session timer is
        armed afresh, and the revocation timer of every member still revoking."""
        group = cls(group_id, config, timers=timers, persist=persist, log=log)
        if record is not None:
            group.exists = True
            group.group_epoch = record.group_epoch
            group.assignment_epoch = record.assignment_epoch
            group.members = dict(record.members)
            group.target = dict(record.target)
            group.resolved = dict(record.resolved)
            group.last_refresh_ms = record.last_refresh_ms
            # Kafka's new shard takes the metadata image at load as the newest with new
            # topics, which every resolution before the load is older than: the group's
            # regexes are resolved again once (GroupMetadataManager.onMetadataUpdate).
            group._topics_created = bool(group.resolved)
            group._trace(f"loaded epoch {record.group_epoch} members {sorted(group.members)}")
            for member in group.members.values():
                group._arm_session(member.member_id)
                if member.state is MS.UNREVOKED_PARTITIONS:
                    group._arm_revocation(member)
            group.check()
        return group

    def unload(self) -> None:
        """``onUnloaded()``: nothing is parked in a consumer group (the timers go with the
        coordinator)."""

    # -- what the simulation reads ---------------------------------------------------------

    @property
    def generation(self) -> int:
        return self.group_epoch

    def subscribed_topics(self) -> frozenset[str]:
        """The topics the members subscribe to: by name, or by a resolved regex."""
        topics: set[str] = set()
        for member in self.members.values():
            topics.update(member.subscribed)
            if member.regex:
                topics.update(self.resolved.get(member.regex, ()))
        return frozenset(topics)

    @property
    def universe(self) -> list[IdPartition]:
        """Every partition the group's members subscribe to (the assignor's input)."""
        return _universe(self.config, self.subscribed_topics())

    def regexes_pending(self) -> bool:
        """Whether a regex in use is unresolved, or a topic it matches is not in its
        resolution yet (one it names that is gone stays there until a later resolution,
        as in Kafka, harmlessly: it has no partitions)."""
        for member in self.members.values():
            if member.regex:
                resolved = self.resolved.get(member.regex)
                if resolved is None:
                    return True
                if any(
                    re.fullmatch(member.regex, t) and t not in resolved for t in self.config.topics
                ):
                    return True
        return False

    def assignment_of(self, member_id: str) -> frozenset[IdPartition]:
        member = self.members.get(member_id)
        return frozenset() if member is None else member.assigned

    def _trace(self, text: str) -> None:
        if self._log is not None:
            self._log(text)

    def _save(self) -> None:
        self.check()
        if self._persist is not None:
            self._persist(
                GroupRecord848(
                    self.group_epoch,
                    self.assignment_epoch,
                    dict(self.members),
                    dict(self.target),
                    dict(self.resolved),
                    self.last_refresh_ms,
                )
            )

    # -- timers ----------------------------------------------------------------------------

    def _arm_session(self, member_id: str) -> None:
        self.timers.schedule(
            f"session:{member_id}",
            self.config.session_timeout_ms,
            lambda: self._expire(member_id, "session expired"),
        )

    def _arm_revocation(self, member: Member848) -> None:
        member_id, epoch = member.member_id, member.epoch

        def fire() -> None:
            current = self.members.get(member_id)
            if current is not None and current.epoch == epoch:
                self._expire(member_id, f"did not revoke within {member.rebalance_timeout_ms} ms")

        self.timers.schedule(f"revoke:{member_id}", member.rebalance_timeout_ms, fire)

    def _expire(self, member_id: str, why: str) -> None:
        if member_id in self.members:
            self._trace(f"fence {member_id}: {why}")
            self._remove(member_id)
            self._save()

    def _remove(self, member_id: str) -> None:
        """``consumerGroupFenceMember``: the member, its target and its partitions go; the
        group epoch is bumped."""
        self.members.pop(member_id, None)
        self.target.pop(member_id, None)
        self.timers.cancel(f"session:{member_id}")
        self.timers.cancel(f"revoke:{member_id}")
        self._forget_unused_regexes()
        self._bump()

    def _bump(self) -> None:
        self.group_epoch += 1
        self.rebalances += 1

    def topics_changed(
        self, topics: Mapping[str, int], incarnations: Mapping[str, int] | None = None
    ) -> None:
        """The broker's metadata changed a topic the group subscribes to (Kafka's
        ``onMetadataUpdate``): the partitions to assign follow, and the group epoch is bumped
        so that the next heartbeat computes a new target. ``incarnations``: topics created
        again under their names (new ids; None: as before)."""
        before = self._subscribed_image()
        created = bool(set(topics) - set(self.config.topics))
        self.config = replace(
            self.config,
            topics=dict(topics),
            incarnations=dict(self.config.incarnations if incarnations is None else incarnations),
        )
        if created:
            self._topics_created = True  # the next refresh resolves the regexes again
        if self.exists and self._subscribed_image() != before:
            self._bump()
            self._trace(f"topics {dict(topics)}: group epoch {self.group_epoch}")
            self._save()

    def _subscribed_image(self) -> dict[str, tuple[uuid.UUID, int]]:
        """The subscribed topics that exist: id and partition count (what Kafka hashes into
        the group's metadata hash; a change bumps the group epoch)."""
        ids, subscribed = self.config.ids(), self.subscribed_topics()
        return {t: (ids[t], n) for t, n in self.config.topics.items() if t in subscribed}

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------

    def heartbeat(
        self, req: ConsumerGroupHeartbeatRequest, client: str = ""
    ) -> ConsumerGroupHeartbeatResponse:
        try:
            self._validate(req)
            if req.member_epoch in (LEAVE, LEAVE_STATIC):
                resp = self._leave(req)
            else:
                resp = self._heartbeat(req, client)
        except _Refused as refused:
            self._trace(
                f"{client} epoch {req.member_epoch}: {ErrorCode(refused.code).name} {refused}"
            )
            return ConsumerGroupHeartbeatResponse(  # Kafka's error answers carry epoch 0
                error_code=refused.code, error_message=str(refused) or None, member_epoch=0
            )
        self._save()
        return resp

    def _validate(self, req: ConsumerGroupHeartbeatRequest) -> None:
        if req.group_id != self.group_id:
            raise ModelError(f"heartbeat for group {req.group_id!r}")
        if not req.member_id:
            raise _Refused(E.INVALID_REQUEST, "MemberId can't be empty.")  # v1 (KIP-1082)
        epoch = req.member_epoch
        if epoch == JOIN:
            if req.rebalance_timeout_ms == -1:
                raise _Refused(E.INVALID_REQUEST, "RebalanceTimeoutMs must be provided")
            if req.topic_partitions is None or req.topic_partitions:
                raise _Refused(E.INVALID_REQUEST, "TopicPartitions must be empty when joining")
            if not req.subscribed_topic_names and not req.subscribed_topic_regex:
                raise _Refused(E.INVALID_REQUEST, "SubscribedTopicNames must be set")
        elif epoch == LEAVE_STATIC and req.instance_id is None:
            raise _Refused(E.INVALID_REQUEST, "InstanceId can't be null.")
        elif epoch < LEAVE_STATIC:
            raise _Refused(E.INVALID_REQUEST, "MemberEpoch is invalid.")
        if epoch != JOIN and not self.exists:
            raise _Refused(E.GROUP_ID_NOT_FOUND, "no such group")

    def _leave(self, req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
        if req.instance_id is None:
            if req.member_id not in self.members:
                raise _Refused(E.UNKNOWN_MEMBER_ID)
            member = self.members[req.member_id]
        else:
            member = self._static_holder(req.instance_id, req.member_id)
        if req.member_epoch == LEAVE_STATIC:
            self.members[member.member_id] = replace(
                member,
                epoch=LEAVE_STATIC,
                pending=frozenset(),
                assignment_epochs=dict.fromkeys(member.assigned, 0),
            )
            self._trace(f"{member.member_id} ({member.client}) leaves for now (-2)")
        else:
            self._trace(f"{member.member_id} ({member.client}) leaves")
            self._remove(member.member_id)
        return ConsumerGroupHeartbeatResponse(
            error_code=E.NONE, member_id=req.member_id, member_epoch=req.member_epoch
        )

    def _static_holder(self, instance_id: str, member_id: str) -> Member848:
        holder = self._by_instance(instance_id)
        if holder is None:
            raise _Refused(E.UNKNOWN_MEMBER_ID, f"no static member {instance_id}")
        if holder.member_id != member_id:
            raise _Refused(E.FENCED_INSTANCE_ID, f"{instance_id} is {holder.member_id}")
        return holder

    def _by_instance(self, instance_id: str) -> Member848 | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None

    @staticmethod
    def _check_epoch(member: Member848, epoch: int, owned: frozenset[IdPartition] | None) -> None:
        if epoch > member.epoch:
            raise _Refused(E.FENCED_MEMBER_EPOCH, f"epoch {epoch} > {member.epoch}")
        if epoch < member.epoch and (
            epoch != member.previous_epoch or owned is None or not owned <= member.assigned
        ):
            raise _Refused(E.FENCED_MEMBER_EPOCH, f"epoch {epoch} < {member.epoch}")

    def _new_member(self, req: ConsumerGroupHeartbeatRequest, client: str) -> Member848:
        return Member848(
            member_id=req.member_id,
            instance_id=req.instance_id,
            epoch=0,
            previous_epoch=0,
            state=MS.STABLE,
            assigned=frozenset(),
            pending=frozenset(),
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            subscribed=tuple(req.subscribed_topic_names or ()),
            client=client,
        )

    def _member_for(
        self, req: ConsumerGroupHeartbeatRequest, client: str, owned: frozenset[IdPartition] | None
    ) -> tuple[Member848, bool]:
        """The member this heartbeat is from, and whether it is new to the group (a group
        epoch bump). Raises _Refused as Kafka does."""
        epoch = req.member_epoch
        if req.instance_id is None:
            member = self.members.get(req.member_id)
            if member is None:
                if epoch != JOIN:
                    raise _Refused(E.UNKNOWN_MEMBER_ID)
                return self._new_member(req, client), True
            if epoch != JOIN:  # 4.4.0: a rejoin under the same id is accepted as is
                self._check_epoch(member, epoch, owned)
            return member, False
        if epoch != JOIN:
            current = self._static_holder(req.instance_id, req.member_id)
            self._check_epoch(current, epoch, owned)
            return current, False
        holder = self._by_instance(req.instance_id)
        if holder is None:
            return self._new_member(req, client), True
        if holder.epoch != LEAVE_STATIC:
            raise _Refused(
                E.UNRELEASED_INSTANCE_ID,
                f"Static member {req.member_id} with instance id {req.instance_id} cannot join"
                f" the group because the instance id is owned by {holder.member_id} member.",
            )
        # Static replacement: the new member id takes over the instance's assignment.
        new = replace(holder, member_id=req.member_id, epoch=0, previous_epoch=0, client=client)
        self._trace(f"{req.member_id} ({client}) replaces static {holder.member_id}")
        target = self.target.pop(holder.member_id, None)
        del self.members[holder.member_id]
        self.timers.cancel(f"session:{holder.member_id}")
        self.timers.cancel(f"revoke:{holder.member_id}")
        if target is not None:
            self.target[req.member_id] = target
        return new, False

    def _heartbeat(
        self, req: ConsumerGroupHeartbeatRequest, client: str
    ) -> ConsumerGroupHeartbeatResponse:
        owned = owned_of(req.topic_partitions)
        member, joined = self._member_for(req, client, owned)
        if not self.exists:
            self.exists = True
            self.group_epoch = self.assignment_epoch = 1  # Kafka 4.3+: a new group is at 1
        updated = member
        if req.rebalance_timeout_ms != -1:
            updated = replace(updated, rebalance_timeout_ms=req.rebalance_timeout_ms)
        if req.subscribed_topic_names is not None:
            updated = replace(updated, subscribed=tuple(req.subscribed_topic_names))
        if req.subscribed_topic_regex is not None:
            updated = replace(updated, regex=req.subscribed_topic_regex)
        names_before = () if joined else member.subscribed
        regex_before = "" if joined else member.regex
        self.members[updated.member_id] = updated
        bump = updated.subscribed != names_before
        if updated.regex != regex_before:
            self._forget_unused_regexes()
            # Kafka: a regex cleared, or one already resolved, bumps the epoch; a regex
            # nobody resolved yet waits for its resolution (which bumps it).
            bump = bump or not updated.regex or updated.regex in self.resolved
        if bump:
            self._bump()
            if joined:
                self._trace(f"{req.member_id} ({client}) joins: group epoch {self.group_epoch}")
        elif joined:
            self._trace(f"{req.member_id} ({client}) joins with regex {updated.regex!r}")
        self._maybe_refresh()
        if self.group_epoch > self.assignment_epoch:
            self._compute_target()
        reconciled = self._reconcile(updated, owned)
        if reconciled != updated:
            self.members[reconciled.member_id] = reconciled
            if reconciled.state is MS.UNREVOKED_PARTITIONS:
                self._arm_revocation(reconciled)
            else:
                self.timers.cancel(f"revoke:{reconciled.member_id}")
            self._trace(
                f"{client} {reconciled.state.name} epoch {reconciled.epoch} "
                f"assigned {self._show(reconciled.assigned)} "
                f"revoking {self._show(reconciled.pending)}"
            )
        self._arm_session(reconciled.member_id)
        full = req.member_epoch == JOIN or (
            req.rebalance_timeout_ms != -1
            and req.subscribed_topic_names is not None
            and req.topic_partitions is not None
        )
        changed = reconciled.assigned != member.assigned
        return ConsumerGroupHeartbeatResponse(
            error_code=E.NONE,
            member_id=reconciled.member_id,
            member_epoch=reconciled.epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=by_topic(reconciled.assigned) if full or changed else None,
        )

    def _show(self, parts: Iterable[IdPartition]) -> str:
        """``parts`` by name; a deleted topic's as ``gone:<id prefix>``."""
        names = {tid: t for t, tid in self.config.ids().items()}

        def name(p: IdPartition) -> str:
            return names.get(p.topic_id) or f"gone:{str(p.topic_id)[:4]}"

        ordered = sorted(parts, key=lambda p: (str(p.topic_id), p.partition))
        return "[" + ",".join(f"{name(p)}-{p.partition}" for p in ordered) + "]"

    # -- OffsetCommit (v9, v10) ------------------------------------------------------------

    def commit(
        self, req: OffsetCommitRequest
    ) -> tuple[OffsetCommitResponse, dict[TopicPartition, uuid.UUID | None]]:
        """``KafkaApis.handleOffsetCommitRequest`` then ``ConsumerGroup.validateOffsetCommit``
        (Kafka 4.3+, KIP-1251).

        By topic id (v10, ``req.topic_ids``), a partition whose id is no topic's now (its
        topic was deleted) is answered UNKNOWN_TOPIC_ID, and the rest goes on; by name, the
        topic's current id is what the offset is stored under. Then, under the member's
        current epoch a commit is taken whatever it holds; a newer epoch is
        STALE_MEMBER_EPOCH; an older one only for partitions it holds (assigned or pending
        revocation) since that epoch or earlier, else STALE_MEMBER_EPOCH. One failing
        partition fails what goes on. Returns the answer and what was taken, each
        partition with its topic id (offsets are not stored: nothing here reads them)."""
        if req.group_id != self.group_id:
            raise ModelError(f"OffsetCommit for group {req.group_id!r}")
        current = self.config.ids()
        by_id = {(t, p): tid for t, p, tid in req.topic_ids}
        if req.topic_ids and len(by_id) != len(req.partitions):
            raise ModelError(f"OffsetCommit v10 without every partition's topic id: {req!r}")
        gone = set(by_id.values()) - set(current.values())
        ids = {
            (p.topic, p.partition): by_id[(p.topic, p.partition)] if by_id else current.get(p.topic)
            for p in req.partitions
        }
        going_on = [p for p in req.partitions if ids[(p.topic, p.partition)] not in gone]

        def answer(code: int) -> OffsetCommitResponse:
            return OffsetCommitResponse(
                results=tuple(
                    (p.topic, p.partition, code if p in going_on else E.UNKNOWN_TOPIC_ID)
                    for p in req.partitions
                )
            )

        if not going_on:
            return answer(E.NONE), {}
        if not self.exists:
            return answer(E.GROUP_ID_NOT_FOUND), {}
        member = self.members.get(req.member_id)
        if member is None:
            return answer(E.UNKNOWN_MEMBER_ID), {}
        epoch = req.generation_id
        if epoch > member.epoch:
            return answer(E.STALE_MEMBER_EPOCH), {}
        if epoch < member.epoch:
            for part in going_on:
                tid = ids[(part.topic, part.partition)]
                since = (
                    None if tid is None else member.assignment_epochs.get(P(tid, part.partition))
                )
                if since is None or epoch < since:
                    return answer(E.STALE_MEMBER_EPOCH), {}
        taken = {
            TopicPartition(p.topic, p.partition): ids[(p.topic, p.partition)] for p in going_on
        }
        return answer(E.NONE), taken

    def fetch(
        self, req: OffsetFetchRequest, stored: Mapping[IdPartition, int]
    ) -> OffsetFetchResponse:
        """``KafkaApis.fetchOffsetsForGroup`` then ``ConsumerGroup.validateOffsetFetch``:
        a member's fetch (v9+, its member id and epoch) is UNKNOWN_MEMBER_ID for a member
        the group does not have, STALE_MEMBER_EPOCH unless the epoch is the member's
        current one. By topic id (v10), a partition whose id is no topic's now is
        UNKNOWN_TOPIC_ID; by name, the topic's current id is read. ``stored``: the offsets
        committed, by topic id and partition (a deleted topic's are never read again: Kafka
        deletes them with the topic, and its id is never reused)."""
        if req.group_id != self.group_id or req.partitions is None:
            raise ModelError(f"unexpected OffsetFetch {req!r}")
        if req.member_id is not None or req.member_epoch != -1:
            member = self.members.get(req.member_id or "")
            if member is None:
                return OffsetFetchResponse(error_code=E.UNKNOWN_MEMBER_ID)
            if req.member_epoch != member.epoch:
                return OffsetFetchResponse(error_code=E.STALE_MEMBER_EPOCH)
        current = self.config.ids()
        by_id = {(t, p): tid for t, p, tid in req.topic_ids}
        if req.topic_ids and len(by_id) != len(req.partitions):
            raise ModelError(f"OffsetFetch v10 without every partition's topic id: {req!r}")
        fetched = []
        for topic, partition in req.partitions:
            tid = by_id[(topic, partition)] if by_id else current.get(topic)
            if by_id and tid not in current.values():
                fetched.append(
                    FetchedOffset(
                        topic=topic, partition=partition, offset=-1, error_code=E.UNKNOWN_TOPIC_ID
                    )
                )
                continue
            # By name, a topic that does not exist has nothing committed: -1, no error.
            offset = -1 if tid is None else stored.get(P(tid, partition), -1)
            fetched.append(FetchedOffset(topic=topic, partition=partition, offset=offset))
        return OffsetFetchResponse(partitions=tuple(fetched))

    # -- regexes ---------------------------------------------------------------------------

    def _regexes_in_use(self) -> set[str]:
        return {m.regex for m in self.members.values() if m.regex}

    def _forget_unused_regexes(self) -> None:
        """A regex no member uses any more is forgotten (Kafka writes its tombstone)."""
        for regex in set(self.resolved) - self._regexes_in_use():
            del self.resolved[regex]

    def _maybe_refresh(self) -> None:
        """``maybeUpdateRegularExpressions``, from inside a heartbeat: start the background
        resolution of every regex in use, unless one runs or the last one ended less than
        :data:`REGEX_REFRESH_MIN_MS` ago, when a regex is unresolved, a topic was created
        since, or :data:`REGEX_REFRESH_INTERVAL_MS` passed."""
        used = self._regexes_in_use()
        now = self.timers.now_ms()
        if not used or self._refreshing or now <= self.last_refresh_ms + REGEX_REFRESH_MIN_MS:
            return
        stale = now > self.last_refresh_ms + REGEX_REFRESH_INTERVAL_MS
        if not (used - set(self.resolved) or self._topics_created or stale):
            return
        self._refreshing, self._topics_created = True, False
        names = tuple(self.config.topics)  # the metadata image it resolves against
        self.timers.schedule("regex", RESOLVE_MS, lambda: self._resolved(names))

    def _resolved(self, names: tuple[str, ...]) -> None:
        """``handleRegularExpressionsResult``: every regex still in use gets the topics of
        ``names`` it matches whole; the group epoch is bumped if any regex's topics changed
        (an unresolved regex matched nothing)."""
        self._refreshing = False
        self.last_refresh_ms = self.timers.now_ms()
        changed = False
        for regex in sorted(self._regexes_in_use()):
            topics = frozenset(t for t in names if re.fullmatch(regex, t))
            if self.resolved.get(regex, frozenset()) != topics:
                changed = True
            self.resolved[regex] = topics
        if changed:
            self._bump()
        # Sorted: a frozenset's order follows string hashing, which differs per process,
        # and the trace's digest must not (seed 14 gave two digests before).
        resolved = {regex: sorted(topics) for regex, topics in sorted(self.resolved.items())}
        self._trace(f"regexes resolved {resolved}: group epoch {self.group_epoch}")
        self._save()

    def _compute_target(self) -> None:
        members = sorted(self.members)
        if self.config.assignor == "range":
            instances = {m: self.members[m].instance_id for m in members}
            self.target = range_assign(instances, self.universe)
        else:
            self.target = sticky_assign(members, self.universe, self.target)
        self.assignment_epoch = self.group_epoch
        self._trace(
            f"target at epoch {self.group_epoch}: "
            + " ".join(f"{self.members[m].client}={self._show(self.target[m])}" for m in members)
        )

    def _owner_of(self, part: IdPartition, besides: str) -> str | None:
        for member in self.members.values():
            if member.member_id != besides and (part in member.assigned or part in member.pending):
                return member.member_id
        return None

    def _reconcile(self, member: Member848, owned: frozenset[IdPartition] | None) -> Member848:
        """``CurrentAssignmentBuilder.build``."""
        target_epoch = self.assignment_epoch
        if member.epoch == LEAVE_STATIC:
            return member
        if member.state is MS.STABLE:
            if member.epoch == target_epoch:
                return member
            return self._next(member, member.epoch, owned)
        if member.state is MS.UNREVOKED_PARTITIONS:
            if owned is None or owned & member.pending:
                return member
            return self._next(member, member.epoch + 1, owned)
        return self._next(member, member.epoch, owned)

    def _next(
        self, member: Member848, epoch: int, owned: frozenset[IdPartition] | None
    ) -> Member848:
        """``computeNextAssignment``."""
        target = self.target.get(member.member_id, frozenset())
        keep = member.assigned & target
        revoke = member.assigned - keep
        wanted = target - keep
        unreleased = frozenset(p for p in wanted if self._owner_of(p, member.member_id))
        new = wanted - unreleased
        target_epoch = self.assignment_epoch

        def moved(state: MemberState848, to: int, assigned: frozenset[IdPartition]) -> Member848:
            pending = revoke if state is MS.UNREVOKED_PARTITIONS else frozenset()
            epochs = {p: member.assignment_epochs.get(p, target_epoch) for p in assigned | pending}
            return replace(
                member,
                state=state,
                epoch=to,
                previous_epoch=member.epoch,
                assigned=assigned,
                pending=pending,
                assignment_epochs=epochs,
            )

        if revoke and (owned is None or owned & revoke):
            return moved(MS.UNREVOKED_PARTITIONS, epoch, keep)
        state = MS.UNRELEASED_PARTITIONS if unreleased else MS.STABLE
        return moved(state, target_epoch, keep | new)

    # -- invariant 4 ------------------------------------------------------------------------

    def check(self) -> None:
        """The model's consistency: raises ModelError."""
        holder: dict[IdPartition, str] = {}
        for mid, member in self.members.items():
            if member.member_id != mid:
                raise ModelError(f"member {mid} recorded as {member.member_id}")
            if member.assigned & member.pending:
                raise ModelError(f"{mid} both holds and revokes {member.assigned & member.pending}")
            if set(member.assignment_epochs) != member.assigned | member.pending:
                raise ModelError(f"{mid}'s assignment epochs are not those of what it holds")
            if member.epoch > self.group_epoch:
                raise ModelError(f"{mid} at epoch {member.epoch} > group {self.group_epoch}")
            if member.state is MS.UNREVOKED_PARTITIONS and member.epoch != LEAVE_STATIC:
                if not member.pending:
                    raise ModelError(f"{mid} UNREVOKED_PARTITIONS with nothing to revoke")
            for part in member.assigned | member.pending:
                if part in holder:
                    raise ModelError(f"{part} held by {holder[part]} and {mid}")
                holder[part] = mid
            if member.state is MS.STABLE and member.epoch == self.assignment_epoch:
                if member.assigned != self.target.get(mid, frozenset()):
                    raise ModelError(f"{mid} STABLE at the target epoch but not on its target")
            if member.instance_id is not None:
                same = [m for m in self.members.values() if m.instance_id == member.instance_id]
                if len(same) > 1:
                    raise ModelError(f"instance {member.instance_id} held by {len(same)} members")
        if self.assignment_epoch > self.group_epoch:
            raise ModelError(f"assignment epoch {self.assignment_epoch} > {self.group_epoch}")
        targeted: set[IdPartition] = set()
        for mid, parts in self.target.items():
            if mid not in self.members:
                raise ModelError(f"target for {mid}, not a member")
            if parts & targeted:
                raise ModelError(f"target gives {sorted(parts & targeted)} twice")
            targeted |= parts
        if self.members and self.assignment_epoch == self.group_epoch:
            if set(self.target) == set(self.members):
                universe = self.universe
                if targeted != set(universe):
                    raise ModelError("the target does not cover every partition")
                for topic, parts in self._balance_units(universe).items():
                    sizes = [len(p & parts) for p in self.target.values()]
                    if max(sizes) - min(sizes) > 1:
                        raise ModelError(f"target not balanced{topic}: {sorted(sizes)}")

    def _balance_units(self, universe: list[IdPartition]) -> dict[str, frozenset[IdPartition]]:
        """What the assignor balances of ``universe``: ``range`` each topic on its own,
        ``uniform`` the partitions of every topic together."""
        if self.config.assignor != "range":
            return {"": frozenset(universe)}
        units: dict[str, set[IdPartition]] = {}
        for part in universe:
            units.setdefault(f" in topic {part.topic_id}", set()).add(part)
        return {name: frozenset(parts) for name, parts in units.items()}
