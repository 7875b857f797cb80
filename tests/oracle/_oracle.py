"""Kafka's Java assignors as an oracle: one long-lived JVM answering assignment cases.

``AssignorOracle.java`` (next to this file) reads one JSON case per line and answers with
the assignment of the real ``org.apache.kafka.clients.consumer`` assignor (kafka-clients
:data:`~kgroup.testing.KAFKA_VERSION`, the jars of :func:`~kgroup.testing.kafka_libs`).
It is compiled once into the jar cache, like :class:`~kgroup.testing.JavaMember`::

    with AssignorOracle() as oracle:
        java = oracle.assign("range", {"t0": 3}, members)   # MemberSubscription sequence
        many = oracle.assign_many([case1, case2, ...])      # pipelined, one round trip

Where Java's assignor throws, the answer is a :class:`JavaRejected` with the exception.

:meth:`AssignorOracle.start` raises :class:`~kgroup.testing.BrokerUnavailable` where Java
(or the jars, and Maven to fetch them) is missing.
"""

from __future__ import annotations

import base64
import json
import queue
import subprocess
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from kgroup._core._assignors import MemberSubscription
from kgroup._core._consumer_protocol import TopicPartition
from kgroup._core._racks import TopicLayout
from kgroup.testing import KAFKA_VERSION
from kgroup.testing._javac import HELPER_JVM_OPTIONS, java_program_command
from kgroup.testing._ports import (
    kill_with_parent_prefix,
    log_tail,
    owned_temp_dir,
    register_child,
    unregister_child,
)

__all__ = ["ORACLE_SOURCE", "AssignorOracle", "JavaRejected", "OracleError", "java_case"]

#: The Java source of the oracle program.
ORACLE_SOURCE = Path(__file__).resolve().parent / "AssignorOracle.java"

Case = dict[str, Any]
JavaAssignment = dict[str, list[TopicPartition]]


class OracleError(RuntimeError):
    """The oracle JVM failed, exited or did not answer in time."""


@dataclass(frozen=True)
class JavaRejected:
    """Java's assignor threw on a case: the exception as Java prints it."""

    error: str


def java_case(
    assignor: str,
    partitions_per_topic: Mapping[str, int],
    members: Iterable[MemberSubscription],
) -> Case:
    """The oracle's JSON case for the same input as ``Assignor.assign``.

    Topics with zero partitions are left out of the Java ``Cluster`` (as in real metadata,
    where such a topic has no partitions to list); both sides skip them. A
    :class:`~kgroup.TopicLayout` also sends each partition's replica racks (Java's ``Cluster``
    gets one node per rack).
    """
    topics = {t: n for t, n in partitions_per_topic.items() if n > 0}
    case: Case = {"assignor": assignor, "topics": topics}
    if isinstance(partitions_per_topic, TopicLayout):
        case["racks"] = {
            t: [sorted(partitions_per_topic.replica_racks(t, p)) for p in range(n)]
            for t, n in topics.items()
        }
    return case | {
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "topics": list(m.subscription.topics),
                "owned": [[tp.topic, tp.partition] for tp in m.subscription.owned_partitions],
                "generation": m.subscription.generation_id,
                "user_data": (
                    None
                    if m.subscription.user_data is None
                    else base64.b64encode(m.subscription.user_data).decode()
                ),
                "rack": m.subscription.rack_id,
            }
            for m in members
        ],
    }


