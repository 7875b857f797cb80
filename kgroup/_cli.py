"""The ``kgroup`` command line.

``kgroup groups --bootstrap HOST:PORT`` lists the cluster's groups with their type and
``kgroup describe GROUP --bootstrap HOST:PORT`` shows one group's state, members,
assignments, committed offsets and lag (``--json`` for scripts); a KIP-848 ``consumer``
group also shows its epochs, each member's epoch, subscription and target assignment.
Exit codes: 0 ok, 1 the broker answered an error, 2 bad usage or configuration, 3 no broker
reachable in time, 4 no such group.

``kgroup demo`` starts a local tansu broker on a free port (or uses ``--bootstrap``), creates
a topic, runs three members in this process, then stops one gracefully and crashes another,
printing every member's state, generation and assignment as they change, up to the
survivor's STABLE line owning every partition. It exits 0 with a summary of the times to
stable, or 1 if a phase did not complete within its deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from ._config import GroupConfig
from ._core._consumer_protocol import TopicPartition
from ._runtime._member import GroupMember

if TYPE_CHECKING:
    from ._inspect import GroupDescription

__all__ = ["main"]


def _fmt(assignment: frozenset[TopicPartition]) -> str:
    return "[" + ", ".join(str(tp) for tp in sorted(assignment)) + "]"


@dataclass
class _Demo:
    bootstrap: str
    topic: str
    partitions: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    #: ``--event-log DIR``: every member writes its event log there.
    event_log: str | None = None
    out: list[str] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.t0:7.2f}s] {text}"
        print(line, flush=True)

    def config(self, group: str, name: str) -> GroupConfig:
        return GroupConfig(
            bootstrap_servers=self.bootstrap,
            group_id=group,
            topics=[self.topic],
            client_id=name,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            event_log=self.event_log,
        )


class _Watcher:
    """Prints each member's (state, generation, assignment) whenever it changes."""

    def __init__(self, demo: _Demo, names: dict[str, GroupMember]) -> None:
        self.demo = demo
        self.names = names
        self.last: dict[str, tuple[str, int, str]] = {}

    def refresh(self) -> None:
        """Print every member whose state changed since the last call (synchronous, so a
        caller that has just seen a state prints exactly that state)."""
        for name, member in self.names.items():
            if member.closed:
                now = ("CLOSED", -1, "[]")
            else:
                now = (member.state.name, member.generation.generation_id, _fmt(member.assignment))
            if self.last.get(name) != now:
                self.last[name] = now
                self.demo.say(f"{name:<9} {now[0]:<21} generation={now[1]:<3} assignment={now[2]}")

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)


async def _poll_forever(member: GroupMember) -> None:
    while not member.closed:
        await member.poll(timeout=1.0)


def _covered(members: Sequence[GroupMember], partitions: int) -> bool:
    """True when the live members' assignments are disjoint and cover every partition."""
    seen: list[TopicPartition] = []
    for m in members:
        if m.closed or m.state.name != "STABLE":
            return False
        seen.extend(m.assignment)
    return len(seen) == len(set(seen)) == partitions


