"""A small pure-Python reference implementation of every kgroup.analytics table (tests and
the benchmark only).

It follows the definitions in the docs and in kgroup/analytics/_*.py docstrings line by line,
with none of Spark's machinery: read each file, classify each line, walk each member's
events in ``seq`` order. Timestamps are integer microseconds; durations are one division
of a microsecond difference, exactly as the Spark job computes them, so results compare
exactly (floats to 1e-9 only where sums or quantiles are involved).
"""

from __future__ import annotations

import json
import math
import os
import re
import zlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kgroup.analytics._names import (
    DEFAULT_CLOCK_SKEW_S,
    EVENT_CLOSED_NAMES,
    FENCED_INSTANCE_ID,
    HISTOGRAM_EDGES_MS,
    UNKNOWN_MEMBER_ID,
)

__all__ = ["Damage", "Reference", "fmt", "percentile", "reference_tables", "source_lines"]

_TS = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$")
_LINE_END = re.compile(rb"\r\n|\n|\r")
_REQUIRED = ("v", "ts", "seq", "member_uid", "event", "group", "host", "pid", "client_id")
_INTS = ("v", "seq", "pid", "generation", "error_code")
_STRS = (
    "ts", "member_uid", "event", "group", "host", "client_id", "member_id", "instance_id",
    "state_before", "state_after", "reason", "leader", "error",
)  # fmt: skip
_FLOATS = ("hb_rtt_ms", "hb_late_ms")
_TPS = ("assigned", "revoked", "lost")