class AssignorOracle:
    """One JVM running ``AssignorOracle.java``; cases go in on stdin, answers come out.

    Not thread-safe: one caller at a time. ``timeout`` bounds the wait for each answer.
    """

    def __init__(self, *, version: str = KAFKA_VERSION, timeout: float = 60.0) -> None:
        self.version = version
        self.timeout = timeout
        tmp, self._remove_tmp = owned_temp_dir(self, "kgroup-assignor-oracle-")
        #: The JVM's stderr (the assignors' slf4j log at WARN) and the command line.
        self.log_path = tmp / "oracle.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._answers: queue.Queue[bytes | None] = queue.Queue()
        self._reader: threading.Thread | None = None

    def start(self) -> AssignorOracle:
        """Compile if needed, start the JVM and check it runs the expected kafka-clients."""
        if self._proc is not None:
            raise RuntimeError("AssignorOracle already started")
        argv = java_program_command(
            ORACLE_SOURCE,
            cache_name="assignor-oracle",
            jvm_options=(*HELPER_JVM_OPTIONS, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"),
            version=self.version,
            error=OracleError,
        )
        with self.log_path.open("ab") as log:
            log.write(f"start: {argv}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                [*kill_with_parent_prefix(), *argv],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        register_child(self._proc.pid)
        self._reader = threading.Thread(
            target=self._read, args=(self._proc,), name="assignor-oracle-reader", daemon=True
        )
        self._reader.start()
        try:
            answer = self._exchange([{"version": True}])[0]
            if answer.get("version") != self.version:
                raise OracleError(f"oracle runs kafka-clients {answer}, not {self.version}")
        except BaseException:
            self.close()
            raise
        return self

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self._answers.put(line)
        self._answers.put(None)

    def _exchange(self, requests: Sequence[Case]) -> list[dict[str, Any]]:
        """Send every request (from a writer thread, so a full pipe cannot deadlock us)
        and collect the answers in order."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.poll() is not None:
            raise OracleError(f"the oracle is not running; log:\n{log_tail(self.log_path)}")
        payload = b"".join(json.dumps(r).encode() + b"\n" for r in requests)
        stdin = proc.stdin
        failure: list[BaseException] = []

        def write() -> None:
            try:
                stdin.write(payload)
                stdin.flush()
            except OSError as exc:
                failure.append(exc)

        writer = threading.Thread(target=write, name="assignor-oracle-writer", daemon=True)
        writer.start()
        answers: list[dict[str, Any]] = []
        try:
            for _ in requests:
                try:
                    line = self._answers.get(timeout=self.timeout)
                except queue.Empty:
                    raise OracleError(
                        f"no answer from the oracle within {self.timeout:.0f}s; "
                        f"log:\n{log_tail(self.log_path)}"
                    ) from None
                if line is None:
                    self._answers.put(None)  # later calls see the exit too
                    raise OracleError(
                        f"the oracle exited ({proc.poll()}); write error {failure}; "
                        f"log:\n{log_tail(self.log_path)}"
                    )
                answers.append(json.loads(line))
        finally:
            writer.join(timeout=self.timeout)
        return answers

    def assign_many(self, cases: Sequence[Case]) -> list[JavaAssignment | JavaRejected]:
        """Java's assignment for every case (see :func:`java_case`), in one round trip;
        :class:`JavaRejected` where the assignor threw."""
        results: list[JavaAssignment | JavaRejected] = []
        for answer in self._exchange(cases):
            if "assignment" not in answer:
                results.append(JavaRejected(str(answer.get("error"))))
                continue
            results.append(
                {
                    member: [TopicPartition(str(t), int(p)) for t, p in tps]
                    for member, tps in answer["assignment"].items()
                }
            )
        return results

    def assign(
        self,
        assignor: str,
        partitions_per_topic: Mapping[str, int],
        members: Iterable[MemberSubscription],
    ) -> JavaAssignment | JavaRejected:
        """Java's assignment for one input, given as ``Assignor.assign`` takes it."""
        return self.assign_many([java_case(assignor, partitions_per_topic, members)])[0]

    def close(self) -> int | None:
        """Close stdin (the program exits at end of input); kill it if it lingers."""
        proc = self._proc
        if proc is None:
            return None
        try:
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        finally:
            unregister_child(proc.pid)
            if self._reader is not None:
                self._reader.join(timeout=5)  # it sees EOF once the JVM is gone
            if proc.stdout is not None:
                proc.stdout.close()
        return proc.returncode

    def __enter__(self) -> AssignorOracle:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