async def _until(pred: object, deadline_s: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        if callable(pred) and pred():
            return time.monotonic() - start
        await asyncio.sleep(0.02)
    return None


async def _run_demo(demo: _Demo) -> int:
    group = f"kgroup-demo-{uuid.uuid4().hex[:8]}"
    names = {f"member-{i}": GroupMember(demo.config(group, f"member-{i}")) for i in (1, 2, 3)}
    members = list(names.values())
    stop = asyncio.Event()
    results: list[tuple[str, float | None]] = []
    deadline = max(30.0, demo.session_timeout_ms / 1000 * 4)
    demo.say(f"group {group!r}, topic {demo.topic!r} ({demo.partitions} partitions)")
    for m in members:
        await m.start()
    watch = _Watcher(demo, names)
    watcher = asyncio.create_task(watch.run(stop))
    pollers = {m: asyncio.create_task(_poll_forever(m)) for m in members}

    async def covered(live: Sequence[GroupMember]) -> float | None:
        """Seconds until ``live`` are STABLE and share every partition (None: deadline).
        On success the members' lines are printed at once, before anything else."""
        took = await _until(lambda: _covered(live, demo.partitions), deadline)
        if took is not None:
            watch.refresh()
        return took

    try:
        demo.say("phase 1: three members join")
        took = await covered(members)
        results.append(("3 members join -> stable", took))
        if took is not None:
            demo.say("phase 2: member-3 leaves gracefully (LeaveGroup)")
            m3 = names["member-3"]
            pollers[m3].cancel()
            t = time.monotonic()
            await m3.close()
            took = await covered([names["member-1"], names["member-2"]])
            results.append(
                ("graceful leave -> covered", None if took is None else time.monotonic() - t)
            )
        if took is not None:
            demo.say("phase 3: member-2 crashes (no LeaveGroup; waits for session expiry)")
            m2 = names["member-2"]
            pollers[m2].cancel()
            t = time.monotonic()
            await m2.abort()
            took = await covered([names["member-1"]])
            results.append(("crash -> covered", None if took is None else time.monotonic() - t))
        if took is not None:
            survivor = names["member-1"]
            demo.say(
                f"member-1 alone owns all {demo.partitions} partitions "
                f"(generation {survivor.generation.generation_id})"
            )
    finally:
        # Stop printing first: the survivor's STABLE line is the demo's last state, not the
        # CLOSED lines of the shutdown below.
        stop.set()
        await watcher
        for task in pollers.values():
            task.cancel()
        await asyncio.gather(*pollers.values(), return_exceptions=True)
        for m in members:
            await m.close()
    print("\nsummary")
    ok = True
    for label, value in results:
        ok = ok and value is not None
        print(f"  {label:<28} {'FAILED (deadline)' if value is None else f'{value:6.2f} s'}")
    ok = ok and len(results) == 3
    if demo.event_log is not None:
        print(f"  event log: {demo.event_log}")
    print(f"  result: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


def _demo(args: argparse.Namespace) -> int:
    if not args.verbose:
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.bootstrap:
        demo = _Demo(
            args.bootstrap,
            args.topic,
            args.partitions,
            args.session_timeout_ms,
            args.heartbeat_interval_ms,
            event_log=args.event_log,
        )
        from ._broker_process import admin_create_topic

        asyncio.run(admin_create_topic(args.bootstrap, args.topic, args.partitions, exist_ok=True))
        return asyncio.run(_run_demo(demo))
    from ._tansu import TansuBroker

    with TansuBroker() as broker:
        print(f"tansu broker on {broker.bootstrap}", flush=True)
        broker.create_topic(args.topic, args.partitions)
        demo = _Demo(
            broker.bootstrap,
            args.topic,
            args.partitions,
            args.session_timeout_ms,
            args.heartbeat_interval_ms,
            event_log=args.event_log,
        )
        return asyncio.run(_run_demo(demo))


EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_NOT_FOUND = 1, 2, 3, 4

#: ``--command-config`` properties (Kafka's names) and the GroupConfig fields they set.
_PROPERTIES = {
    "client.id": "client_id",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "ssl.cafile": "ssl_cafile",
    "ssl.certfile": "ssl_certfile",
    "ssl.keyfile": "ssl_keyfile",
    "ssl.key.password": "ssl_key_password",
}


def _read_properties(path: str) -> dict[str, str]:
    """``key=value`` lines (``#`` comments) mapped onto GroupConfig field names."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, 1):
            line = raw.strip()
            if not line or line.startswith(("#", "!")):
                continue
            key, sep, value = line.partition("=")
            key = key.strip()
            if not sep or key not in _PROPERTIES:
                known = ", ".join(sorted(_PROPERTIES))
                raise ValueError(f"{path}:{number}: unknown property {key!r} (known: {known})")
            out[_PROPERTIES[key]] = value.strip()
    return out


def _table(rows: Sequence[Sequence[object]]) -> str:
    text = [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in text) for i in range(len(text[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in text
    )


def _inspect(args: argparse.Namespace) -> int:
    import json

    from ._errors import ConfigError, KGroupError
    from ._inspect import (
        BrokerUnreachable,
        GroupNotFound,
        InspectError,
        describe_group,
        list_groups,
    )

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    try:
        extra = _read_properties(args.command_config) if args.command_config else {}
        if args.command == "groups":
            listing = asyncio.run(list_groups(args.bootstrap, timeout=args.timeout, **extra))
            if args.json:
                print(json.dumps([_asdict(g) for g in listing], indent=2))
            else:
                rows: list[Sequence[object]] = [
                    ("GROUP", "TYPE", "STATE", "PROTOCOL-TYPE", "COORDINATOR")
                ]
                rows += [
                    (g.group_id, g.group_type, g.state, g.protocol_type, g.coordinator)
                    for g in listing
                ]
                print(_table(rows))
            return 0
        desc = asyncio.run(
            describe_group(args.bootstrap, args.group, timeout=args.timeout, **extra)
        )
    except (ConfigError, ValueError, OSError) as exc:
        print(f"kgroup {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except GroupNotFound as exc:
        print(f"kgroup {args.command}: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except BrokerUnreachable as exc:
        print(f"kgroup {args.command}: broker unreachable: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except (InspectError, KGroupError) as exc:  # e.g. AuthenticationFailed
        print(f"kgroup {args.command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(desc.as_dict(), indent=2))
        return 0
    if desc.group_type == "consumer":
        _print_consumer_group(desc)
        return 0
    print(
        f"GROUP {desc.group_id}  STATE {desc.state}  PROTOCOL {desc.protocol_type or '-'}/"
        f"{desc.protocol or '-'}  COORDINATOR {desc.coordinator}  MEMBERS {len(desc.members)}"
    )
    if desc.members:
        rows = [("MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "#PARTITIONS", "ASSIGNMENT")]
        for m in desc.members:
            parts = m.assignment
            shown = f"<{m.assignment_bytes} bytes>" if parts is None else ",".join(parts) or "-"
            count = "-" if parts is None else len(parts)
            rows.append(
                (m.member_id, m.group_instance_id, m.client_id, m.client_host, count, shown)
            )
        print()
        print(_table(rows))
    _print_offsets(desc)
    return 0


def _print_offsets(desc: GroupDescription) -> None:
    if desc.offsets:
        rows: list[Sequence[object]] = [
            ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID")
        ]
        rows += [
            (o.topic, o.partition, o.committed, o.log_end, o.lag, o.owner) for o in desc.offsets
        ]
        print()
        print(_table(rows))


def _print_consumer_group(desc: GroupDescription) -> None:
    """A KIP-848 ``consumer`` group: its epochs and assignor, and per member its epoch,
    subscription, assignment and target assignment (what the coordinator wants it to own;
    it differs while the member reconciles)."""
    print(
        f"GROUP {desc.group_id}  TYPE consumer  STATE {desc.state}  "
        f"GROUP-EPOCH {desc.group_epoch}  ASSIGNMENT-EPOCH {desc.assignment_epoch}  "
        f"ASSIGNOR {desc.protocol or '-'}  COORDINATOR {desc.coordinator}  "
        f"MEMBERS {len(desc.members)}"
    )
    if desc.members:
        rows: list[Sequence[object]] = [
            (
                "MEMBER-ID", "INSTANCE-ID", "RACK", "CLIENT-ID", "HOST", "EPOCH",
                "SUBSCRIPTION", "#PARTITIONS", "ASSIGNMENT", "TARGET-ASSIGNMENT",
            )
        ]  # fmt: skip
        for m in desc.members:
            topics = ",".join(m.subscription or ())
            if m.subscribed_topic_regex:
                topics = ",".join(filter(None, (topics, f"/{m.subscribed_topic_regex}/")))
            owned, target = m.assignment or (), m.target_assignment or ()
            rows.append(
                (
                    m.member_id, m.group_instance_id, m.rack_id, m.client_id, m.client_host,
                    m.member_epoch, topics or "-", len(owned), ",".join(owned) or "-",
                    "(same)" if target == owned else ",".join(target) or "-",
                )
            )  # fmt: skip
        print()
        print(_table(rows))
    _print_offsets(desc)


def _asdict(value: object) -> dict[str, object]:
    from dataclasses import asdict, is_dataclass

    assert is_dataclass(value) and not isinstance(value, type)
    return asdict(value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kgroup", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="three members on a local tansu broker: join, leave, crash")
    demo.add_argument("--bootstrap", help="use this broker instead of starting tansu")
    demo.add_argument("--topic", default="kgroup-demo")
    demo.add_argument("--partitions", type=int, default=6)
    demo.add_argument("--session-timeout-ms", type=int, default=6000)
    demo.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    demo.add_argument("-v", "--verbose", action="store_true", help="show kgroup's log events")
    demo.add_argument(
        "--event-log", metavar="DIR", help="write every member's event log (JSON lines) into DIR"
    )
    for name, text in (
        ("groups", "list the cluster's groups (like kafka-consumer-groups --list)"),
        ("describe", "one group: state, members, assignments, offsets and lag"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        if name == "describe":
            cmd.add_argument("group", help="the group id")
        cmd.add_argument("--bootstrap", required=True, help="HOST:PORT[,HOST:PORT...]")
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.add_argument(
            "--timeout", type=float, default=10.0, help="seconds for the whole call (10)"
        )
        cmd.add_argument(
            "--command-config",
            metavar="FILE",
            help="properties: security.protocol, sasl.mechanism, sasl.username, "
            "sasl.password, ssl.cafile, ssl.certfile, ssl.keyfile, ssl.key.password, client.id",
        )
    from .analytics import _command as report_command

    report_command.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "report":
        return report_command.run(args)
    if args.command == "demo":
        return _demo(args)
    if args.command in ("groups", "describe"):
        return _inspect(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
