"""One table of reactions to broker error codes: ``(api, error code) -> reaction``.

Every coordinator answer the core judges (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
OffsetCommit, OffsetFetch) is looked up here with :func:`reaction_for`; the handler then
carries out the reaction it gets (each handler states which reactions it knows, and a
reaction it does not know is a bug in kgroup, raised as LocalProtocolError).

The stale-response rule (spec §2.5) is applied here, once: a row whose reaction depends on
the Generation (a reset, a fencing) names the reaction to use instead when the answer is
for a request sent under an older Generation than the member's current one. Handlers never
compare generations themselves.

A code that has no row takes its API's default reaction (the spec's "any other error" line).
Rows that merely restate the default are kept where the spec names the code, so the table
reads like the spec's tables (§4.1-§4.7).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

from .._errors import ErrorCode, LocalProtocolError
from ._state import Generation

__all__ = ["DEFAULTS", "REACTIONS", "Api", "Reaction", "Row", "reaction_for", "unhandled"]


class Api(enum.Enum):
    """The coordinator APIs whose answers the core judges."""

    FIND_COORDINATOR = "FindCoordinator"
    JOIN_GROUP = "JoinGroup"
    SYNC_GROUP = "SyncGroup"
    HEARTBEAT = "Heartbeat"
    OFFSET_COMMIT = "OffsetCommit"  # per partition; the first error decides (§4.6)
    OFFSET_FETCH = "OffsetFetch"  # the group-level error code
    OFFSET_FETCH_PARTITION = "OffsetFetch partition"  # a partition's error code (§4.7)


class Reaction(enum.Enum):
    """What an answer means for the member. Each handler documents how it carries it out."""

    #: The request succeeded.
    OK = "ok"
    #: Restart at once, without backoff (T6: the chain restarts from JoinGroup).
    RETRY_NOW = "retry now"
    #: Back off, then retry; the coordinator stays known.
    RETRY_BACKOFF = "retry after backoff"
    #: The coordinator moved or is unavailable: mark it unknown (§4.0.3), back off, retry.
    COORDINATOR_MOVED = "coordinator moved"
    #: JoinGroup MEMBER_ID_REQUIRED (T3): adopt the member id, rejoin at once.
    ADOPT_MEMBER_ID = "adopt member id"
    #: Reset the Generation including the member id (§2.4; UNKNOWN_MEMBER_ID).
    RESET_GENERATION = "reset generation"
    #: Reset the Generation keeping the member id (§2.4; ILLEGAL_GENERATION).
    RESET_GENERATION_KEEP_ID = "reset generation, keep member id"
    #: Another member took this static member's instance id: reset and fail fatally.
    FENCED = "fenced"
    #: The group is rebalancing: a heartbeat still counts as a success (the member rejoins
    #: if it is STABLE); a commit fails with RebalanceInProgress and requests a rejoin.
    REBALANCING = "rebalancing"
    #: An answer about a Generation the member already left (§2.5): its generation-dependent
    #: error changes nothing about the current one.
    STALE = "stale"
    #: Counts as success; nothing changes.
    IGNORE = "ignore"
    #: Not authorized to use the group: fatal at the next poll.
    UNAUTHORIZED = "group authorization failed"
    #: Fatal, surfaced from the next ``poll()`` (§5.4).
    FATAL = "fatal"
    #: This request fails (offsets); the membership is unaffected.
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Row:
    """One table entry: the reaction, and (for a generation-dependent reaction) the one to
    use instead for an answer to a request sent under an older Generation (§2.5)."""

    reaction: Reaction
    stale: Reaction | None = None


_E = ErrorCode
_R = Reaction

#: api -> error code -> row. Codes without a row take :data:`DEFAULTS`.
REACTIONS: Mapping[Api, Mapping[int, Row]] = {
    # §4.1
    Api.FIND_COORDINATOR: {
        _E.NONE: Row(_R.OK),
        # Exponential backoff, then a new lookup.
        _E.COORDINATOR_NOT_AVAILABLE: Row(_R.RETRY_BACKOFF),
        _E.NOT_COORDINATOR: Row(_R.RETRY_BACKOFF),
        _E.COORDINATOR_LOAD_IN_PROGRESS: Row(_R.RETRY_BACKOFF),
        _E.GROUP_AUTHORIZATION_FAILED: Row(_R.UNAUTHORIZED),
    },
    # §4.2
    Api.JOIN_GROUP: {
        _E.NONE: Row(_R.OK),
        _E.MEMBER_ID_REQUIRED: Row(_R.ADOPT_MEMBER_ID),
        # T4. A stale answer ends the chain without touching the Generation; the reset that
        # made it stale already requested the rejoin.
        _E.UNKNOWN_MEMBER_ID: Row(_R.RESET_GENERATION, stale=_R.STALE),
        _E.REBALANCE_IN_PROGRESS: Row(_R.RETRY_NOW),
        _E.COORDINATOR_LOAD_IN_PROGRESS: Row(_R.RETRY_BACKOFF),
        _E.COORDINATOR_NOT_AVAILABLE: Row(_R.COORDINATOR_MOVED),
        _E.NOT_COORDINATOR: Row(_R.COORDINATOR_MOVED),
        # Fatal whatever the Generation (§4.2).
        _E.FENCED_INSTANCE_ID: Row(_R.FATAL),
        _E.INCONSISTENT_GROUP_PROTOCOL: Row(_R.FATAL),
        _E.INVALID_SESSION_TIMEOUT: Row(_R.FATAL),
        _E.INVALID_GROUP_ID: Row(_R.FATAL),
        _E.GROUP_AUTHORIZATION_FAILED: Row(_R.UNAUTHORIZED),
        _E.GROUP_MAX_SIZE_REACHED: Row(_R.FATAL),
        # Usually group_instance_id against a broker older than 2.3.
        _E.UNSUPPORTED_VERSION: Row(_R.FATAL),
    },
    # §4.3
    Api.SYNC_GROUP: {
        _E.NONE: Row(_R.OK),
        _E.REBALANCE_IN_PROGRESS: Row(_R.RETRY_NOW),
        # T8. A stale answer requests a rejoin and restarts the chain at once.
        _E.UNKNOWN_MEMBER_ID: Row(_R.RESET_GENERATION, stale=_R.STALE),
        _E.ILLEGAL_GENERATION: Row(_R.RESET_GENERATION_KEEP_ID, stale=_R.STALE),
        _E.COORDINATOR_NOT_AVAILABLE: Row(_R.COORDINATOR_MOVED),
        _E.NOT_COORDINATOR: Row(_R.COORDINATOR_MOVED),
        # DEVIATION (spec §4.3, recommended): Java treats this as fatal; a freshly
        # failed-over coordinator is worth a retry instead (T5: back off, rejoin).
        _E.COORDINATOR_LOAD_IN_PROGRESS: Row(_R.RETRY_BACKOFF),
        _E.FENCED_INSTANCE_ID: Row(_R.FATAL),
        _E.GROUP_AUTHORIZATION_FAILED: Row(_R.UNAUTHORIZED),
    },
    # §4.4, §5.3
    Api.HEARTBEAT: {
        _E.NONE: Row(_R.OK),
        # A success for the session either way; only a current STABLE member rejoins.
        _E.REBALANCE_IN_PROGRESS: Row(_R.REBALANCING, stale=_R.IGNORE),
        # T10; a stale answer is ignored and counts as a success (§2.5).
        _E.ILLEGAL_GENERATION: Row(_R.RESET_GENERATION_KEEP_ID, stale=_R.STALE),
        _E.UNKNOWN_MEMBER_ID: Row(_R.RESET_GENERATION, stale=_R.STALE),
        _E.FENCED_INSTANCE_ID: Row(_R.FENCED, stale=_R.STALE),
        _E.COORDINATOR_NOT_AVAILABLE: Row(_R.COORDINATOR_MOVED),
        _E.NOT_COORDINATOR: Row(_R.COORDINATOR_MOVED),
        # DEVIATION (spec §4.4, recommended): Java counts this as an ordinary heartbeat
        # failure and retries; kgroup makes it fatal at the next poll.
        _E.GROUP_AUTHORIZATION_FAILED: Row(_R.UNAUTHORIZED),
        # Like any other error: a heartbeat failure, backoff and retry.
        _E.COORDINATOR_LOAD_IN_PROGRESS: Row(_R.RETRY_BACKOFF),
    },
    # §4.6, per partition. TOPIC_AUTHORIZATION_FAILED is collected across all partitions
    # before this table is consulted (only GROUP_AUTHORIZATION_FAILED takes precedence).
    Api.OFFSET_COMMIT: {
        _E.NONE: Row(_R.OK),
        _E.GROUP_AUTHORIZATION_FAILED: Row(_R.UNAUTHORIZED),
        _E.COORDINATOR_LOAD_IN_PROGRESS: Row(_R.RETRY_BACKOFF),
        _E.UNKNOWN_TOPIC_OR_PARTITION: Row(_R.RETRY_BACKOFF),
        # v10, by topic id (consumer protocol only, which words its own error): the topic
        # was deleted since the member was given it. Not retried (Java retries until its
        # timeout; deviations.md row 25).
        _E.UNKNOWN_TOPIC_ID: Row(_R.FAIL),
        _E.COORDINATOR_NOT_AVAILABLE: Row(_R.COORDINATOR_MOVED),
        _E.NOT_COORDINATOR: Row(_R.COORDINATOR_MOVED),
        _E.REQUEST_TIMED_OUT: Row(_R.COORDINATOR_MOVED),
        # Stale: RebalanceInProgress while rejoining, else CommitFailed; nothing reset.
        _E.FENCED_INSTANCE_ID: Row(_R.FENCED, stale=_R.STALE),
        # The Generation is not reset (§4.6).
        _E.REBALANCE_IN_PROGRESS: Row(_R.REBALANCING),
        # T11; stale as for FENCED_INSTANCE_ID (F37).
        _E.UNKNOWN_MEMBER_ID: Row(_R.RESET_GENERATION, stale=_R.STALE),
        _E.ILLEGAL_GENERATION: Row(_R.RESET_GENERATION_KEEP_ID, stale=_R.STALE),
        _E.OFFSET_METADATA_TOO_LARGE: Row(_R.FAIL),
        _E.INVALID_COMMIT_OFFSET_SIZE: Row(_R.FAIL),
    },
    # §4.7, the group-level error.
    Api.OFFSET_FETCH: {
        _E.NONE: Row(_R.OK),
        _E.COORDINATOR_NOT_AVAILABLE: Row(_R.COORDINATOR_MOVED),
        _E.NOT_COORDINATOR: Row(_R.COORDINATOR_MOVED),
        _E.GROUP_AUTHORIZATION_FAILED: Row(_R.UNAUTHORIZED),
        _E.COORDINATOR_LOAD_IN_PROGRESS: Row(_R.RETRY_BACKOFF),
    },
    # §4.7, a partition's error. TOPIC_AUTHORIZATION_FAILED is collected across all
    # partitions before this table is consulted.
    Api.OFFSET_FETCH_PARTITION: {
        _E.NONE: Row(_R.OK),
        _E.UNSTABLE_OFFSET_COMMIT: Row(_R.RETRY_BACKOFF),
        _E.UNKNOWN_TOPIC_OR_PARTITION: Row(_R.FAIL),
        # v10, by topic id: as UNKNOWN_TOPIC_OR_PARTITION (the topic was deleted).
        _E.UNKNOWN_TOPIC_ID: Row(_R.FAIL),
    },
}

#: api -> the reaction to a code without a row ("any other error").
DEFAULTS: Mapping[Api, Reaction] = {
    Api.FIND_COORDINATOR: _R.FATAL,
    Api.JOIN_GROUP: _R.FATAL,
    Api.SYNC_GROUP: _R.FATAL,
    Api.HEARTBEAT: _R.RETRY_BACKOFF,
    Api.OFFSET_COMMIT: _R.FAIL,
    Api.OFFSET_FETCH: _R.FAIL,
    Api.OFFSET_FETCH_PARTITION: _R.FAIL,
}


def reaction_for(api: Api, code: int, *, sent: Generation, current: Generation) -> Reaction:
    """The reaction to ``code`` answered to ``api`` for a request sent under ``sent`` while
    the member is now in ``current``: the row's stale reaction when the two differ (full
    triple equality, §2.5) and the row has one, else its reaction; the API's default for
    a code without a row."""
    row = REACTIONS[api].get(code)
    if row is None:
        return DEFAULTS[api]
    if row.stale is not None and sent != current:
        return row.stale
    return row.reaction


def unhandled(api: Api, code: int, reaction: Reaction) -> NoReturn:
    """A handler got a reaction it does not carry out: a bug in the table or the handler."""
    raise LocalProtocolError(
        f"{api.value} handler has no rule for reaction {reaction.name} "
        f"(error {ErrorCode.describe(code)})"
    )
