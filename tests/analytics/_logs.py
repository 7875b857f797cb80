"""Seeded generators of kgroup event logs (schema v1), for the analytics tests and benchmark.

:func:`simulate` plays groups of members through joins, graceful leaves, crashes, evictions,
lease expiries, cooperative partial revokes and non-consumer ("leader") groups, with
heartbeats (some late, some failing), loop stalls, per-host clock skew and, on request,
forced overlapping ownership. It returns each member's events in ``seq`` order.
:func:`write_logs` writes them as files the way the event-log writer lays them out (one file
per process, rotated, some gzipped) and can spoil them: malformed lines, unknown versions,
duplicated and out-of-order events, truncated last lines.

Everything is driven by one ``random.Random(seed)``: the same seed gives the same files.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["Options", "fmt_ts", "simulate", "write_logs"]

T0_US = 1_795_000_000_000_000  # 2026-11-18, in microseconds since the epoch


def fmt_ts(us: int) -> str:
    """RFC 3339 UTC with microseconds and ``Z``."""
    return (
        datetime.fromtimestamp(us // 1_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        + f".{us % 1_000_000:06d}Z"
    )


@dataclass
class Options:
    groups: int = 6
    members: tuple[int, int] = (2, 5)  # per group, inclusive range
    partitions: tuple[int, int] = (1, 6)
    duration_s: float = 120.0
    heartbeat_s: float = 1.0
    session_s: float = 6.0
    faults: float = 1.0  # expected faults per member over the duration
    overlaps: float = 0.0  # chance that a rebalance leaves an overlapping claim
    skew_ms: float = 30.0  # per-host clock offsets within +-skew_ms
    leader_groups: float = 0.2  # share of non-consumer (leader election) groups
    cooperative: float = 0.4  # share of cooperative groups
    stall_rate: float = 0.01  # per heartbeat
    fail_rate: float = 0.01  # per heartbeat
    hosts: int = 0  # how many hosts the members run on (0: one per group, at least 2)


@dataclass
class _Member:
    uid: str
    group: str
    host: str
    pid: int
    client_id: str
    instance_id: str | None
    skew_us: int
    events: list[dict[str, Any]] = field(default_factory=list)
    member_id: str = ""
    generation: int = -1
    state: str = "UNJOINED"
    owned: set[tuple[str, int]] = field(default_factory=set)
    alive: bool = True
    seq: int = 0

    def emit(self, t_us: int, event: str, **fields: Any) -> None:
        line: dict[str, Any] = {
            "v": 1,
            "ts": fmt_ts(t_us + self.skew_us),
            "seq": self.seq,
            "member_uid": self.uid,
            "event": event,
            "group": self.group,
            "host": self.host,
            "pid": self.pid,
            "client_id": self.client_id,
            "member_id": self.member_id,
            "generation": self.generation,
        }
        if self.instance_id is not None:
            line["instance_id"] = self.instance_id
        line.update({k: v for k, v in fields.items() if v is not None})
        self.seq += 1
        self.events.append(line)

    def state_to(self, t_us: int, new: str, reason: str) -> None:
        old = self.state
        self.state = new
        self.emit(t_us, "member.state_changed", state_before=old, state_after=new, reason=reason)


def _tps(items: set[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in sorted(items)]


class _Group:
    def __init__(self, rng: random.Random, opts: Options, index: int, hosts: list[str]) -> None:
        self.rng = rng
        self.opts = opts
        self.name = f"group-{index}"
        self.leader_kind = rng.random() < opts.leader_groups
        self.cooperative = (not self.leader_kind) and rng.random() < opts.cooperative
        n_parts = rng.randint(*opts.partitions)
        topic = f"topic-{index}"
        self.items: list[tuple[str, int]] = (
            [("leader", -1)] if self.leader_kind else [(topic, p) for p in range(n_parts)]
        )
        self.hosts = hosts
        self.members: list[_Member] = []
        self.generation = 0
        self.counter = 0

    def new_member(self, start_us: int) -> _Member:
        rng = self.rng
        self.counter += 1
        host = rng.choice(self.hosts)
        m = _Member(
            uid=f"{rng.getrandbits(128):032x}",
            group=self.name,
            host=host,
            pid=rng.randint(100, 60000),
            client_id=f"{self.name}-c{self.counter}",
            instance_id=f"{self.name}-i{self.counter}" if rng.random() < 0.3 else None,
            skew_us=_HOST_SKEW[host],
        )
        m.emit(start_us, "eventlog.started")
        self.members.append(m)
        return m

    def live(self) -> list[_Member]:
        return [m for m in self.members if m.alive]

    def assign(self, live: list[_Member]) -> dict[str, set[tuple[str, int]]]:
        out: dict[str, set[tuple[str, int]]] = {m.uid: set() for m in live}
        if not live:
            return out
        if self.leader_kind:
            out[sorted(live, key=lambda m: m.uid)[0].uid] = {self.items[0]}
            return out
        order = sorted(live, key=lambda m: m.uid)
        for i, item in enumerate(self.items):
            out[order[i % len(order)].uid].add(item)
        return out

    def rebalance(self, t_us: int, reason: str, *, overlap: bool = False) -> int:
        """Every live member goes through a rebalance starting near ``t_us``; returns when
        the last is STABLE again."""
        rng = self.rng
        live = self.live()
        if not live:
            return t_us
        self.generation += 1
        target = self.assign(live)
        leader = min(m.member_id or m.uid for m in live)
        join_at = t_us + rng.randint(5_000, 200_000)
        end = t_us
        late_revoke: list[tuple[_Member, set[tuple[str, int]]]] = []
        for m in live:
            t = t_us + rng.randint(0, 100_000)
            first_join = m.state == "UNJOINED"
            m.state_to(t, "PREPARING_REBALANCE", reason)
            keep = target[m.uid] if self.cooperative else set()
            revoke = m.owned - keep
            moving = revoke - target[m.uid]
            if overlap and moving and not first_join and rng.random() < 0.7:
                late_revoke.append((m, moving))
                revoke = revoke - moving
            if revoke and not first_join:
                m.emit(t + 1_000, "member.partitions_revoked", revoked=_tps(revoke),
                       owned=_tps(m.owned - revoke))  # fmt: skip
                m.owned -= revoke
            m.emit(t + 2_000, "member.join_sent", reason=reason)
            if not m.member_id:
                m.member_id = f"{m.client_id}-{rng.getrandbits(32):08x}"
            jt = max(join_at, t + 3_000)
            m.generation = self.generation
            m.emit(jt, "member.joined", leader=leader)
            m.state_to(jt + 1_000, "COMPLETING_REBALANCE", "joined")
            done = jt + rng.randint(2_000, 60_000)
            m.emit(done, "member.synced")
            new = target[m.uid] - m.owned
            m.owned |= new
            m.emit(
                done + 500, "member.partitions_assigned", assigned=_tps(new), owned=_tps(m.owned)
            )
            m.state_to(done + 1_000, "STABLE", "synced")
            m.emit(done + 1_500, "member.stable")
            end = max(end, done + 1_500)
        for m, revoke in late_revoke:
            t = end + rng.randint(300_000, 900_000)
            m.emit(t, "member.partitions_revoked", revoked=_tps(revoke),
                   owned=_tps(m.owned - revoke))  # fmt: skip
            m.owned -= revoke
            end = max(end, t)
        return end


_HOST_SKEW: dict[str, int] = {}


def simulate(
    seed: int, opts: Options | None = None, first_group: int = 0
) -> list[list[dict[str, Any]]]:
    """Each member's events (dicts, ``seq`` order) for ``opts.groups`` groups, named
    ``group-<first_group>`` on."""
    opts = opts or Options()
    rng = random.Random(seed)
    hosts = [f"host-{i}" for i in range(opts.hosts or max(2, opts.groups))]
    for h in hosts:
        _HOST_SKEW[h] = rng.randint(-int(opts.skew_ms * 1000), int(opts.skew_ms * 1000))
    out: list[list[dict[str, Any]]] = []
    for gi in range(first_group, first_group + opts.groups):
        g = _Group(rng, opts, gi, hosts)
        out.extend(m.events for m in _run_group(g, rng, opts))
    return out


def _heartbeats(m: _Member, rng: random.Random, opts: Options, t0: int, t1: int) -> None:
    """Heartbeats of ``m`` between ``t0`` and ``t1``."""
    step = int(opts.heartbeat_s * 1_000_000)
    t = t0 + rng.randint(0, step)
    while t < t1:
        late = round(abs(rng.gauss(0.0, 2.0)), 3)
        if rng.random() < opts.stall_rate:
            stall = round(rng.uniform(200.0, 3000.0), 3)
            m.emit(t, "heartbeat.late", hb_late_ms=stall)
            late = stall
        sent = t
        rtt = round(rng.lognormvariate(1.0, 0.6), 3)
        t_ans = sent + int(rtt * 1000) + 1
        if rng.random() < opts.fail_rate:
            code, name = rng.choice([(27, "REBALANCE_IN_PROGRESS"), (7, "REQUEST_TIMED_OUT")])
            m.emit(t_ans, "member.heartbeat_failed", hb_sent=fmt_ts(sent + m.skew_us),
                   hb_rtt_ms=rtt, hb_late_ms=late, error_code=code, error=name)  # fmt: skip
        else:
            m.emit(t_ans, "member.heartbeat_ok", hb_sent=fmt_ts(sent + m.skew_us),
                   hb_rtt_ms=rtt, hb_late_ms=late)  # fmt: skip
        t += step + int(late * 1000)


def _run_group(g: _Group, rng: random.Random, opts: Options) -> list[_Member]:
    start = T0_US + rng.randint(0, 5_000_000)
    end_us = start + int(opts.duration_s * 1_000_000)
    n = rng.randint(*opts.members)
    for _ in range(n):
        g.new_member(start + rng.randint(0, 50_000))
    t = g.rebalance(start + 100_000, "start")
    # Faults at random times, in order; heartbeats fill the quiet spans between them.
    n_faults = sum(1 for _ in range(n) if rng.random() < min(1.0, opts.faults))
    n_faults += int(max(0.0, opts.faults - 1.0) * n)
    times = sorted(rng.randint(t + 1_000_000, end_us - 1_000_000) for _ in range(n_faults))
    for ft in times:
        if ft <= t:
            ft = t + 500_000
        if ft >= end_us:
            break
        for m in g.live():
            _heartbeats(m, rng, opts, t, ft)
        t = _fault(g, rng, opts, ft)
    for m in g.live():
        _heartbeats(m, rng, opts, t, end_us)
    # The end: most members close, some logs just stop.
    for m in g.live():
        tc = max(end_us, t) + rng.randint(0, 200_000)
        if rng.random() < 0.85:
            m.state_to(tc, "UNJOINED", "closing")
            m.emit(tc + 100, "member.leaving", reason="close")
            if m.owned:
                m.emit(tc + 200, "member.partitions_revoked", revoked=_tps(m.owned), owned=[])
                m.owned = set()
            m.emit(tc + 300, "member.closed")
            if rng.random() < 0.5:
                m.emit(tc + 400, "eventlog.stopped")
        m.alive = False
    return g.members


def _fault(g: _Group, rng: random.Random, opts: Options, t: int) -> int:
    """One fault at ``t``; returns when the group is settled again."""
    live = g.live()
    kind = rng.choice(["join", "leave", "crash", "evict", "lease", "fence", "overlap"])
    if kind == "overlap" and opts.overlaps <= 0:
        kind = "join"
    if not live:
        kind = "join"
    session = int(opts.session_s * 1_000_000)
    if kind == "join":
        g.new_member(t)
        return g.rebalance(t + 50_000, "member joined")
    victim = rng.choice(live)
    if kind == "leave":
        victim.state_to(t, "UNJOINED", "leaving")
        victim.emit(t + 100, "member.leaving", reason="close")
        if victim.owned:
            victim.emit(t + 200, "member.partitions_revoked", revoked=_tps(victim.owned), owned=[])
            victim.owned = set()
        victim.emit(t + 300, "member.left_group", error_code=0)
        victim.emit(t + 400, "member.closed")
        victim.alive = False
        return g.rebalance(t + rng.randint(1_000, 800_000), "member left")
    if kind == "crash":
        victim.emit(t, "member.heartbeat_ok", hb_sent=fmt_ts(t - 1000 + victim.skew_us),
                    hb_rtt_ms=1.0, hb_late_ms=0.0)  # fmt: skip
        victim.alive = False
        return g.rebalance(t + session, "session expired")
    if kind in ("evict", "lease", "fence"):
        if kind == "lease":
            victim.emit(t, "member.lease_expired", lease_deadline=fmt_ts(t + victim.skew_us))
        else:
            code, name = (
                (25, "UNKNOWN_MEMBER_ID") if kind == "evict" else (82, "FENCED_INSTANCE_ID")
            )
            victim.emit(t, "member.heartbeat_failed", hb_sent=fmt_ts(t - 2000 + victim.skew_us),
                        hb_rtt_ms=2.0, hb_late_ms=0.5, error_code=code, error=name)  # fmt: skip
        if victim.owned:
            victim.emit(t + 100, "member.partitions_lost", lost=_tps(victim.owned), owned=[])
            victim.owned = set()
        victim.state_to(t + 200, "UNJOINED", kind)
        victim.member_id = "" if kind == "evict" else victim.member_id
        return g.rebalance(t + 300, kind)
    # overlap: a member joins, and in the rebalance some old owners revoke what moves only
    # after the new owners took it over
    g.new_member(t)
    return g.rebalance(t + 10_000, "forced overlap", overlap=rng.random() < opts.overlaps)


def _lines(events: list[dict[str, Any]]) -> Iterator[str]:
    for e in events:
        yield json.dumps(e, separators=(",", ":"))


def write_logs(
    members: list[list[dict[str, Any]]],
    directory: Path,
    seed: int,
    *,
    spoil: bool = False,
    rotate_lines: int = 400,
    gzip_share: float = 0.3,
) -> list[Path]:
    """Write the members' events under ``directory`` (members of one ``(host, pid)`` share a
    file, interleaved by time; files rotate every ``rotate_lines`` lines into ``.N.jsonl``;
    some are gzipped). ``spoil`` adds malformed lines, unknown versions, duplicates,
    out-of-order events and truncated last lines. Returns the files written."""
    rng = random.Random(seed ^ 0x5EED)
    by_proc: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for events in members:
        if events:
            by_proc.setdefault((events[0]["host"], events[0]["pid"]), []).extend(events)
    written: list[Path] = []
    for (host, pid), events in sorted(by_proc.items()):
        events.sort(key=lambda e: (e["ts"], e["member_uid"], e["seq"]))
        lines = list(_lines(events))
        if spoil:
            lines = _spoil(lines, rng)
        sub = directory / host
        sub.mkdir(parents=True, exist_ok=True)
        stem = f"kgroup-events-{host}-{pid}-{events[0]['ts'][:19].replace(':', '')}"
        chunks = [lines[i : i + rotate_lines] for i in range(0, len(lines), rotate_lines)] or [[]]
        for i, chunk in enumerate(chunks):
            name = f"{stem}.jsonl" if i == 0 else f"{stem}.{i}.jsonl"
            text = "".join(line + "\n" for line in chunk)
            if spoil and i == len(chunks) - 1 and chunk and rng.random() < 0.3:
                text = text[: -max(2, len(chunk[-1]) // 2)]  # died mid-line
            path = sub / name
            if rng.random() < gzip_share:
                path = path.with_name(name + ".gz")
                path.write_bytes(gzip.compress(text.encode(), mtime=0))
            else:
                path.write_text(text, encoding="utf-8")
            written.append(path)
    (directory / "not-a-log.txt").write_text("ignored: not *.jsonl\n")
    return written


def _spoil(lines: list[str], rng: random.Random) -> list[str]:
    out: list[str] = []
    for line in lines:
        r = rng.random()
        if r < 0.01:
            out.append(line[: len(line) // 2])  # malformed
        elif r < 0.015:
            out.append(line.replace('"v":1,', '"v":2,', 1))  # unknown version
        elif r < 0.02:
            out.append("")  # an empty line
        elif r < 0.025:
            out.append(
                line.replace('"seq":', '"seq":"', 1).replace(',"member_uid"', '","member_uid"', 1)
            )
        out.append(line)
        if r > 0.985:
            out.append(line)  # duplicate (same member_uid and seq)
        elif 0.97 < r <= 0.975 and '"ts":"' in line:
            # the same member's next seq goes back in time: rewrite this line's ts later
            # than its successor's by making it an out-of-order copy with a new seq
            e = json.loads(line)
            e["ts"] = fmt_ts(_parse_us(e["ts"]) - 5_000_000)
            e["seq"] = e["seq"] + 1_000_000  # a seq after the member's last: ts goes back
            out.append(json.dumps(e, separators=(",", ":")))
    if rng.random() < 0.2:
        out.insert(rng.randint(0, len(out)), "[1, 2, 3]")
    if rng.random() < 0.2:
        out.insert(rng.randint(0, len(out)), '{"v":1,"seq":"x"}')
    return out


def _parse_us(ts: str) -> int:
    dt = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return int(dt.timestamp()) * 1_000_000 + dt.microsecond
