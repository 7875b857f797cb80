"""Malformed answers from the broker: a clear error, a reconnect, and nothing lost.

A :class:`~._fake_broker.FakeBroker` in the test's own event loop serves one kgroup member and
spoils chosen answers: truncated frames (then close, or then silence), a wrong correlation id,
random bytes of the right length, absurd and negative size prefixes, negative (or, in flexible
versions, far too large) lengths, and well-formed answers carrying an unknown error code.

For every one of them, on the Heartbeat of a stable member and on FindCoordinator, JoinGroup
and SyncGroup during a join, the member must:

(a) say what happened: a named structlog event (``connection.protocol_error`` at error level
    for broken framing or schema, ``connection.unknown_error_code`` for an unknown code, and
    the member's own ``member.heartbeat_failed`` / ``member.coordinator_lost`` /
    ``member.coordinator_lookup_failed``) whose text names the request and version, the
    broker's address and the problem; a fatal answer is raised from ``poll()`` as a typed
    ``kgroup`` error. Never a bare ``struct.error``, ``IndexError`` or ``ValueError``, never
    aiokafka's "Unexpected exception in AIOKafkaConnection", never a hang;
(b) drop the connection the bad answer came on and carry on over a new one (an absurd or
    negative size fails the connection at once, long before the request timeout);
(c) lose nothing: after the fault it is STABLE again and holds every partition. A heartbeat
    fault shorter than the session costs no callback at all: the spec (§4.4 "Transport
    failure", §5.3 "Coordinator change") marks the coordinator unknown and backs off, and
    neither resets the Generation nor rejoins, so the member keeps its generation, its
    partitions and its lease; no JoinGroup is sent;
(d) close cleanly: ``close()`` leaves no task, no open connection and no ResourceWarning.

An unknown error code is valid protocol (brokers add codes), so it is not a framing fault:
the connection stays up. On Heartbeat the spec's "anything else" applies (back off, retry:
nothing lost); on FindCoordinator, JoinGroup and SyncGroup the spec makes it fatal, so poll()
raises ``UnexpectedBrokerError`` once and the next poll() joins.

The waits are event-driven (conditions re-checked on every broker or member change, with a
deadline); the whole file runs in well under a minute.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import warnings
from collections.abc import AsyncIterator, Iterable, Mapping, MutableMapping
from typing import Any

import pytest
import structlog

from kgroup import GroupConfig, TopicPartition, UnexpectedBrokerError
from kgroup._core._state import MemberState
from kgroup.testing import MemberGroup, MemberRunner
from tests.integration._fake_broker import (
    API_VERSIONS,
    CLASSIC_VERSIONS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    METADATA,
    SYNC_GROUP,
    UNKNOWN_ERROR_CODE,
    AppliedFault,
    FakeBroker,
    Fault,
    ReceivedRequest,
)
from tests.integration.conftest import group_config

pytestmark = pytest.mark.timeout(60)

TOPIC = "orders"
PARTITIONS = 3
ALL = frozenset(TopicPartition(TOPIC, p) for p in range(PARTITIONS))
REQUEST_TIMEOUT_MS = 1500
SESSION_TIMEOUT_MS = 6000
MAX_POLL_INTERVAL_MS = 2000
JOIN_TIMEOUT_MS = MAX_POLL_INTERVAL_MS + 5000

FRAMING = (
    Fault.TRUNCATE_CLOSE,
    Fault.TRUNCATE_HANG,
    Fault.WRONG_CORRELATION,
    Fault.GARBAGE,
    Fault.ABSURD_SIZE,
    Fault.NEGATIVE_SIZE,
)
#: Faults that break the protocol (logged as connection.protocol_error); the two truncations
#: look like a broken or silent connection instead.
VIOLATIONS = frozenset(FRAMING) - {Fault.TRUNCATE_CLOSE, Fault.TRUNCATE_HANG}
#: What the error text says, per fault (GARBAGE: whatever the random bytes break first).
SAYS = {
    Fault.TRUNCATE_CLOSE: "the broker closed the connection after",
    Fault.TRUNCATE_HANG: "never completed",
    Fault.WRONG_CORRELATION: "has correlation id",
    Fault.GARBAGE: "",
    Fault.ABSURD_SIZE: "announced a frame of 2147483647 bytes",
    Fault.NEGATIVE_SIZE: "announced a frame of -1 bytes",
}
#: Faults that must fail the connection at once: tested with a 10 s request timeout.
IMMEDIATE = frozenset({Fault.ABSURD_SIZE, Fault.NEGATIVE_SIZE})
#: Text that would mean a raw exception leaked into an error message.
RAW = ("struct.error", "IndexError", "KeyError", "readexactly", "Traceback", "KafkaConnectionError")

API_LABELS = {
    HEARTBEAT: "Heartbeat v4",
    FIND_COORDINATOR: "FindCoordinator v6",
    JOIN_GROUP: "JoinGroup v9",
    SYNC_GROUP: "SyncGroup v5",
    LEAVE_GROUP: "LeaveGroup v5",
    API_VERSIONS: "ApiVersions v0",
    METADATA: "Metadata v5",
}
CLASSIC_LABELS = {
    FIND_COORDINATOR: "FindCoordinator v2",
    JOIN_GROUP: "JoinGroup v5",
    SYNC_GROUP: "SyncGroup v3",
}
API_IDS = {HEARTBEAT: "heartbeat", FIND_COORDINATOR: "find", JOIN_GROUP: "join", SYNC_GROUP: "sync"}


class Scene:
    """One fake broker, one MemberGroup, every structlog event and core event recorded."""

    def __init__(
        self, broker: FakeBroker, group: MemberGroup, logs: list[MutableMapping[str, Any]]
    ) -> None:
        self.broker = broker
        self.group = group
        self.logs = logs
        self.core_events: list[tuple[float, str, Mapping[str, Any]]] = []

    # -- members ---------------------------------------------------------------------------

    def config(self, **overrides: Any) -> GroupConfig:
        fields: dict[str, Any] = {
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "heartbeat_interval_ms": 200,
            "request_timeout_ms": REQUEST_TIMEOUT_MS,
            "max_poll_interval_ms": MAX_POLL_INTERVAL_MS,
            "retry_backoff_ms": 50,
            "retry_backoff_max_ms": 200,
            "close_timeout_ms": 3000,
        }
        fields.update(overrides)
        return group_config(self.broker, "g-malformed", TOPIC, **fields)

    async def start(self, **overrides: Any) -> MemberRunner:
        runner = await self.group.start(self.config(**overrides))
        loop = asyncio.get_running_loop()
        runner.member.add_event_hook(
            lambda event, fields: self.core_events.append((loop.time(), event, fields))
        )
        return runner

    async def stable(self, timeout: float = 20) -> None:
        await self.group.wait_stable(TOPIC, PARTITIONS, timeout=timeout)

    async def stable_member(self, **overrides: Any) -> MemberRunner:
        runner = await self.start(**overrides)
        await self.stable()
        # A heartbeat answered in the stable generation, so the lease rests on one.
        await self.broker.wait_for(
            lambda: self.requests(HEARTBEAT), timeout=5, what="a first heartbeat"
        )
        return runner

    # -- what the broker saw -----------------------------------------------------------------

    def requests(self, api_key: int, after: float = 0.0) -> list[ReceivedRequest]:
        return [r for r in self.broker.requests_for(api_key) if r.at > after]

    async def fault_applied(self, api_key: int) -> AppliedFault:
        await self.broker.wait_for(
            lambda: any(a.api_key == api_key for a in self.broker.applied),
            timeout=10,
            what=f"a spoiled answer to API {api_key}",
        )
        return next(a for a in self.broker.applied if a.api_key == api_key)

    async def retried_on_new_connection(self, api_key: int, fault: AppliedFault) -> None:
        """(b): the connection the fault went to is closed, and the same API was sent again
        (and answered) over another one."""
        broker = self.broker
        await broker.wait_for(
            lambda: not broker.connections[fault.connection - 1].open,
            # A silent JoinGroup is given up on after the rebalance timeout + 5 s (§3.1).
            timeout=JOIN_TIMEOUT_MS / 1000 + 3,
            what=f"the member dropping connection {fault.connection}",
        )
        await broker.wait_for(
            lambda: any(r.connection != fault.connection for r in self.requests(api_key, fault.at)),
            timeout=15,
            what=f"API {api_key} retried on a new connection",
        )

    # -- what the member said ----------------------------------------------------------------

    def texts(self, event: str | None = None) -> list[str]:
        """Every captured log entry (of ``event``) as one line of text."""
        return [
            " ".join(f"{k}={v}" for k, v in entry.items())
            for entry in self.logs
            if event is None or entry["event"] == event
        ]

    def said(self, *needles: str, event: str | None = None) -> list[str]:
        return [t for t in self.texts(event) if all(n in t for n in needles)]

    def assert_clear_error(self, api_label: str, fault: Fault) -> None:
        """(a) for a framing fault: an event naming the request, the broker and the fault;
        a protocol violation also at error level as connection.protocol_error."""
        where = self.broker.bootstrap
        assert self.said(api_label, where, SAYS[fault]), (api_label, fault, self.texts())
        protocol_errors = self.said(api_label, where, event="connection.protocol_error")
        if fault in VIOLATIONS:
            assert protocol_errors, self.texts()
            assert all(
                e["log_level"] == "error" for e in self.logs if "protocol_error" in e["event"]
            )
        else:
            assert not protocol_errors, protocol_errors
        self.assert_no_raw_errors()

    def assert_no_raw_errors(self) -> None:
        for text in self.texts():
            assert not any(raw in text for raw in RAW), text

    # -- the end -----------------------------------------------------------------------------

    async def close_and_check(self) -> None:
        """(d): close every member; then no task is left, the broker sees every connection
        closed by the client, and collecting garbage raises no ResourceWarning."""
        await self.group.aclose()
        self.group.ownership.check()
        current = asyncio.current_task()
        broker = self.broker

        def leftovers() -> list[str]:
            return [t.get_name() for t in asyncio.all_tasks() if t is not current]

        try:
            await broker.wait_for(
                lambda: not broker.open_connections() and not leftovers(),
                timeout=5,
                what="every connection and task gone",
            )
        except TimeoutError as exc:
            raise AssertionError(
                f"close() left tasks {leftovers()} and connections {broker.open_connections()}"
            ) from exc
        assert all(c.closed_by in ("client", "broker") for c in broker.connections)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gc.collect()
        assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


@pytest.fixture
async def scene(caplog: pytest.LogCaptureFixture) -> AsyncIterator[Scene]:
    caplog.set_level(logging.WARNING, logger="aiokafka")
    with structlog.testing.capture_logs() as logs:
        async with FakeBroker(topics={TOPIC: PARTITIONS}) as broker:
            group = MemberGroup()
            try:
                yield Scene(broker, group, logs)
            finally:
                await group.aclose()
    # aiokafka's reader never saw an exception it had to log.
    assert not [r for r in caplog.records if r.name.startswith("aiokafka")], caplog.text


def callbacks(runner: MemberRunner, since: int = 0) -> list[tuple[str, frozenset[TopicPartition]]]:
    return [(e.callback, e.partitions) for e in runner.events[since:]]


def ids(values: Iterable[Any]) -> list[str]:
    return [getattr(v, "value", str(v)) for v in values]


# --- (1) the Heartbeat of a stable member ---------------------------------------------------


async def _heartbeat_fault_costs_nothing(
    scene: Scene, runner: MemberRunner, expect_reconnect: bool
) -> AppliedFault:
    """The caller injected a Heartbeat fault: wait until it was applied, then check (b)
    (when ``expect_reconnect``) and (c)."""
    member = runner.member
    generation, seen = member.generation, len(runner.events)
    joins = len(scene.requests(JOIN_GROUP))
    fault = await scene.fault_applied(HEARTBEAT)
    if expect_reconnect:
        await scene.retried_on_new_connection(HEARTBEAT, fault)

    # A heartbeat answered NONE after the fault, in the same generation.
    def answered_after_fault() -> bool:
        core = member._core
        assert core is not None
        return (core.timers.last_heartbeat_received or 0) > fault.at * 1000

    await scene.group.wait_until(
        answered_after_fault, timeout=10, what="a heartbeat answered after the fault"
    )
    assert member.state is MemberState.STABLE
    assert member.generation == generation
    assert member.assignment == ALL
    assert callbacks(runner, seen) == []  # no revoke, no lost
    assert len(scene.requests(JOIN_GROUP)) == joins  # no rejoin
    assert not runner.errors
    assert not scene.broker.expired
    assert not [e for _, e, _ in scene.core_events if e == "member.lease_expired"]
    valid_until = member.valid_until
    assert valid_until is not None and valid_until > asyncio.get_running_loop().time()
    return fault


@pytest.mark.parametrize("fault", FRAMING, ids=ids(FRAMING))
async def test_heartbeat_answer_broken_once(scene: Scene, fault: Fault) -> None:
    timeout_ms = 10_000 if fault in IMMEDIATE else REQUEST_TIMEOUT_MS
    runner = await scene.stable_member(request_timeout_ms=timeout_ms)
    scene.broker.inject(HEARTBEAT, fault)
    applied = await _heartbeat_fault_costs_nothing(scene, runner, expect_reconnect=True)
    scene.assert_clear_error("Heartbeat v4", fault)
    failed = [t for t, e, _ in scene.core_events if e == "member.heartbeat_failed"]
    assert failed, "no member.heartbeat_failed event"
    if fault in IMMEDIATE:
        # The connection failed on the size prefix, not after the 10 s request timeout.
        assert failed[0] - applied.at < 0.5, failed[0] - applied.at
    await scene.close_and_check()


async def test_heartbeat_unknown_error_code_is_retried_on_the_same_connection(
    scene: Scene,
) -> None:
    runner = await scene.stable_member()
    scene.broker.inject(HEARTBEAT, Fault.UNKNOWN_ERROR)
    fault = await _heartbeat_fault_costs_nothing(scene, runner, expect_reconnect=False)
    where = scene.broker.bootstrap
    assert scene.said(
        "Heartbeat v4", where, str(UNKNOWN_ERROR_CODE), event="connection.unknown_error_code"
    )
    assert scene.said(f"error code {UNKNOWN_ERROR_CODE}", event="member.heartbeat_failed")
    # A well-formed answer: the connection is kept (spec §4.4, "anything else": back off).
    after = scene.requests(HEARTBEAT, fault.at)
    assert after and all(r.connection == fault.connection for r in after)
    assert scene.broker.connections[fault.connection - 1].open
    await scene.close_and_check()


async def test_heartbeat_answers_broken_in_a_row_for_less_than_the_session(scene: Scene) -> None:
    """Every Heartbeat answer is garbage "from now on", for about a second (a sixth of the
    session), then the broker heals: several reconnects, still nothing lost."""
    runner = await scene.stable_member()
    scene.broker.inject(HEARTBEAT, Fault.GARBAGE, count=None)
    await scene.broker.wait_for(
        lambda: len(scene.broker.applied) >= 3, timeout=10, what="three spoiled answers"
    )
    scene.broker.clear()
    broken = {a.connection for a in scene.broker.applied}
    assert len(broken) >= 3  # each on its own connection: each one was dropped
    await _heartbeat_fault_costs_nothing(scene, runner, expect_reconnect=True)
    await scene.close_and_check()


async def test_heartbeat_faults_of_every_kind_in_a_row(scene: Scene) -> None:
    """The next five answers, five different faults: one reconnect each, nothing lost."""
    runner = await scene.stable_member()
    kinds = (
        Fault.WRONG_CORRELATION,
        Fault.NEGATIVE_SIZE,
        Fault.GARBAGE,
        Fault.TRUNCATE_CLOSE,
        Fault.ABSURD_SIZE,
    )
    for kind in kinds:
        scene.broker.inject(HEARTBEAT, kind)
    await scene.broker.wait_for(
        lambda: len(scene.broker.applied) == len(kinds), timeout=15, what="five spoiled answers"
    )
    assert [a.fault for a in scene.broker.applied] == list(kinds)
    assert len({a.connection for a in scene.broker.applied}) == len(kinds)
    await _heartbeat_fault_costs_nothing(scene, runner, expect_reconnect=True)
    await scene.close_and_check()


# --- (2) FindCoordinator, JoinGroup and SyncGroup during a join -----------------------------

JOIN_PATH = (FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP)


def _inject_on_join(scene: Scene, api_key: int, fault: Fault, **kwargs: Any) -> None:
    # JoinGroup: spoil the real join answer, not the MEMBER_ID_REQUIRED one before it.
    scene.broker.inject(api_key, fault, skip=1 if api_key == JOIN_GROUP else 0, **kwargs)


async def _joined_once(scene: Scene, runner: MemberRunner) -> None:
    await scene.stable()
    assert runner.member.assignment == ALL
    assigned = [p for cb, p in callbacks(runner) if cb != "on_partitions_revoked"]
    assert assigned == [ALL]  # assigned once, never lost
    assert all(not p for cb, p in callbacks(runner) if cb == "on_partitions_revoked")


@pytest.mark.parametrize("fault", FRAMING, ids=ids(FRAMING))
@pytest.mark.parametrize("api_key", JOIN_PATH, ids=[API_IDS[a] for a in JOIN_PATH])
async def test_join_answer_broken_once(scene: Scene, api_key: int, fault: Fault) -> None:
    _inject_on_join(scene, api_key, fault)
    timeout_ms = 10_000 if fault in IMMEDIATE else REQUEST_TIMEOUT_MS
    runner = await scene.start(request_timeout_ms=timeout_ms)
    applied = await scene.fault_applied(api_key)
    await scene.retried_on_new_connection(api_key, applied)
    await _joined_once(scene, runner)
    assert not runner.errors  # retriable: never raised from poll()
    scene.assert_clear_error(API_LABELS[api_key], fault)
    if fault in IMMEDIATE:
        closed_at = scene.broker.connections[applied.connection - 1].closed_at
        assert closed_at is not None and closed_at - applied.at < 0.5
    await scene.close_and_check()


@pytest.mark.parametrize("api_key", JOIN_PATH, ids=[API_IDS[a] for a in JOIN_PATH])
async def test_join_answer_with_an_impossible_length(scene: Scene, api_key: int) -> None:
    """Flexible versions: a compact length of 2**32-2 (JoinGroup ``members``,
    FindCoordinator ``coordinators``, SyncGroup ``protocol_type``)."""
    _inject_on_join(scene, api_key, Fault.NEGATIVE_LENGTH)
    runner = await scene.start()
    applied = await scene.fault_applied(api_key)
    await scene.retried_on_new_connection(api_key, applied)
    await _joined_once(scene, runner)
    assert not runner.errors
    assert scene.said(
        API_LABELS[api_key], scene.broker.bootstrap, "4294967294", "cannot be decoded"
    )
    scene.assert_no_raw_errors()
    await scene.close_and_check()


@pytest.mark.parametrize(
    ("api_key", "says"),
    [
        (FIND_COORDINATOR, "error_message: invalid string length -2"),
        (JOIN_GROUP, "members: invalid array length -2"),
        (SYNC_GROUP, "assignment: invalid bytes length -2"),
    ],
    ids=["find", "join", "sync"],
)
async def test_classic_answer_with_a_negative_length(
    caplog: pytest.LogCaptureFixture, api_key: int, says: str
) -> None:
    """Classic versions: a length of -2 is an error, never read as null (aiokafka read it as
    an empty array or an empty assignment, so the leader assigned nothing, or poll() raised
    AssignmentError for a transport fault)."""
    with structlog.testing.capture_logs() as logs:
        async with FakeBroker(topics={TOPIC: PARTITIONS}, versions=CLASSIC_VERSIONS) as broker:
            scene = Scene(broker, MemberGroup(), logs)
            try:
                _inject_on_join(scene, api_key, Fault.NEGATIVE_LENGTH)
                runner = await scene.start()
                applied = await scene.fault_applied(api_key)
                await scene.retried_on_new_connection(api_key, applied)
                await _joined_once(scene, runner)
                assert not runner.errors
                assert scene.said(
                    CLASSIC_LABELS[api_key],
                    broker.bootstrap,
                    says,
                    event="connection.protocol_error",
                )
                scene.assert_no_raw_errors()
                await scene.close_and_check()
            finally:
                await scene.group.aclose()


@pytest.mark.parametrize("api_key", JOIN_PATH, ids=[API_IDS[a] for a in JOIN_PATH])
async def test_join_answer_with_an_unknown_error_code(scene: Scene, api_key: int) -> None:
    """Well-formed, so the connection stays; the spec makes an unexpected error fatal on
    these three APIs: poll() raises UnexpectedBrokerError once, the next poll() joins."""
    _inject_on_join(scene, api_key, Fault.UNKNOWN_ERROR)
    runner = await scene.start()
    applied = await scene.fault_applied(api_key)
    await _joined_once(scene, runner)
    assert len(runner.errors) == 1
    error = runner.errors[0]
    assert isinstance(error, UnexpectedBrokerError)
    name = API_LABELS[api_key].split()[0]
    assert error.api == name and error.error_code == UNKNOWN_ERROR_CODE
    assert f"{name} failed with error code {UNKNOWN_ERROR_CODE}" in str(error)
    assert scene.said(
        API_LABELS[api_key], scene.broker.bootstrap, event="connection.unknown_error_code"
    )
    retried = scene.requests(api_key, applied.at)
    assert retried and all(r.connection == applied.connection for r in retried)
    scene.assert_no_raw_errors()
    await scene.close_and_check()


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"port": 70000}, "the coordinator's port 70000 is not a TCP port"),
        ({"port": -1}, "the coordinator's port -1 is not a TCP port"),
        ({"host": ""}, "the coordinator's host is empty"),
    ],
    ids=["port-70000", "port-negative", "host-empty"],
)
async def test_find_coordinator_answer_with_an_unusable_address(
    scene: Scene, fields: dict[str, Any], says: str
) -> None:
    """Well-formed bytes, impossible content: a clear error and a new lookup, where the
    socket layer's OverflowError used to escape every handler (and crash the heartbeat task
    or the join chain)."""
    scene.broker.inject(FIND_COORDINATOR, Fault.FIELDS, fields=fields)
    runner = await scene.start()
    applied = await scene.fault_applied(FIND_COORDINATOR)
    await scene.retried_on_new_connection(FIND_COORDINATOR, applied)
    await _joined_once(scene, runner)
    assert not runner.errors
    assert scene.said(
        "FindCoordinator v6", scene.broker.bootstrap, says, event="connection.protocol_error"
    )
    assert scene.said(says, event="member.coordinator_lookup_failed")
    scene.assert_no_raw_errors()
    await scene.close_and_check()


@pytest.mark.parametrize(
    ("api_key", "fault"),
    [(JOIN_GROUP, Fault.GARBAGE), (SYNC_GROUP, Fault.WRONG_CORRELATION)],
    ids=["join-garbage", "sync-correlation"],
)
async def test_rejoin_answer_broken_keeps_the_assignment(
    scene: Scene, api_key: int, fault: Fault
) -> None:
    """A stable member told to rebalance (REBALANCE_IN_PROGRESS on a heartbeat) meets a
    broken answer while rejoining: it retries over a new connection and ends with the same
    partitions. Eager rebalancing revokes them before the JoinGroup, so one revoke and one
    assign are the correct callbacks, never a lost."""
    runner = await scene.stable_member()
    seen, generation = len(runner.events), runner.member.generation.generation_id
    scene.broker.inject(api_key, fault)
    scene.broker.inject(HEARTBEAT, Fault.ERROR_CODE, error_code=27)
    applied = await scene.fault_applied(api_key)
    await scene.retried_on_new_connection(api_key, applied)
    await scene.group.wait_until(
        lambda: runner.stable and runner.member.generation.generation_id > generation,
        timeout=15,
        what="stable in a new generation",
    )
    assert runner.member.assignment == ALL
    assert callbacks(runner, seen) == [
        ("on_partitions_revoked", ALL),
        ("on_partitions_assigned", ALL),
    ]
    assert not runner.errors
    scene.assert_clear_error(API_LABELS[api_key], fault)
    await scene.close_and_check()


# --- (3) the other answers a member reads -----------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        (Fault.ABSURD_SIZE, "announced a frame of 2147483647 bytes"),
        (Fault.GARBAGE, "ApiVersions v0 response from"),
        (Fault.NEGATIVE_LENGTH, "has no API versions"),
        (Fault.UNKNOWN_ERROR, f"has an error: error code {UNKNOWN_ERROR_CODE}"),
    ],
    ids=["absurd_size", "garbage", "negative_length", "unknown_error"],
)
async def test_api_versions_answer_broken_at_connect(scene: Scene, fault: Fault, says: str) -> None:
    """The ApiVersions exchange of a new connection: "cannot connect", then a new one."""
    scene.broker.inject(API_VERSIONS, fault)
    runner = await scene.start()
    applied = await scene.fault_applied(API_VERSIONS)
    await scene.retried_on_new_connection(API_VERSIONS, applied)
    await _joined_once(scene, runner)
    assert not runner.errors
    where = scene.broker.bootstrap
    assert scene.said("cannot connect to", where, says, event="member.coordinator_lookup_failed")
    assert scene.said("ApiVersions v0", where, event="connection.protocol_error")
    scene.assert_no_raw_errors()
    await scene.close_and_check()


async def test_every_find_coordinator_retry_follows_a_broker_refresh(scene: Scene) -> None:
    """Spec §4.1 and §12 scenario 5: the first FindCoordinator, and each one after an error
    answer (COORDINATOR_NOT_AVAILABLE twice here), follows a Metadata request that refreshes
    the brokers the member knows."""
    scene.broker.inject(FIND_COORDINATOR, Fault.ERROR_CODE, error_code=15, count=2)
    runner = await scene.start()
    await _joined_once(scene, runner)
    assert not runner.errors
    lookups = [
        r.api_key for r in scene.broker.requests if r.api_key in (METADATA, FIND_COORDINATOR)
    ]
    assert lookups[:6] == [METADATA, FIND_COORDINATOR] * 3, lookups
    await scene.close_and_check()


@pytest.mark.parametrize(
    "fault", [Fault.GARBAGE, Fault.TRUNCATE_CLOSE], ids=ids([Fault.GARBAGE, Fault.TRUNCATE_CLOSE])
)
@pytest.mark.parametrize("skip", [1, 0], ids=["leader", "broker_refresh"])
async def test_leader_metadata_answer_broken(scene: Scene, fault: Fault, skip: int) -> None:
    """A Metadata answer (aiokafka's own structs) broken: the leader's lookup for its
    assignment (the join is retried), or the refresh of the known brokers before the first
    FindCoordinator (the lookup is retried)."""
    scene.broker.inject(METADATA, fault, skip=skip)
    runner = await scene.start()
    applied = await scene.fault_applied(METADATA)
    await scene.retried_on_new_connection(METADATA, applied)
    await _joined_once(scene, runner)
    assert not runner.errors
    assert scene.said("Metadata v5", scene.broker.bootstrap)
    scene.assert_no_raw_errors()
    await scene.close_and_check()


@pytest.mark.parametrize(
    "fault", [Fault.GARBAGE, Fault.TRUNCATE_HANG], ids=ids([Fault.GARBAGE, Fault.TRUNCATE_HANG])
)
async def test_leave_group_answer_broken_on_close(scene: Scene, fault: Fault) -> None:
    """close() sends LeaveGroup once, best effort: a broken answer is logged, and close()
    still returns within its budget and leaves nothing behind."""
    await scene.stable_member()
    scene.broker.inject(LEAVE_GROUP, fault)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await scene.close_and_check()
    assert loop.time() - started < REQUEST_TIMEOUT_MS / 1000 + 2
    assert [a.fault for a in scene.broker.applied] == [fault]
    # Also for a hung answer: the LeaveGroup gets what is left of close()'s budget,
    # min(close_timeout_ms, request_timeout_ms), so its failure is named before that runs out.
    assert scene.said("LeaveGroup v5", scene.broker.bootstrap, event="member.leave_group_failed")
    assert not scene.said(event="member.close_timed_out")
    scene.assert_no_raw_errors()
