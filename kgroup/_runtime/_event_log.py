"""The member's event log (``GroupConfig.event_log`` / ``event_log_topic``), started and
ended with the member: :class:`kgroup.events._recorder.MemberRecorder` reads the member's
generation and lease through the shared state, under its lock."""

from __future__ import annotations

from ._shared import Shared

__all__ = ["close_event_log", "open_event_log"]


def open_event_log(shared: Shared) -> None:
    """Start the event log; :func:`close_event_log` ends it (``close()`` / ``abort()``)."""
    from ..events._recorder import MemberRecorder  # only members with an event log need it

    def generation() -> tuple[str, int]:
        core = shared.core
        if core is None:
            return "", -1
        g = core.generation
        return g.member_id, g.generation_id

    def valid_until() -> float | None:
        core = shared.core
        if core is None:
            return None
        with shared.lock:
            return core.valid_until

    recorder = MemberRecorder(
        shared.config,
        protocol_type=shared.embedding.protocol_type,
        now_ms=shared.now,
        generation=generation,
        valid_until=valid_until,
    )
    recorder.start()
    shared.recorder = recorder


async def close_event_log(shared: Shared, *, stopped: bool = True) -> None:
    """End the event log (``eventlog.stopped`` last unless ``stopped`` is False: after an
    abort the stream reads as a crash) and wait for its threads."""
    recorder = shared.recorder
    if recorder is not None:
        await recorder.aclose(stopped=stopped)
