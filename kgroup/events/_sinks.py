"""Where the event log's lines go: a directory of size-rotated files, or a text stream.

A sink is written by one thread only (the writer's). :meth:`write` takes a chunk of whole
lines and either writes all of it or raises; a directory sink undoes a partial write (the
file is truncated back), so a failed chunk never leaves half a line behind. A stream
cannot be truncated: what a raising stream did with the chunk is up to it.

File names (the schema contract, ``docs/guide/event-log.md``)::

    <dir>/kgroup-events-<host>-<pid>-<start>.jsonl      the first file
    <dir>/kgroup-events-<host>-<pid>-<start>.1.jsonl    after the first rotation, then .2 ...

``<start>`` is the UTC time the log was opened, ``20261126T070102123456Z``: unique per
member object even with several members in one process (a name already taken moves the
time on by a microsecond).
"""

from __future__ import annotations

import errno
import os
import re
import time
from pathlib import Path
from typing import Protocol, TextIO

__all__ = ["DEFAULT_MAX_BYTES", "DirectorySink", "Sink", "StreamSink", "log_file_name"]

#: Rotate a directory log's file when the next chunk would take it past this size.
DEFAULT_MAX_BYTES = 64 * 1024 * 1024

#: The most a single write hands over (rotation is checked between chunks).
_CHUNK_BYTES = 64 * 1024

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class Sink(Protocol):
    """A line destination (see the module docstring)."""

    #: What reports name the sink by: a directory, ``"stream"``; never a secret.
    @property
    def name(self) -> str: ...

    #: The largest chunk :meth:`write` should be given.
    @property
    def chunk_bytes(self) -> int: ...

    def write(self, data: str) -> None:
        """Write whole lines, all of them, or raise."""

    def close(self) -> None:
        """Flush and release what the sink opened (never raises)."""


def _stamp(ns: int) -> str:
    seconds, rest = divmod(ns, 1_000_000_000)
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds)) + f"{rest // 1000:06d}Z"


def log_file_name(host: str, pid: int, started_ns: int, index: int = 0) -> str:
    """The name of a log file: index 0 is the first, 1 the first rotation, ..."""
    safe_host = _UNSAFE.sub("_", host) or "host"
    suffix = ".jsonl" if index == 0 else f".{index}.jsonl"
    return f"kgroup-events-{safe_host}-{pid}-{_stamp(started_ns)}{suffix}"


class DirectorySink:
    """Files in ``directory`` (created when missing), rotated by size."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        host: str,
        pid: int,
        started_ns: int,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.directory = Path(directory)
        self._host = host
        self._pid = pid
        self._started_ns = started_ns
        self._max_bytes = max_bytes
        self.chunk_bytes = max(1, min(_CHUNK_BYTES, max_bytes // 4))
        self._fd: int | None = None
        self._size = 0  # bytes in the open file that are whole lines
        self._index = 0  # of the open (or next) file
        self._named = False  # the start stamp is chosen (the first file was created)
        #: Every file opened, in order.
        self.paths: list[Path] = []

    @property
    def name(self) -> str:
        return str(self.directory)

    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        while True:
            path = self.directory / log_file_name(
                self._host, self._pid, self._started_ns, self._index
            )
            try:
                fd = os.open(path, flags, 0o644)
            except FileExistsError:
                if self._named:
                    self._index += 1
                else:
                    self._started_ns += 1_000  # another member started this microsecond
                continue
            break
        self._named = True
        self._fd = fd
        self._size = 0
        self.paths.append(path)

    def _rotate(self) -> None:
        self._close_fd()
        self._index += 1
        self._open()

    def write(self, data: str) -> None:
        payload = data.encode("utf-8")
        if self._fd is None:
            self._open()
        elif self._size and self._size + len(payload) > self._max_bytes:
            self._rotate()
        fd = self._fd
        assert fd is not None
        view = memoryview(payload)
        done = 0
        try:
            while done < len(payload):
                n = os.write(fd, view[done:])
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                done += n
        except OSError:
            try:  # no half line: back to the last whole one
                os.ftruncate(fd, self._size)
            except OSError:
                pass
            raise
        self._size += len(payload)

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        try:
            os.close(fd)
        except OSError:
            pass

    def close(self) -> None:
        self._close_fd()


class StreamSink:
    """A writable text stream the application owns: written and flushed, never closed."""

    chunk_bytes = _CHUNK_BYTES

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    @property
    def name(self) -> str:
        name = getattr(self._stream, "name", None)
        return name if isinstance(name, str) else type(self._stream).__name__

    def write(self, data: str) -> None:
        self._stream.write(data)
        flush = getattr(self._stream, "flush", None)
        if flush is not None:
            flush()

    def close(self) -> None:
        try:
            flush = getattr(self._stream, "flush", None)
            if flush is not None:
                flush()
        except Exception:  # the stream's own problem; nothing is pending on our side
            pass
