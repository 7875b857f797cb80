"""Offset commits and fetches for a :class:`GroupMember`, with retries until a deadline.

The decisions (pre-checks, what an answer means, what it does to the membership) are the
sans-I/O rules of :mod:`kgroup._core._offsets`; this module only sends, waits and retries:

- ``commit_offsets`` is Java's ``commitSync``: retriable failures (a coordinator that is
  loading, moved or unreachable) are retried with exponential backoff until ``timeout``;
  everything else raises at once. The generation is re-checked before every attempt, so a
  retry never carries offsets into a generation the member was not in when it was asked.
- ``fetch_committed`` is ``committed()``: it retries UNSTABLE_OFFSET_COMMIT and coordinator
  failures the same way.

Both work in the default and the isolated mode: the core is touched only through
``member._core_call`` and requests go through ``member._coordinator_request``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, assert_never

from .._core._consumer_protocol import TopicPartition
from .._core._kip848_offsets import (
    commit_request_848,
    fetch_request_848,
    on_commit_response_848,
    on_fetch_response_848,
)
from .._core._messages import OffsetCommitRequest, OffsetFetchRequest
from .._core._offsets import (
    Done,
    Fail,
    OffsetAndMetadata,
    Retry,
    Verdict,
    commit_request,
    fetch_request,
    on_commit_failed,
    on_commit_response,
    on_fetch_response,
)
from .._core._timers import ExponentialBackoff
from .._errors import CoordinatorError, KGroupError, OffsetsError, RemoteProtocolError
from .._log import EventName

if TYPE_CHECKING:
    from ._member import GroupMember

__all__ = ["OffsetAndMetadata", "commit_offsets", "fetch_committed"]


class _Attempts:
    """Deadline and backoff bookkeeping of one call (times in ms on the member's clock)."""

    def __init__(self, member: GroupMember, api: str, timeout: float | None) -> None:
        config = member.config
        self.member = member
        self.api = api
        budget = config.request_timeout_ms if timeout is None else max(0.0, timeout) * 1000.0
        self.deadline = member._now() + budget
        self.budget = budget
        self.attempts = 0
        self.last_reason = ""
        self._backoff = ExponentialBackoff(config.retry_backoff_ms, config.retry_backoff_max_ms)

    def remaining(self) -> float:
        return self.deadline - self.member._now()

    def request_timeout(self) -> int:
        """A request may use what is left of the call, at most request_timeout_ms."""
        return max(1, int(min(self.remaining(), self.member.config.request_timeout_ms)))

    def timed_out(self) -> OffsetsError:
        return OffsetsError(
            f"{self.api} for group {self.member.config.group_id!r} did not succeed within "
            f"{self.budget:.0f} ms ({self.attempts} attempt(s); last: {self.last_reason})",
            api=self.api,
        )

    async def ready(self) -> None:
        """Before an attempt: make sure a coordinator is known, or start looking for one."""
        member = self.member
        if member._core_call(lambda core: core.coordinator) is not None:
            return
        # The shared lookup task (on the coordinator loop in isolated mode); it honours the
        # lookup's own backoff when it fails.
        await member._await_coordinator_known(self.deadline)

    def fail(self, error: KGroupError, **fields: Any) -> KGroupError:
        """Log a failed call (``offsets.commit_failed`` / ``offsets.fetch_failed``) and
        return its error for the caller to raise."""
        event: EventName = (
            "offsets.commit_failed" if self.api == "OffsetCommit" else "offsets.fetch_failed"
        )
        self.member._shared.announce(
            event,
            group=self.member.config.group_id,
            error=type(error).__name__,
            message=str(error),
            **fields,
        )
        return error

    async def back_off(self, retry: Retry) -> None:
        """Log the retriable failure and sleep its backoff (never past the deadline);
        raise the timeout error once the call's deadline has passed."""
        self.last_reason = retry.reason
        if self.remaining() <= 0:
            raise self.timed_out()
        self.member._shared.announce(
            "offsets.retry",
            api=self.api,
            group=self.member.config.group_id,
            reason=retry.reason,
            attempt=self.attempts,
        )
        pause = min(self._backoff.backoff(self.attempts - 1), max(0.0, self.remaining()))
        await asyncio.sleep(pause / 1000.0)


async def commit_offsets(
    member: GroupMember,
    offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
    *,
    timeout: float | None = None,
) -> None:
    """``GroupMember.commit_offsets`` (see there): Java's ``commitSync``."""
    attempts = _Attempts(member, "OffsetCommit", timeout)
    consumer = member.config.group_protocol == "consumer"
    # The consumer-protocol rules take that protocol's core, which _core_call then passes.
    make: Callable[..., OffsetCommitRequest | Done] = commit_request
    judge: Callable[..., Verdict] = on_commit_response
    if consumer:
        judge = on_commit_response_848

        def make(core: Any, offsets: Mapping[TopicPartition, OffsetAndMetadata | int]) -> Any:
            return commit_request_848(core, offsets, retry=attempts.attempts > 0)

    while True:
        prepared = member._core_call(lambda core: (make(core, offsets), core.generation))
        request, sent = prepared
        if isinstance(request, Done):
            return
        if attempts.remaining() <= 0:
            raise attempts.timed_out()
        attempts.attempts += 1
        await attempts.ready()
        try:
            response = await member._coordinator_request(request, attempts.request_timeout())
        except (CoordinatorError, RemoteProtocolError) as exc:
            reason = str(exc)
            verdict: Verdict = member._core_call(partial(on_commit_failed, reason=reason))
        else:
            verdict = member._core_call(partial(judge, sent=sent, response=response))
        match verdict:
            case Done():
                member._shared.announce(
                    "offsets.committed",
                    group=request.group_id,
                    generation=sent.generation_id,
                    partitions=len(request.partitions),
                    # every partition named by its topic id: v10 where the broker has it
                    by_topic_id=bool(request.topic_ids),
                )
                return
            case Fail(error=error):
                raise attempts.fail(error, generation=sent.generation_id)
            case Retry():
                await attempts.back_off(verdict)
            case _:
                assert_never(verdict)


async def fetch_committed(
    member: GroupMember,
    partitions: Iterable[TopicPartition],
    *,
    timeout: float | None = None,
) -> dict[TopicPartition, OffsetAndMetadata | None]:
    """``GroupMember.fetch_committed`` (see there): Java's ``committed()``."""
    wanted = list(dict.fromkeys(partitions))
    consumer = member.config.group_protocol == "consumer"
    make_fetch: Callable[..., OffsetFetchRequest] = fetch_request
    judge_fetch: Callable[..., tuple[Verdict, dict[TopicPartition, Any]]] = on_fetch_response
    if consumer:
        make_fetch, judge_fetch = fetch_request_848, on_fetch_response_848
    request = member._core_call(lambda core: make_fetch(core, wanted))
    if not request.partitions:
        return {}
    attempts = _Attempts(member, "OffsetFetch", timeout)
    while True:
        if attempts.remaining() <= 0:
            raise attempts.timed_out()
        attempts.attempts += 1
        await attempts.ready()
        try:
            response = await member._coordinator_request(request, attempts.request_timeout())
        except (CoordinatorError, RemoteProtocolError) as exc:
            verdict: Verdict = member._core_call(
                partial(on_commit_failed, reason=str(exc), api="OffsetFetch")
            )
            result: dict[TopicPartition, OffsetAndMetadata | None] = {}
        else:
            verdict, result = member._core_call(partial(judge_fetch, response=response))
        match verdict:
            case Done():
                missing = [tp for tp in wanted if tp not in result]
                if missing:
                    raise OffsetsError(
                        f"OffsetFetch for group {request.group_id!r} did not answer for "
                        + ", ".join(str(tp) for tp in missing),
                        api="OffsetFetch",
                    )
                return {tp: result[tp] for tp in wanted}
            case Fail(error=error):
                raise attempts.fail(error)
            case Retry():
                await attempts.back_off(verdict)
            case _:
                assert_never(verdict)
