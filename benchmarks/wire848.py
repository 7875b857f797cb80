"""KIP-848 reaction on the wire: from the heartbeat answer carrying a new assignment to the
member's acknowledging heartbeat.

    python benchmarks/wire848.py [--clients kgroup-848,java-848,confluent-848] [--rounds 3]
                                 [--members 2] [--partitions 6] [--session-ms 6000]
                                 [--heartbeat-ms 1000] [--json out.json]

Under the consumer protocol a member learns its new target assignment from a
ConsumerGroupHeartbeat (API 68) answer, reconciles on its own (revoke callback for what it
loses, assign callback for what it gains) and acknowledges by sending a heartbeat whose
``TopicPartitions`` are what it now owns. Until then the broker does not hand a revoked
partition to its next owner, so this time is how long a partition waits on the member. The
Java client sends that heartbeat as soon as its reconciliation is done; a client that
waits for its next heartbeat interval adds up to ``--heartbeat-ms``.

Apache Kafka 4.4.0 advertises a frame-aware relay (:class:`Cgh848Relay`, a thread of this
process): every connection of every member goes through it. It stamps (``time.time()``)
each CGH request just before writing it toward the broker and each CGH answer just before
writing it toward the client, and decodes their assignments (topic ids and partitions).

Per client (each a ``membership.py`` configuration: ``kgroup-848``, ``java-848``,
``confluent-848``, one process per member), on a fresh ``--partitions`` topic and group
whose consumer session and heartbeat interval are set to ``--session-ms`` /
``--heartbeat-ms`` first: ``--members`` members join; then ``--rounds`` times a member
more joins (the others revoke, it gains) and, once the group is covered and quiet, leaves
again (SIGTERM: the others gain). A sample is one (member, new assignment): from the answer
whose assignment differs from what the member last reported owning, to the member's first
later request reporting exactly that assignment (superseded targets and leaving members'
last targets are dropped). Median and max per client, and how many samples each.

Also per client, the *pickup*: from the request in which a member gives a partition up to
the answer that gives it to another member of the same client. The broker hands a released
partition over only in an answer to its next owner, so this is how soon that member
heartbeats again (at most the interval, unless the client heartbeats sooner).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (
    Relay,
    fmt,
    install_interrupts,
    log,
    machine,
    make_broker,
    median,
    render_table,
    write_json,
)
from _kip848 import CLIENTS_848, give_group_timings
from membership import Fleet, Member, covers

API_CGH = 68

Parts = frozenset[tuple[str, int]]


@dataclass
class Frame:
    """One ConsumerGroupHeartbeat request or answer the relay forwarded."""

    t: float  # time.time() just before it was written on
    conn: int
    kind: str  # "request" / "answer"
    group_id: str | None
    member_id: str | None
    epoch: int
    parts: Parts | None  # request TopicPartitions / answer Assignment; None: not sent
    error_code: int = 0


class _Reader:
    """Flexible (compact) Kafka encoding, read forward."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def fixed(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def text(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        out = self.data[self.pos : self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return out

    def classic_text(self) -> str | None:
        n = self.fixed(">h")
        if n < 0:
            return None
        out = self.data[self.pos : self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return out

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()

    def count(self) -> int:
        """A compact array's length; -1 for null."""
        return self.uvarint() - 1

    def topic_partitions(self) -> Parts | None:
        n = self.count()
        if n < 0:
            return None
        parts: set[tuple[str, int]] = set()
        for _ in range(n):
            topic_id = self.data[self.pos : self.pos + 16].hex()
            self.pos += 16
            for _ in range(max(0, self.count())):
                parts.add((topic_id, self.fixed(">i")))
            self.tags()
        return frozenset(parts)


def parse_cgh_request(frame: bytes, conn: int, t: float) -> tuple[int, Frame] | None:
    """(correlation id, the request) for a CGH request frame (v0/v1, header v2); None for
    any other API."""
    if len(frame) < 8:
        return None
    api_key, version, correlation = struct.unpack_from(">hhi", frame, 0)
    if api_key != API_CGH:
        return None
    r = _Reader(frame, 8)
    r.classic_text()  # client id (header v2 keeps the classic string)
    r.tags()
    group_id, member_id = r.text(), r.text()
    epoch = r.fixed(">i")
    r.text()  # instance id
    r.text()  # rack id
    r.fixed(">i")  # rebalance timeout
    for _ in range(max(0, r.count())):  # subscribed topic names
        r.text()
    if version >= 1:
        r.text()  # subscribed topic regex
    r.text()  # server assignor
    parts = r.topic_partitions()
    return correlation, Frame(t, conn, "request", group_id, member_id, epoch, parts)


def parse_cgh_answer(frame: bytes, request: Frame, t: float) -> Frame:
    """The answer to ``request`` (header v1: correlation id, tags)."""
    r = _Reader(frame, 4)
    r.tags()
    r.fixed(">i")  # throttle
    error = r.fixed(">h")
    r.text()  # error message
    member_id = r.text() or request.member_id
    epoch = r.fixed(">i")
    r.fixed(">i")  # heartbeat interval
    parts = None
    if r.fixed(">b") >= 0:  # a nullable struct: -1 null, 1 present
        parts = r.topic_partitions() or frozenset()
    return Frame(t, request.conn, "answer", request.group_id, member_id, epoch, parts, error)


class Cgh848Relay(Relay):
    """:class:`_bench.Relay` that records ConsumerGroupHeartbeat requests and answers."""

    def __init__(self, name: str = "relay848") -> None:
        super().__init__(name)
        self.frames: list[Frame] = []

    def frames_of(self, group: str) -> list[Frame]:
        with self._lock:
            return [f for f in self.frames if f.group_id == group]

    async def _pipe_requests(self, conn: int, reader: Any, writer: Any, pending: Any) -> None:
        with contextlib.suppress(Exception):
            while True:
                head = await reader.readexactly(4)
                frame = await reader.readexactly(struct.unpack(">i", head)[0])
                found = None
                with contextlib.suppress(struct.error, IndexError):
                    found = parse_cgh_request(frame, conn, 0.0)
                if found is not None:
                    correlation, request = found
                    pending[correlation] = request
                    request.t = time.time()
                    with self._lock:
                        self.frames.append(request)
                writer.write(head + frame)
                await writer.drain()

    async def _pipe_responses(self, reader: Any, writer: Any, pending: Any) -> None:
        with contextlib.suppress(Exception):
            while True:
                head = await reader.readexactly(4)
                frame = await reader.readexactly(struct.unpack(">i", head)[0])
                request = None
                if pending and len(frame) >= 4:
                    request = pending.pop(struct.unpack_from(">i", frame, 0)[0], None)
                if request is not None:
                    with contextlib.suppress(struct.error, IndexError):
                        answer = parse_cgh_answer(frame, request, 0.0)
                        answer.t = time.time()
                        with self._lock:
                            self.frames.append(answer)
                writer.write(head + frame)
                await writer.drain()


def reactions(frames: Sequence[Frame]) -> list[float]:
    """Seconds from each new target assignment's answer to the member's acknowledging
    request, for every member in ``frames`` (one group's, in forwarding order)."""
    samples: list[float] = []
    owned: dict[str, Parts] = {}
    target: dict[str, tuple[Parts, float]] = {}
    for f in sorted(frames, key=lambda f: f.t):
        member = f.member_id or ""
        if f.kind == "answer":
            if f.error_code == 0 and f.parts is not None:
                if f.parts != owned.get(member, frozenset()):
                    target[member] = (f.parts, f.t)  # a newer target supersedes
                else:
                    target.pop(member, None)
            continue
        if f.epoch < 0:  # leaving: its pending target is never acknowledged
            target.pop(member, None)
            continue
        if f.parts is not None:
            owned[member] = f.parts
            pending = target.get(member)
            if pending is not None and pending[0] == f.parts:
                samples.append(f.t - pending[1])
                del target[member]
    return samples


def pickups(frames: Sequence[Frame]) -> list[float]:
    """Seconds from a member's request giving a partition up (it no longer reports it) to
    the answer that gives it to another member: how long a released partition waits for its
    next owner's heartbeat (the broker hands it over only in an answer)."""
    samples: list[float] = []
    owned: dict[str, Parts] = {}
    released: dict[tuple[str, int], tuple[str, float]] = {}  # partition -> (by, when)
    for f in sorted(frames, key=lambda f: f.t):
        member = f.member_id or ""
        if f.kind == "request" and f.parts is not None:
            for tp in owned.get(member, frozenset()) - f.parts:
                released[tp] = (member, f.t)
            owned[member] = f.parts
        elif f.kind == "answer" and f.error_code == 0 and f.parts is not None:
            for tp in f.parts - owned.get(member, frozenset()):
                by = released.pop(tp, None)
                if by is not None and by[0] != member:
                    samples.append(f.t - by[1])
    return samples


def run_client(
    fleet: Fleet, broker: Any, relay: Cgh848Relay, label: str, a: argparse.Namespace
) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:6]
    topic = group = f"wire-{label}-{suffix}"
    broker.create_topic(topic, a.partitions)
    give_group_timings(broker.bootstrap, group, a.session_ms, a.heartbeat_ms)
    args = ["--session-ms", str(a.session_ms), "--heartbeat-ms", str(a.heartbeat_ms),
            "--log-level", a.log_level]  # fmt: skip
    base: list[Member] = []
    everyone: list[Member] = []
    rng = random.Random(a.seed)  # the same draws for every client

    def spawn(name: str) -> Member:
        m = fleet.spawn(label, group, topic, f"{label}-{name}", args)
        everyone.append(m)
        return m

    def settle(members: list[Member], what: str) -> None:
        ok, why = fleet.wait_until(lambda: covers(members, a.partitions), a.deadline)
        if not ok:
            raise RuntimeError(f"{label}: {what}: {why}")
        fleet.pump_for(a.settle)

    try:
        base.extend(spawn(f"m{i}") for i in range(a.members))
        settle(base, "join")
        for rnd in range(a.rounds):
            # A random part of an interval first, as membership.py does: else each step
            # lands at a fixed phase of the members' heartbeat timers (the pickup would
            # measure that phase, set by the client's start-up time).
            fleet.pump_for(rng.uniform(0.0, a.heartbeat_ms / 1000.0))
            extra = spawn(f"x{rnd}")
            settle([*base, extra], f"round {rnd}: join")
            fleet.pump_for(rng.uniform(0.0, a.heartbeat_ms / 1000.0))
            fleet.terminate(extra)
            fleet.wait_until(lambda m=extra: m.exited, a.deadline)  # type: ignore[misc]
            settle(base, f"round {rnd}: leave")
    finally:
        fleet.stop(everyone)
    frames = relay.frames_of(group)
    samples, waits = reactions(frames), pickups(frames)
    return {
        "client": label,
        "group": group,
        "samples": samples,
        "median_ms": None if not samples else 1000 * (median(samples) or 0.0),
        "max_ms": None if not samples else 1000 * max(samples),
        "pickups": waits,
        "pickup_median_ms": None if not waits else 1000 * (median(waits) or 0.0),
        "pickup_max_ms": None if not waits else 1000 * max(waits),
        "frames": [
            vars(f) | {"parts": None if f.parts is None else sorted(f.parts)} for f in frames
        ],
    }


