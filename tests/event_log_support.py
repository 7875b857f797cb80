"""What the event log's tests share: reading a log directory in order, validating every
line against the shipped schema (``kgroup/events/schema.json``, with ``jsonschema``), and
the invariants every member stream must keep."""

from __future__ import annotations

import errno
import io
import itertools
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema

from kgroup.events import load_schema

_VALIDATOR = jsonschema.Draft202012Validator(load_schema())
_INDEX = re.compile(r"^(?P<base>.*?)(?:\.(?P<index>\d+))?\.jsonl$")

#: The top-level fields the schema defines; a writer adds no others.
SCHEMA_FIELDS = frozenset(load_schema()["properties"])


def log_files(directory: Path) -> list[Path]:
    """Every ``*.jsonl`` file under ``directory``, each member's files in rotation order."""

    def key(path: Path) -> tuple[str, int]:
        match = _INDEX.match(path.name)
        assert match is not None, path
        return match.group("base"), int(match.group("index") or 0)

    return sorted(directory.rglob("*.jsonl"), key=key)


def parse(text: str) -> list[dict[str, Any]]:
    """Lines of a log (each newline-terminated), as objects."""
    assert text == "" or text.endswith("\n"), "the last line is not terminated"
    return [json.loads(line) for line in text.splitlines()]


def read_dir(directory: Path) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for path in log_files(directory):
        lines.extend(parse(path.read_text(encoding="utf-8")))
    return lines


def validate(lines: Iterable[dict[str, Any]]) -> None:
    """Every line is valid against the schema and has no field the schema lacks."""
    for line in lines:
        errors = sorted(_VALIDATOR.iter_errors(line), key=str)
        assert not errors, f"{line}: {errors[0].message}"
        assert set(line) <= SCHEMA_FIELDS, set(line) - SCHEMA_FIELDS


def streams(lines: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Lines per ``member_uid``, in the order written."""
    out: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        out.setdefault(line["member_uid"], []).append(line)
    return out


def check_stream(stream: list[dict[str, Any]], *, closed: bool = True, drops: bool = False) -> None:
    """One member's lines: seq 0, 1, 2 ... in file order with no gap, ts never going back,
    ``eventlog.started`` first (unless ``drops``) and (``closed``) either ``member.closed`` then
    ``eventlog.stopped`` last, or ``member.aborted`` last (an abort reads as a crash); no
    ``eventlog.dropped`` line unless ``drops``."""
    assert [line["seq"] for line in stream] == list(range(len(stream)))
    stamps = [line["ts"] for line in stream]
    assert stamps == sorted(stamps)
    if not drops:
        assert stream[0]["event"] == "eventlog.started"
        assert not [line for line in stream if line["event"] == "eventlog.dropped"]
    if closed:
        events = [line["event"] for line in stream]
        assert events[-1] == "member.aborted" or events[-2:] == [
            "member.closed",
            "eventlog.stopped",
        ], events[-2:]
        assert events.count("eventlog.stopped") <= 1


def partitions(items: list[dict[str, Any]] | None) -> frozenset[tuple[str, int]]:
    return frozenset((i["topic"], i["partition"]) for i in items or ())


def callbacks_in_log(stream: list[dict[str, Any]]) -> list[tuple[str, frozenset[tuple[str, int]]]]:
    """(callback name, partitions) of the stream's three partition events, in order."""
    names = {
        "member.partitions_assigned": ("on_partitions_assigned", "assigned"),
        "member.partitions_revoked": ("on_partitions_revoked", "revoked"),
        "member.partitions_lost": ("on_partitions_lost", "lost"),
    }
    out = []
    for line in stream:
        if line["event"] in names:
            callback, field = names[line["event"]]
            out.append((callback, partitions(line[field])))
    return out


def check_owned(stream: list[dict[str, Any]]) -> frozenset[tuple[str, int]]:
    """``owned`` on each partition event is what the events so far leave the member;
    returns what the last one leaves."""
    owned: frozenset[tuple[str, int]] = frozenset()
    for line in stream:
        event = line["event"]
        if event == "member.partitions_assigned":
            owned |= partitions(line["assigned"])
        elif event == "member.partitions_revoked":
            owned -= partitions(line["revoked"])
        elif event == "member.partitions_lost":
            owned -= partitions(line["lost"])
        else:
            continue
        assert partitions(line["owned"]) == owned, line
    return owned


def check_no_overlap(lines: Iterable[dict[str, Any]]) -> int:
    """No partition claimed by two members at once, by the contract's rules: a claim runs
    from the ``ts`` of the assignment that gives it to the ``ts`` of the revoke or loss
    that takes it, or to the member's last line. (One host: no clock skew to allow for.)
    Returns how many claims there were."""
    claims: dict[tuple[str, int], list[tuple[str, str, str]]] = {}
    for uid, stream in streams(lines).items():
        open_since: dict[tuple[str, int], str] = {}
        for line in stream:
            event = line["event"]
            if event == "member.partitions_assigned":
                for tp in partitions(line["assigned"]):
                    open_since.setdefault(tp, line["ts"])
            elif event in ("member.partitions_revoked", "member.partitions_lost"):
                field = "revoked" if event == "member.partitions_revoked" else "lost"
                for tp in partitions(line[field]):
                    if tp in open_since:
                        claims.setdefault(tp, []).append((open_since.pop(tp), line["ts"], uid))
        for tp, since in open_since.items():
            claims.setdefault(tp, []).append((since, stream[-1]["ts"], uid))
    for tp, spans in claims.items():
        spans.sort()
        for (_, end, first), (start, _, second) in itertools.pairwise(spans):
            assert end <= start, f"{tp} claimed by {first} until {end} and {second} from {start}"
    return sum(len(spans) for spans in claims.values())


class FullDisk(io.TextIOBase):
    """A stream on a full disk: every write raises OSError(ENOSPC)."""

    def __init__(self) -> None:
        self.attempts = 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.attempts += 1
        raise OSError(errno.ENOSPC, "No space left on device")
