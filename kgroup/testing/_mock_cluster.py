"""librdkafka's mock Kafka cluster, driven through ctypes, for fault-injection tests.

The ``confluent-kafka`` wheel bundles librdkafka, and librdkafka contains the mock cluster
its own test suite uses. Its C API (``rdkafka_mock.h``) is exported, so this module loads the
bundled library with :mod:`ctypes` and wraps the controls tests need: create topics, move a
group's coordinator, push error codes (optionally with a delay) for the next requests of an
API, take brokers down and up, add latency, cap API versions, and record which requests a
client sent.

The cluster runs on librdkafka threads inside this process and listens on loopback TCP
ports, so any client (kgroup, aiokafka) connects to :attr:`MockCluster.bootstrap` like to a
real cluster. Every signature below is declared after ``rdkafka_mock.h`` (librdkafka 2.16).

It is not Apache Kafka: it never returns MEMBER_ID_REQUIRED, a JoinGroup repeated with an
existing member id starts another rebalance, and (unless lowered, which
:class:`MockCluster` does by default) the first rebalance of a group waits 3 s.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ._ports import BrokerUnavailable

__all__ = ["MockCluster", "MockClusterError", "MockRequest", "find_librdkafka"]

_RD_KAFKA_PRODUCER = 0
_RD_KAFKA_CONF_OK = 0
_ERRSTR_SIZE = 512

_c_ptr = ctypes.c_void_p


#: API key -> the highest version the mock's handler parses correctly (JoinGroup, SyncGroup,
#: LeaveGroup); see MockCluster.__init__.
_PARSEABLE_GROUP_API_MAX = {11: 5, 14: 3, 13: 2}


class MockClusterError(RuntimeError):
    """A mock-cluster control call returned an error code."""

    def __init__(self, call: str, code: int, name: str) -> None:
        super().__init__(f"{call} failed: {name} ({code})")
        self.code = code
        self.name = name


@dataclass(frozen=True, slots=True)
class MockRequest:
    """One request the mock cluster received while tracking was on.

    ``api_version`` is always None: librdkafka's mock cluster records broker id, API key
    and receive time only (``rd_kafka_mock_request_t`` has no version field).
    """

    broker_id: int
    api_key: int
    timestamp_us: int
    api_version: int | None = None


def find_librdkafka() -> str:
    """Path of the librdkafka shared library bundled with confluent-kafka.

    ``$KGROUP_LIBRDKAFKA`` overrides the search. Raises :class:`BrokerUnavailable` when
    confluent-kafka is not installed or carries no library.
    """
    override = os.environ.get("KGROUP_LIBRDKAFKA")
    if override:
        return override
    try:
        import confluent_kafka
    except ImportError as exc:
        raise BrokerUnavailable(
            "mock-cluster tests need the `confluent-kafka` package: "
            "pip install 'confluent-kafka>=2.6'"
        ) from exc
    pkg = Path(confluent_kafka.__file__).resolve().parent
    patterns = [
        str(pkg.parent / "confluent_kafka.libs" / "librdkafka*.so*"),
        str(pkg / ".libs" / "librdkafka*.so*"),
        str(pkg / ".dylibs" / "librdkafka*.dylib"),
        str(pkg / "**" / "librdkafka*.so*"),
    ]
    for pattern in patterns:
        found = sorted(glob.glob(pattern, recursive=True))
        if found:
            return found[0]
    raise BrokerUnavailable(
        f"no librdkafka shared library found next to {pkg}; set KGROUP_LIBRDKAFKA to its path"
    )


_lib_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def _declare(lib: ctypes.CDLL) -> None:
    """Set argtypes/restype of every function used (from rdkafka.h / rdkafka_mock.h)."""
    i16, i32, i64, cint, size = (
        ctypes.c_int16,
        ctypes.c_int32,
        ctypes.c_int64,
        ctypes.c_int,
        ctypes.c_size_t,
    )
    cstr = ctypes.c_char_p
    sigs: dict[str, tuple[list[type], type | None]] = {
        # rdkafka.h
        "rd_kafka_conf_new": ([], _c_ptr),
        "rd_kafka_conf_set": ([_c_ptr, cstr, cstr, cstr, size], cint),
        "rd_kafka_conf_destroy": ([_c_ptr], None),
        "rd_kafka_new": ([cint, _c_ptr, cstr, size], _c_ptr),
        "rd_kafka_destroy": ([_c_ptr], None),
        "rd_kafka_err2name": ([cint], cstr),
        "rd_kafka_topic_partition_list_new": ([cint], _c_ptr),
        "rd_kafka_topic_partition_list_add": ([_c_ptr, cstr, i32], _c_ptr),
        "rd_kafka_topic_partition_list_destroy": ([_c_ptr], None),
        # rdkafka_mock.h
        "rd_kafka_mock_cluster_new": ([_c_ptr, cint], _c_ptr),
        "rd_kafka_mock_cluster_destroy": ([_c_ptr], None),
        "rd_kafka_mock_cluster_bootstraps": ([_c_ptr], cstr),
        "rd_kafka_mock_clear_request_errors": ([_c_ptr, i16], None),
        "rd_kafka_mock_push_request_errors_array": (
            [_c_ptr, i16, size, ctypes.POINTER(cint)],
            None,
        ),
        # variadic: (err, rtt_ms) int pairs follow the fixed arguments
        "rd_kafka_mock_broker_push_request_error_rtts": ([_c_ptr, i32, i16, size], cint),
        "rd_kafka_mock_broker_error_stack_cnt": (
            [_c_ptr, i32, i16, ctypes.POINTER(size)],
            cint,
        ),
        "rd_kafka_mock_topic_set_error": ([_c_ptr, cstr, cint], None),
        "rd_kafka_mock_topic_create": ([_c_ptr, cstr, cint, cint], cint),
        "rd_kafka_mock_partition_set_leader": ([_c_ptr, cstr, i32, i32], cint),
        "rd_kafka_mock_broker_set_down": ([_c_ptr, i32], cint),
        "rd_kafka_mock_broker_set_up": ([_c_ptr, i32], cint),
        "rd_kafka_mock_broker_set_rtt": ([_c_ptr, i32, cint], cint),
        "rd_kafka_mock_broker_set_rack": ([_c_ptr, i32, cstr], cint),
        "rd_kafka_mock_coordinator_set": ([_c_ptr, cstr, cstr, i32], cint),
        "rd_kafka_mock_set_apiversion": ([_c_ptr, i16, i16, i16], cint),
        "rd_kafka_mock_group_initial_rebalance_delay_ms": ([_c_ptr, i32], None),
        "rd_kafka_mock_set_group_consumer_session_timeout_ms": ([_c_ptr, cint], None),
        "rd_kafka_mock_set_group_consumer_heartbeat_interval_ms": ([_c_ptr, cint], None),
        "rd_kafka_mock_cgrp_consumer_target_assignment_new": (
            [ctypes.POINTER(cstr), cint, ctypes.POINTER(_c_ptr)],
            _c_ptr,
        ),
        "rd_kafka_mock_cgrp_consumer_target_assignment_destroy": ([_c_ptr], None),
        "rd_kafka_mock_cgrp_consumer_target_assignment": ([_c_ptr, cstr, _c_ptr], None),
        "rd_kafka_mock_start_request_tracking": ([_c_ptr], None),
        "rd_kafka_mock_stop_request_tracking": ([_c_ptr], None),
        "rd_kafka_mock_clear_requests": ([_c_ptr], None),
        "rd_kafka_mock_get_requests": ([_c_ptr, ctypes.POINTER(size)], ctypes.POINTER(_c_ptr)),
        "rd_kafka_mock_request_id": ([_c_ptr], i32),
        "rd_kafka_mock_request_api_key": ([_c_ptr], i16),
        "rd_kafka_mock_request_timestamp": ([_c_ptr], i64),
        "rd_kafka_mock_request_destroy": ([_c_ptr], None),
        "rd_kafka_mock_request_destroy_array": ([ctypes.POINTER(_c_ptr), size], None),
    }
    for name, (argtypes, restype) in sigs.items():
        fn = getattr(lib, name, None)
        if fn is None:
            continue  # optional control missing from this build: has() reports it
        fn.argtypes = argtypes
        fn.restype = restype


def _load() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is None:
            path = find_librdkafka()
            try:
                lib = ctypes.CDLL(path)
            except OSError as exc:
                raise BrokerUnavailable(f"cannot load librdkafka from {path}: {exc}") from exc
            for required in ("rd_kafka_new", "rd_kafka_mock_cluster_new"):
                if not hasattr(lib, required):
                    raise BrokerUnavailable(f"{path} does not export {required}")
            _declare(lib)
            _lib = lib
        return _lib


class MockCluster:
    """A librdkafka mock cluster of ``brokers`` brokers (ids 1..N) on loopback.

    ``initial_rebalance_delay_ms`` sets the mock's ``group.initial.rebalance.delay.ms``
    (librdkafka's default is 3000; here 0 like the project's Kafka broker; None keeps the
    default). ``conf`` adds librdkafka properties for the owning handle.
    """

    def __init__(
        self,
        brokers: int = 3,
        *,
        initial_rebalance_delay_ms: int | None = 0,
        log_level: int = 3,
        conf: dict[str, str] | None = None,
    ) -> None:
        self._lib = _load()
        self.broker_count = brokers
        self._rk: int | None = None
        self._mc: int | None = None
        self._lock = threading.Lock()
        self._create(brokers, log_level, conf or {})
        if initial_rebalance_delay_ms is not None and self.has(
            "rd_kafka_mock_group_initial_rebalance_delay_ms"
        ):
            self.set_group_initial_rebalance_delay_ms(initial_rebalance_delay_ms)
        # The mock advertises flexible versions of these group APIs, but its handlers parse
        # arrays with fixed 32-bit counts and LeaveGroup with the v0-v2 layout at every
        # version: a JoinGroup v6+, SyncGroup v4+ or LeaveGroup v3+ makes it drop the
        # connection. Advertise only what it really parses (librdkafka itself never sends
        # more), so clients negotiate versions the mock understands.
        for api_key, max_version in _PARSEABLE_GROUP_API_MAX.items():
            self.set_apiversion(api_key, 0, max_version)

    # --- lifecycle -------------------------------------------------------------------------

    def _create(self, brokers: int, log_level: int, conf: dict[str, str]) -> None:
        lib = self._lib
        errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
        rconf = lib.rd_kafka_conf_new()
        settings = {"log_level": str(log_level), "client.id": "kgroup-mock-cluster", **conf}
        for key, value in settings.items():
            res = lib.rd_kafka_conf_set(rconf, key.encode(), value.encode(), errstr, _ERRSTR_SIZE)
            if res != _RD_KAFKA_CONF_OK:
                lib.rd_kafka_conf_destroy(rconf)
                raise MockClusterError(
                    f"rd_kafka_conf_set({key}={value})", res, errstr.value.decode()
                )
        rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, rconf, errstr, _ERRSTR_SIZE)
        if not rk:
            lib.rd_kafka_conf_destroy(rconf)  # not taken over on failure
            raise MockClusterError("rd_kafka_new", -1, errstr.value.decode())
        mc = lib.rd_kafka_mock_cluster_new(rk, brokers)
        if not mc:
            lib.rd_kafka_destroy(rk)
            raise MockClusterError("rd_kafka_mock_cluster_new", -1, "returned NULL")
        self._rk, self._mc = rk, mc
        self.bootstrap: str = lib.rd_kafka_mock_cluster_bootstraps(mc).decode()

    def close(self) -> None:
        """Destroy the mock cluster, then the handle that owns it. Idempotent."""
        with self._lock:
            mc, rk = self._mc, self._rk
            self._mc = self._rk = None
        if mc is not None:
            self._lib.rd_kafka_mock_cluster_destroy(mc)
        if rk is not None:
            self._lib.rd_kafka_destroy(rk)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._mc is None

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # Last resort only: tests should close() (the fixture does).
        if getattr(self, "_mc", None) is not None:
            self.close()

    def has(self, function: str) -> bool:
        """Whether this librdkafka build exports ``function`` (e.g. optional controls)."""
        return hasattr(self._lib, function)

    @property
    def broker_ids(self) -> list[int]:
        """The broker ids, 1..N."""
        return list(range(1, self.broker_count + 1))

    def _handle(self) -> int:
        if self._mc is None:
            raise RuntimeError("mock cluster is closed")
        return self._mc

    def _check(self, call: str, code: int) -> None:
        if code != 0:
            name = self._lib.rd_kafka_err2name(code)
            raise MockClusterError(call, code, name.decode() if name else "?")

    # --- topics and partitions -------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, replication: int = 1) -> None:
        """Create a topic (the mock does not implement CreateTopics over the wire)."""
        code = self._lib.rd_kafka_mock_topic_create(
            self._handle(), name.encode(), partitions, replication
        )
        self._check(f"rd_kafka_mock_topic_create({name!r})", code)

    def set_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Make ``broker_id`` lead the partition (-1: leaderless)."""
        code = self._lib.rd_kafka_mock_partition_set_leader(
            self._handle(), topic.encode(), partition, broker_id
        )
        self._check("rd_kafka_mock_partition_set_leader", code)

    def set_topic_error(self, topic: str, error: int) -> None:
        """Error for the topic in Metadata responses (0 clears it)."""
        self._lib.rd_kafka_mock_topic_set_error(self._handle(), topic.encode(), error)

    # --- coordinators, brokers -------------------------------------------------------------

    def set_coordinator(self, group: str, broker_id: int) -> None:
        """Move ``group``'s coordinator to ``broker_id``; clients see NOT_COORDINATOR."""
        code = self._lib.rd_kafka_mock_coordinator_set(
            self._handle(), b"group", group.encode(), broker_id
        )
        self._check("rd_kafka_mock_coordinator_set", code)

    def set_transaction_coordinator(self, transactional_id: str, broker_id: int) -> None:
        """Move a transactional id's coordinator."""
        code = self._lib.rd_kafka_mock_coordinator_set(
            self._handle(), b"transaction", transactional_id.encode(), broker_id
        )
        self._check("rd_kafka_mock_coordinator_set", code)

    def broker_down(self, broker_id: int) -> None:
        """Disconnect the broker's clients and refuse new connections (-1: all brokers)."""
        self._check(
            "rd_kafka_mock_broker_set_down",
            self._lib.rd_kafka_mock_broker_set_down(self._handle(), broker_id),
        )

    def broker_up(self, broker_id: int) -> None:
        """Accept connections again (-1: all brokers)."""
        self._check(
            "rd_kafka_mock_broker_set_up",
            self._lib.rd_kafka_mock_broker_set_up(self._handle(), broker_id),
        )

    def set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response of the broker by ``rtt_ms`` (-1: all brokers)."""
        self._check(
            "rd_kafka_mock_broker_set_rtt",
            self._lib.rd_kafka_mock_broker_set_rtt(self._handle(), broker_id, rtt_ms),
        )

    def set_rack(self, broker_id: int, rack: str) -> None:
        """The rack the broker reports in Metadata."""
        self._check(
            "rd_kafka_mock_broker_set_rack",
            self._lib.rd_kafka_mock_broker_set_rack(self._handle(), broker_id, rack.encode()),
        )

    # --- errors ----------------------------------------------------------------------------

    def push_request_errors(self, api_key: int, *codes: int) -> None:
        """The next ``len(codes)`` requests of ``api_key`` (any broker) fail with ``codes``.

        Error code -195 (``RD_KAFKA_RESP_ERR__TRANSPORT``) makes the broker drop the
        connection instead of answering.
        """
        if not codes:
            return
        array = (ctypes.c_int * len(codes))(*codes)
        self._lib.rd_kafka_mock_push_request_errors_array(
            self._handle(), api_key, len(codes), array
        )

    def clear_request_errors(self, api_key: int) -> None:
        """Drop pushed cluster-level errors for ``api_key``."""
        self._lib.rd_kafka_mock_clear_request_errors(self._handle(), api_key)

    def broker_push_request_error_rtts(
        self, broker_id: int, api_key: int, errors: Sequence[tuple[int, int]]
    ) -> None:
        """The next requests of ``api_key`` to ``broker_id`` get ``(code, rtt_ms)`` each.

        A code of 0 with a delay just delays that response. Broker errors take precedence
        over cluster errors.
        """
        if not errors:
            return
        fn = self._lib.rd_kafka_mock_broker_push_request_error_rtts
        varargs: list[ctypes.c_int] = []
        for code, rtt_ms in errors:
            varargs += [ctypes.c_int(code), ctypes.c_int(rtt_ms)]
        self._check(
            "rd_kafka_mock_broker_push_request_error_rtts",
            fn(self._handle(), broker_id, api_key, len(errors), *varargs),
        )

    def broker_error_stack_count(self, broker_id: int, api_key: int) -> int:
        """How many pushed broker errors for ``api_key`` are still pending."""
        count = ctypes.c_size_t(0)
        self._check(
            "rd_kafka_mock_broker_error_stack_cnt",
            self._lib.rd_kafka_mock_broker_error_stack_cnt(
                self._handle(), broker_id, api_key, ctypes.byref(count)
            ),
        )
        return count.value

    # --- protocol knobs --------------------------------------------------------------------

    def set_apiversion(self, api_key: int, min_version: int, max_version: int) -> None:
        """Advertise only ``min..max`` for ``api_key`` (-1, -1: disable the API)."""
        self._check(
            "rd_kafka_mock_set_apiversion",
            self._lib.rd_kafka_mock_set_apiversion(
                self._handle(), api_key, min_version, max_version
            ),
        )

    def set_group_initial_rebalance_delay_ms(self, delay_ms: int) -> None:
        """The mock's group.initial.rebalance.delay.ms (first rebalance of an empty group)."""
        self._lib.rd_kafka_mock_group_initial_rebalance_delay_ms(self._handle(), delay_ms)

    def set_group_consumer_session_timeout_ms(self, timeout_ms: int) -> None:
        """KIP-848 group.consumer.session.timeout.ms."""
        self._lib.rd_kafka_mock_set_group_consumer_session_timeout_ms(self._handle(), timeout_ms)

    def set_group_consumer_heartbeat_interval_ms(self, interval_ms: int) -> None:
        """KIP-848 group.consumer.heartbeat.interval.ms."""
        self._lib.rd_kafka_mock_set_group_consumer_heartbeat_interval_ms(
            self._handle(), interval_ms
        )

    def set_consumer_target_assignment(
        self, group_id: str, assignment: Mapping[str, Iterable[tuple[str, int]]]
    ) -> None:
        """Script the next target assignment of a KIP-848 ``consumer`` group: member id ->
        ``(topic, partition)`` pairs, in place of the mock's own range assignment (which it
        no longer recomputes for this group). Members the group does not know are skipped;
        the group's epoch goes up by one."""
        lib = self._lib
        members = list(assignment)
        ids = (ctypes.c_char_p * max(len(members), 1))(*(m.encode() for m in members))
        lists = (_c_ptr * max(len(members), 1))()
        try:
            for i, member in enumerate(members):
                pairs = list(assignment[member])
                lists[i] = lib.rd_kafka_topic_partition_list_new(max(len(pairs), 1))
                for topic, partition in pairs:
                    lib.rd_kafka_topic_partition_list_add(lists[i], topic.encode(), partition)
            target = lib.rd_kafka_mock_cgrp_consumer_target_assignment_new(ids, len(members), lists)
            try:
                lib.rd_kafka_mock_cgrp_consumer_target_assignment(
                    self._handle(), group_id.encode(), target
                )
            finally:
                lib.rd_kafka_mock_cgrp_consumer_target_assignment_destroy(target)
        finally:
            for handle in lists:
                if handle:
                    lib.rd_kafka_topic_partition_list_destroy(handle)

    # --- request tracking ------------------------------------------------------------------

    def start_request_tracking(self) -> None:
        """Record every request received from now on."""
        self._lib.rd_kafka_mock_start_request_tracking(self._handle())

    def stop_request_tracking(self) -> None:
        """Stop recording (what was recorded stays until :meth:`clear_requests`)."""
        self._lib.rd_kafka_mock_stop_request_tracking(self._handle())

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        self._lib.rd_kafka_mock_clear_requests(self._handle())

    def requests(self, api_keys: Iterable[int] | None = None) -> list[MockRequest]:
        """The recorded requests in arrival order (optionally only some API keys)."""
        lib = self._lib
        count = ctypes.c_size_t(0)
        array = lib.rd_kafka_mock_get_requests(self._handle(), ctypes.byref(count))
        out: list[MockRequest] = []
        if not array:
            return out
        try:
            for i in range(count.value):
                req = array[i]
                out.append(
                    MockRequest(
                        broker_id=lib.rd_kafka_mock_request_id(req),
                        api_key=lib.rd_kafka_mock_request_api_key(req),
                        timestamp_us=lib.rd_kafka_mock_request_timestamp(req),
                    )
                )
        finally:
            lib.rd_kafka_mock_request_destroy_array(array, count.value)
        if api_keys is not None:
            keys = set(api_keys)
            out = [r for r in out if r.api_key in keys]
        return out

    def __repr__(self) -> str:
        state = "closed" if self._mc is None else self.bootstrap
        return f"<MockCluster {self.broker_count} brokers {state}>"