def fmt(us: int | None) -> str | None:
    """Microseconds since the epoch as RFC 3339 UTC with microseconds and ``Z``."""
    if us is None:
        return None
    return (
        datetime.fromtimestamp(us // 1_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        + f".{us % 1_000_000:06d}Z"
    )


def _parse_ts(text: str) -> int | None:
    if not _TS.match(text):
        return None
    try:
        dt = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return (int(dt.timestamp()) * 1_000_000) + dt.microsecond


def _secs(a: int, b: int) -> float:
    return (b - a) / 1_000_000.0


def percentile(values: list[float], p: float) -> float | None:
    """Type 7 (linear interpolation between closest ranks); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    h = (len(xs) - 1) * p
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def source_lines(paths: Iterable[str]) -> list[tuple[str, list[str]]]:
    """Every ``*.jsonl`` / ``*.jsonl.gz`` file under ``paths`` (Spark's rules: recursive,
    names starting with ``_`` or ``.`` skipped) as ``(file URI, lines)``."""
    files: list[str] = []
    for p in paths:
        if os.path.isfile(p):
            files.append(os.path.abspath(p))
            continue
        for root, dirs, names in os.walk(p):
            dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
            for name in names:
                if name.startswith(("_", ".")):
                    continue
                if name.endswith((".jsonl", ".jsonl.gz")):
                    files.append(os.path.abspath(os.path.join(root, name)))
    out: list[tuple[str, list[Any]]] = []
    for f in sorted(files):
        reason = None
        if f.endswith(".gz"):
            data, reason = _gunzip(f)
        else:
            with open(f, "rb") as handle:
                data = handle.read()
        parts = _LINE_END.split(data)
        lines: list[Any] = []
        if reason is not None:
            # Only the complete lines before the damage are read; the damage is the next.
            cut = parts.pop().decode("utf-8", "replace")
            lines.append(Damage(reason, (cut or None) if reason == "truncated" else None))
        elif parts and parts[-1] == b"":
            parts.pop()
        lines[:0] = [b.decode("utf-8", "replace") for b in parts]
        out.append(("file:" + f, lines))
    return out


@dataclass(frozen=True)
class Damage:
    """The end of a damaged gzip file's lines: why, and the incomplete line's text."""

    reason: str
    text: str | None


def _gunzip(path: str) -> tuple[bytes, str | None]:
    """The bytes that decompress, and None, ``truncated`` (the stream ends early) or
    ``corrupt_file`` (it does not decompress: what decompressed before the failing MiB of
    input, as the job's check counts it)."""
    out = []
    decoder = zlib.decompressobj(wbits=31)
    started = False
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            while chunk:
                started = True
                try:
                    out.append(decoder.decompress(chunk))
                except zlib.error:
                    return b"".join(out), "corrupt_file"
                chunk = b""
                if decoder.eof:
                    chunk, decoder, started = (
                        decoder.unused_data,
                        zlib.decompressobj(wbits=31),
                        False,
                    )
    return b"".join(out), ("truncated" if started else None)


def _typed(obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The schema's fields of ``obj`` and whether every present one had the right type."""
    ok = True
    ev: dict[str, Any] = {}
    for k in _INTS:
        v = obj.get(k)
        if v is None:
            ev[k] = None
        elif isinstance(v, int) and not isinstance(v, bool):
            ev[k] = v
        else:
            ev[k], ok = None, False
    for k in _STRS:
        v = obj.get(k)
        if v is None or isinstance(v, str):
            ev[k] = v
        else:
            ev[k], ok = None, False
    for k in _FLOATS:
        v = obj.get(k)
        if v is None:
            ev[k] = None
        elif isinstance(v, int | float) and not isinstance(v, bool):
            ev[k] = float(v)
        else:
            ev[k], ok = None, False
    for k in _TPS:
        v = obj.get(k)
        if v is None:
            ev[k] = None
        elif isinstance(v, list) and all(
            isinstance(i, dict)
            and (i.get("topic") is None or isinstance(i.get("topic"), str))
            and (
                i.get("partition") is None
                or (isinstance(i.get("partition"), int) and not isinstance(i["partition"], bool))
            )
            for i in v
        ):
            ev[k] = [(i.get("topic"), i.get("partition")) for i in v]
        else:
            ev[k], ok = None, False
    return ev, ok


@dataclass
class Reference:
    """Every table, as lists of dicts (timestamps as RFC 3339 strings)."""

    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def reference_tables(
    sources: list[tuple[str, list[Any]]],
    clock_skew_s: float = DEFAULT_CLOCK_SKEW_S,
    *,
    numbered_by_pos: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """All tables from ``sources`` (``(file, lines)``; with ``numbered_by_pos`` each line is
    ``(pos, text)`` and ``pos`` is its line number, as for Kafka)."""
    bad: list[dict[str, Any]] = []
    cands: list[tuple[dict[str, Any], str, int, int]] = []  # event, file, pos, line
    for file, lines in sources:
        n = sum(1 for item in lines if not isinstance(item, Damage))
        for i, item in enumerate(lines):
            if isinstance(item, Damage):
                bad.append(
                    {
                        "file": file,
                        "line": i + 1,
                        "reason": item.reason,
                        "member_uid": None,
                        "seq": None,
                        "text": item.text,
                    }
                )
                continue
            pos: int
            line: str
            number: int
            if numbered_by_pos:
                pos, line = item
                number = pos
            else:
                pos, line, number = i, item, i + 1
            reason, ev, json_ok = _classify_line(line)
            if reason is not None:
                if reason == "malformed" and not json_ok and not numbered_by_pos and number == n:
                    reason = "truncated"
                bad.append(
                    {
                        "file": file,
                        "line": number,
                        "reason": reason,
                        "member_uid": None,
                        "seq": None,
                        "text": line,
                    }
                )
            else:
                assert ev is not None
                cands.append((ev, file, pos, number))
    by_member: dict[str, list[tuple[dict[str, Any], str, int, int]]] = defaultdict(list)
    for c in cands:
        by_member[c[0]["member_uid"]].append(c)
    events: dict[str, list[dict[str, Any]]] = {}
    dups = ooo = 0
    for uid, rows in by_member.items():
        rows.sort(key=lambda r: (r[0]["seq"], r[1], r[2]))
        kept = []
        prev_seq = None
        max_ts: int | None = None
        for ev, file, _pos, number in rows:
            reason = None
            if prev_seq is not None and ev["seq"] == prev_seq:
                reason = "duplicate"
            elif max_ts is not None and ev["ts"] < max_ts:
                reason = "out_of_order"
            prev_seq = ev["seq"]
            max_ts = ev["ts"] if max_ts is None else max(max_ts, ev["ts"])
            if reason:
                dups += reason == "duplicate"
                ooo += reason == "out_of_order"
                bad.append(
                    {
                        "file": file,
                        "line": number,
                        "reason": reason,
                        "member_uid": uid,
                        "seq": ev["seq"],
                        "text": None,
                    }
                )
            else:
                kept.append(ev)
        events[uid] = kept
    return _metrics(events, bad, dups, ooo, clock_skew_s)


def _classify_line(line: str) -> tuple[str | None, dict[str, Any] | None, bool]:
    if line.strip() == "":
        return "malformed", None, True
    try:
        obj = json.loads(line)
    except ValueError:
        return "malformed", None, False
    if not isinstance(obj, dict):
        return "malformed", None, False
    ev, ok = _typed(obj)
    if ev["v"] is not None and ev["v"] != 1:
        return "unknown_version", ev, ok
    if not ok or any(ev[k] is None for k in _REQUIRED):
        return "malformed", ev, ok
    ts = _parse_ts(ev["ts"])
    if ts is None:
        return "malformed", ev, ok
    ev["ts"] = ts
    return None, ev, True


def _count(evs: list[dict[str, Any]], pred: Any) -> int:
    return sum(1 for e in evs if pred(e))


def _members(events: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    out = {}
    for uid, evs in events.items():
        if not evs:
            continue
        last = evs[-1]
        ids = [e["member_id"] for e in evs if e["member_id"] not in (None, "")]
        inst = [e["instance_id"] for e in evs if e["instance_id"] is not None]
        hb_failed = [e for e in evs if e["event"] == "member.heartbeat_failed"]
        out[uid] = {
            "member_uid": uid,
            "group": last["group"],
            "host": last["host"],
            "pid": last["pid"],
            "member_id": ids[-1] if ids else None,
            "instance_id": inst[-1] if inst else None,
            "first_ts": min(e["ts"] for e in evs),
            "last_ts": max(e["ts"] for e in evs),
            "closed": last["event"] in EVENT_CLOSED_NAMES,
            "joins": _count(evs, lambda e: e["event"] == "member.joined"),
            "leaves": _count(evs, lambda e: e["event"] == "member.leaving"),
            "session_expiries": _count(hb_failed, lambda e: e["error_code"] == UNKNOWN_MEMBER_ID),
            "poll_timeouts": _count(evs, lambda e: e["event"] == "member.poll_timeout"),
            "fencings": _count(
                evs,
                lambda e: (
                    e["event"] in ("member.heartbeat_failed", "member.fatal_error")
                    and e["error_code"] == FENCED_INSTANCE_ID
                ),
            ),
            "lease_expiries": _count(evs, lambda e: e["event"] == "member.lease_expired"),
        }
    return out


_ACTIONS = {
    "member.partitions_assigned": ("assigned", "assigned"),
    "member.partitions_revoked": ("revoked", "revoked"),
    "member.partitions_lost": ("lost", "lost"),
}


def _ownership(
    events: dict[str, list[dict[str, Any]]], mem: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    rows = []
    for uid, evs in events.items():
        m = mem.get(uid)
        if m is None:
            continue
        open_: dict[tuple[str, int], dict[str, Any]] = {}
        for e in evs:
            if e["event"] not in _ACTIONS:
                continue
            field_, action = _ACTIONS[e["event"]]
            for topic, partition in e[field_] or []:
                if topic is None or partition is None:
                    continue
                key = (topic, partition)
                if action == "assigned":
                    if key not in open_:
                        open_[key] = {
                            "from_ts": e["ts"],
                            "member_id": e["member_id"],
                            "from_seq": e["seq"],
                        }
                elif key in open_:
                    st = open_.pop(key)
                    rows.append(_own_row(m, key, st, e["ts"], action))
        final = "closed" if m["closed"] else "crash"
        for key, st in open_.items():
            rows.append(_own_row(m, key, st, m["last_ts"], final))
    return rows


def _own_row(
    m: dict[str, Any], key: tuple[str, int], st: dict[str, Any], to: int, end: str
) -> dict[str, Any]:
    return {
        "group": m["group"],
        "member_uid": m["member_uid"],
        "member_id": st["member_id"],
        "host": m["host"],
        "topic": key[0],
        "partition": key[1],
        "from_ts": st["from_ts"],
        "to_ts": to,
        "seconds": _secs(st["from_ts"], to),
        "end": end,
        "from_seq": st["from_seq"],
    }


def _generations(events: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    acc: dict[tuple[str, int], dict[str, Any]] = {}
    for uid, evs in events.items():
        for e in evs:
            g = e["generation"]
            if g is None or g < 0:
                continue
            a = acc.setdefault(
                (e["group"], g), {"first": e["ts"], "last": e["ts"], "leaders": [], "m": set()}
            )
            a["first"] = min(a["first"], e["ts"])
            a["last"] = max(a["last"], e["ts"])
            a["m"].add(uid)
            if e["event"] == "member.joined" and e["leader"] is not None:
                a["leaders"].append(e["leader"])
    return [
        {
            "group": k[0],
            "generation": k[1],
            "first_ts": a["first"],
            "last_ts": a["last"],
            "leader": max(a["leaders"]) if a["leaders"] else None,
            "members": len(a["m"]),
        }
        for k, a in acc.items()
    ]


def _rebalances(
    events: dict[str, list[dict[str, Any]]], mem: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    intervals: list[dict[str, Any]] = []
    departed: list[dict[str, Any]] = []
    settles: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for uid, evs in events.items():
        inside: dict[str, Any] | None = None
        prev: str | None = None
        for e in evs:
            if e["event"] != "member.state_changed" or e["state_after"] is None:
                continue
            stable = e["state_after"] == "STABLE"
            in_before = prev is not None and prev != "STABLE"
            if not stable and not in_before:
                inside = {
                    "group": e["group"],
                    "member_uid": uid,
                    "seq": e["seq"],
                    "start_ts": e["ts"],
                    "reason": e["reason"],
                }
            elif stable and in_before:
                assert inside is not None
                intervals.append({**inside, "end_ts": e["ts"], "ended_stable": True})
                settles[e["group"]].append((e["ts"], uid))
                inside = None
            prev = e["state_after"]
        if inside is not None:
            departed.append(inside)
    for d in departed:
        later = [
            ts for ts, who in settles[d["group"]] if who != d["member_uid"] and ts >= d["start_ts"]
        ]
        if later:
            intervals.append({**d, "end_ts": min(later), "ended_stable": True})
        else:
            intervals.append(
                {**d, "end_ts": mem[d["member_uid"]]["last_ts"], "ended_stable": False}
            )
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for iv in intervals:
        by_group[iv["group"]].append(iv)
    rows = []
    for group, ivs in by_group.items():
        ivs.sort(key=lambda r: (r["start_ts"], r["member_uid"], r["seq"]))
        clusters: list[list[dict[str, Any]]] = []
        max_end: int | None = None
        for iv in ivs:
            if max_end is None or iv["start_ts"] > max_end:
                clusters.append([])
            clusters[-1].append(iv)
            max_end = iv["end_ts"] if max_end is None else max(max_end, iv["end_ts"])
        for i, cl in enumerate(clusters, start=1):
            start = min(r["start_ts"] for r in cl)
            end = max(r["end_ts"] for r in cl)
            first = min(cl, key=lambda r: (r["start_ts"], r["member_uid"], r["seq"]))
            rows.append(
                {
                    "group": group,
                    "rebalance_id": i,
                    "start_ts": start,
                    "end_ts": end,
                    "duration_s": _secs(start, end),
                    "reason": first["reason"],
                    "members": len({r["member_uid"] for r in cl}),
                    "complete": any(r["ended_stable"] for r in cl if r["end_ts"] == end),
                }
            )
    return rows


def _rebalance_stats(rebs: list[dict[str, Any]], groups: set[str]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        mine = [r for r in rebs if r["group"] == g]
        done = [r["duration_s"] for r in mine if r["complete"]]
        rows.append(
            {
                "group": g,
                "rebalances": len(mine),
                "p50_s": percentile(done, 0.5),
                "p95_s": percentile(done, 0.95),
                "max_s": max(done) if done else None,
            }
        )
    return rows


def _unavailability(
    own: list[dict[str, Any]], rebs: list[dict[str, Any]], group_last: dict[str, int]
) -> list[dict[str, Any]]:
    by_key: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for o in own:
        by_key[(o["group"], o["topic"], o["partition"])].append(o)
    gaps = []
    for key, ivs in by_key.items():
        ivs.sort(key=lambda r: (r["from_ts"], r["to_ts"], r["member_uid"]))
        best: tuple[int, str] | None = None  # (to_ts, member_uid) of the latest end so far
        for iv in ivs:
            if best is not None and iv["from_ts"] > best[0]:
                gaps.append((key, best[0], iv["from_ts"], best[1], iv["member_uid"]))
            cand = (iv["to_ts"], iv["member_uid"])
            best = cand if best is None else max(best, cand)
        assert best is not None
        if group_last[key[0]] > best[0]:
            gaps.append((key, best[0], group_last[key[0]], best[1], None))
    rows = []
    for (group, topic, partition), fr, to, prev, nxt in gaps:
        ids = [
            r["rebalance_id"]
            for r in rebs
            if r["group"] == group and r["start_ts"] <= to and r["end_ts"] >= fr
        ]
        rows.append(
            {
                "group": group,
                "topic": topic,
                "partition": partition,
                "rebalance_id": min(ids) if ids else None,
                "from_ts": fr,
                "to_ts": to,
                "seconds": _secs(fr, to),
                "previous_owner": prev,
                "next_owner": nxt,
            }
        )
    return rows


def _unavailability_by_rebalance(una: list[dict[str, Any]]) -> list[dict[str, Any]]:
    acc: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for u in una:
        acc[(u["group"], u["rebalance_id"], u["topic"])].append(u)
    return [
        {
            "group": k[0],
            "rebalance_id": k[1],
            "topic": k[2],
            "partition_seconds": math.fsum(u["seconds"] for u in us),
            "partitions": len({u["partition"] for u in us}),
        }
        for k, us in acc.items()
    ]


def _churn(mem: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for m in mem.values():
        evictions = m["session_expiries"] + m["poll_timeouts"]
        crashes = 0 if m["closed"] else 1
        rows.append(
            {
                "group": m["group"],
                "member_uid": m["member_uid"],
                "member_id": m["member_id"],
                "instance_id": m["instance_id"],
                "host": m["host"],
                "pid": m["pid"],
                "joins": m["joins"],
                "leaves": m["leaves"],
                "evictions": evictions,
                "fencings": m["fencings"],
                "lease_expiries": m["lease_expiries"],
                "crashes": crashes,
                "first_ts": m["first_ts"],
                "last_ts": m["last_ts"],
                "flaps": m["joins"] + evictions + m["fencings"] + crashes,
            }
        )
    return rows


_HB = ("member.heartbeat_ok", "member.heartbeat_failed")


def _heartbeats(
    events: dict[str, list[dict[str, Any]]], mem: dict[str, dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    health, failures = [], []
    hist: dict[tuple[str, str, int], int] = defaultdict(int)
    for uid, m in mem.items():
        evs = events[uid]
        hbs = [e for e in evs if e["event"] in _HB]
        failed = [e for e in hbs if e["event"] == "member.heartbeat_failed"]
        stalls = [e for e in evs if e["event"] == "heartbeat.late"]
        rtt = [e["hb_rtt_ms"] for e in hbs if e["hb_rtt_ms"] is not None]
        late = [e["hb_late_ms"] for e in hbs if e["hb_late_ms"] is not None]
        stall_ms = [e["hb_late_ms"] for e in stalls if e["hb_late_ms"] is not None]
        health.append(
            {
                "group": m["group"],
                "member_uid": uid,
                "host": m["host"],
                "heartbeats": len(hbs),
                "rtt_p50_ms": percentile(rtt, 0.5),
                "rtt_p99_ms": percentile(rtt, 0.99),
                "late_p50_ms": percentile(late, 0.5),
                "late_p99_ms": percentile(late, 0.99),
                "failures": len(failed),
                "session_expiries": sum(1 for e in failed if e["error_code"] == UNKNOWN_MEMBER_ID),
                "stalls": len(stalls),
                "max_stall_ms": max(stall_ms) if stall_ms else None,
            }
        )
        by_error: dict[str, int] = defaultdict(int)
        for e in failed:
            label = (
                e["error"]
                if e["error"] is not None
                else (f"code {e['error_code']}" if e["error_code"] is not None else "unknown")
            )
            by_error[label] += 1
        failures += [
            {"group": m["group"], "member_uid": uid, "error": k, "count": v}
            for k, v in by_error.items()
        ]
        for metric, values in (("rtt", rtt), ("late", late)):
            for v in values:
                hist[(m["group"], metric, _bucket(v))] += 1
    n = len(HISTOGRAM_EDGES_MS)
    histogram = [
        {
            "group": g,
            "metric": metric,
            "bucket_lo_ms": HISTOGRAM_EDGES_MS[b],
            "bucket_hi_ms": HISTOGRAM_EDGES_MS[b + 1] if b + 1 < n else None,
            "count": c,
        }
        for (g, metric, b), c in hist.items()
    ]
    return health, failures, histogram


def _bucket(v: float) -> int:
    index = 0
    for i, edge in enumerate(HISTOGRAM_EDGES_MS[1:], start=1):
        if v >= edge:
            index = i
    return index


def _overlaps(own: list[dict[str, Any]], skew: float) -> list[dict[str, Any]]:
    by_key: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for o in own:
        by_key[(o["group"], o["topic"], o["partition"])].append(o)
    rows = []
    for (group, topic, partition), ivs in by_key.items():
        ivs.sort(key=lambda r: (r["from_ts"], r["member_uid"], r["from_seq"]))
        for j, b in enumerate(ivs):
            for a in ivs[:j]:
                if a["member_uid"] == b["member_uid"] or a["to_ts"] <= b["from_ts"]:
                    continue
                end = min(a["to_ts"], b["to_ts"])
                secs = _secs(b["from_ts"], end)
                if secs > skew:
                    rows.append(
                        {
                            "group": group,
                            "topic": topic,
                            "partition": partition,
                            "member_a": a["member_uid"],
                            "member_b": b["member_uid"],
                            "host_a": a["host"],
                            "host_b": b["host"],
                            "from_ts": b["from_ts"],
                            "to_ts": end,
                            "seconds": secs,
                            "skew_allowance_s": float(skew),
                        }
                    )
    return rows


def _metrics(
    events: dict[str, list[dict[str, Any]]],
    bad: list[dict[str, Any]],
    dups: int,
    ooo: int,
    skew: float,
) -> dict[str, list[dict[str, Any]]]:
    mem = _members(events)
    own = _ownership(events, mem)
    rebs = _rebalances(events, mem)
    groups = {m["group"] for m in mem.values()}
    group_last: dict[str, int] = {}
    for m in mem.values():
        group_last[m["group"]] = max(group_last.get(m["group"], m["last_ts"]), m["last_ts"])
    una = _unavailability(own, rebs, group_last)
    health, failures, histogram = _heartbeats(events, mem)
    n_events = sum(len(v) for v in events.values())
    tables: dict[str, list[dict[str, Any]]] = {
        "summary": [
            {
                "events": n_events,
                "bad_records": len(bad),
                "duplicates": dups,
                "out_of_order": ooo,
                "groups": len(groups),
                "members": len(mem),
                "first_ts": min((m["first_ts"] for m in mem.values()), default=None),
                "last_ts": max((m["last_ts"] for m in mem.values()), default=None),
            }
        ],
        "generations": _generations(events),
        "ownership": [{k: v for k, v in o.items() if k != "from_seq"} for o in own],
        "rebalances": rebs,
        "rebalance_stats": _rebalance_stats(rebs, groups),
        "unavailability": una,
        "unavailability_by_rebalance": _unavailability_by_rebalance(una),
        "churn": _churn(mem),
        "heartbeat_health": health,
        "heartbeat_failures": failures,
        "heartbeat_histogram": histogram,
        "overlaps": _overlaps(own, skew),
        "bad_records": bad,
    }
    for rows in tables.values():
        for row in rows:
            for k in ("first_ts", "last_ts", "from_ts", "to_ts", "start_ts", "end_ts"):
                if k in row:
                    row[k] = fmt(row[k])
    return tables