def table(results: Sequence[dict[str, Any]]) -> str:
    base = next((r for r in results if r["client"] == "kgroup-848"), None)
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["client"], "—", "—", "0", "", "—", "—", r["error"][:80]])
            continue
        ratio = "—"
        if base is not None and r is not base and base.get("median_ms") and r.get("median_ms"):
            ratio = f"{base['median_ms'] / r['median_ms']:.2f}"
        rows.append(
            [
                r["client"],
                fmt(r["median_ms"], 1),
                fmt(r["max_ms"], 1),
                str(len(r["samples"])),
                ratio,
                fmt(r.get("pickup_median_ms"), 1),
                fmt(r.get("pickup_max_ms"), 1),
                "",
            ]
        )
    header = [
        "client",
        "reaction median ms",
        "max ms",
        "samples",
        "kgroup/peer median",
        "pickup median ms",
        "pickup max ms",
        "notes",
    ]
    return render_table(header, rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--clients", default=",".join(CLIENTS_848))
    p.add_argument("--rounds", type=int, default=3, help="join + leave of an extra member (3)")
    p.add_argument("--members", type=int, default=2)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--session-ms", type=int, default=6000)
    p.add_argument("--heartbeat-ms", type=int, default=1000)
    p.add_argument("--deadline", type=float, default=60.0)
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1, help="seed of the pre-step jitter")
    p.add_argument("--log-level", default="info")
    p.add_argument("--log-dir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    args.client_list = [c.strip() for c in args.clients.split(",") if c.strip()]
    for c in args.client_list:
        if c not in CLIENTS_848:
            p.error(f"unknown client {c!r} (one of {', '.join(CLIENTS_848)})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_interrupts()
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="kgroup-wire848-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    relay = Cgh848Relay()
    relay.start()
    broker = make_broker("kafka", proxy=relay)
    results: list[dict[str, Any]] = []
    fleet: Fleet | None = None
    try:
        log("starting kafka behind the relay ...")
        broker.start()
        fleet = Fleet(log_dir, relay.address)
        if "java-848" in args.client_list:
            from kgroup.testing._java import java_member_command

            java_member_command(["--help"])  # fetch + compile once, outside any timing
        for label in args.client_list:
            log(f"{label}: {args.rounds} round(s) ...")
            try:
                r = run_client(fleet, broker, relay, label, args)
            except RuntimeError as exc:
                r = {"client": label, "error": str(exc), "samples": []}
            results.append(r)
            log(f"  {label}: median {fmt(r.get('median_ms'), 1)} ms, max "
                f"{fmt(r.get('max_ms'), 1)} ms, {len(r['samples'])} samples")  # fmt: skip
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        if fleet is not None:
            fleet.stop_all()
        broker.close()
        relay.close()
    meta = {**machine(), "heartbeat_ms": args.heartbeat_ms, "session_ms": args.session_ms}
    print(
        f"\nKIP-848 reaction on the wire (Kafka 4.4.0): CGH answer with a new assignment → "
        f"the acknowledging CGH, at the relay; heartbeat {args.heartbeat_ms} ms, session "
        f"{args.session_ms} ms, {args.members} members + 1 joining and leaving x{args.rounds}"
    )
    print(table(results))
    print(f"member logs: {log_dir}")
    write_json(args.json, {"meta": meta, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
