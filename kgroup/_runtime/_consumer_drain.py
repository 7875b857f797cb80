"""How a :class:`~kgroup.GroupConsumer` keeps delivering while ``close()`` hands its
partitions off, and what counts as processed when they go.

``close()`` with the handoff (``GroupMember.close``: a cooperative rejoin marked as leaving,
or a consumer-protocol member waiting for the group's next heartbeat tick) keeps the
member's partitions for up to a heartbeat interval. A consumer whose records are fetched by
another task than the one closing it (a worker task, the FastAPI integration) then *drains*:
that task's fetch calls go on handing out records of the partitions still owned, without
polling the member (close() drives it meanwhile), until the first revoke or lost callback.
From then on nothing more is handed out, as in any close.

The batch in hand. A fetch call's records count as processed once the task that got them
makes its next fetch call (the delivery guarantee's rule). A revoke that runs in another
task (close()'s) first waits for the fetching task to come back, or end, for at most
``_batch_wait`` seconds; if it has not by then, the revoke commits each of those partitions
at its batch's first record, so the batch is delivered again after the handoff rather than
skipped (``consumer.batch_unfinished``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from .._core._consumer_protocol import TopicPartition
from .._log import logger
from ._consumer_commits import _ConsumerCommits

__all__: list[str] = []


class _ConsumerDrain(_ConsumerCommits):
    """The drain layer of :class:`~kgroup.GroupConsumer` (attributes set in its
    ``__init__``)."""

    _closing: bool
    #: close() waits in a handoff while another task fetches: that task keeps delivering.
    _draining: bool
    #: Set when a drain ends (the first release, or close() returning).
    _drain_over: asyncio.Event
    #: The task that made the last fetch call.
    _fetcher: asyncio.Task[Any] | None
    #: The first offset of each partition in the batch the fetcher has in hand.
    _in_hand: dict[TopicPartition, int]
    #: Set while the fetcher has no batch in hand (it is inside a fetch call, or has made
    #: none since its last batch was processed).
    _back: asyncio.Event
    #: How long a revoke from another task waits for the batch in hand (seconds).
    _batch_wait: float

    def _fetch_call(self) -> None:
        """A fetch call starts: the caller's previous batch is processed."""
        self._fetcher = asyncio.current_task()
        self._in_hand.clear()
        self._back.set()

    def _handed_out(self, batch: Mapping[TopicPartition, list[Any]]) -> None:
        """A fetch call returns ``batch`` (not empty) to its caller."""
        self._in_hand = {tp: records[0].offset for tp, records in batch.items() if records}
        if self._in_hand:
            self._back.clear()

    def _may_drain(self) -> bool:
        """close() is called from another task than a live fetching one."""
        fetcher = self._fetcher
        return fetcher is not None and fetcher is not asyncio.current_task() and not fetcher.done()

    def _end_drain(self) -> None:
        """Nothing more is handed out from now on; a fetch call waiting in the drain wakes."""
        self._closing = True
        self._draining = False
        self._drain_over.set()

    async def _wait_for_batch(self, partitions: Iterable[TopicPartition]) -> None:
        """Before partitions are released from another task than the fetcher's: wait for
        the fetcher's batch in hand to be processed; if it is not within ``_batch_wait``,
        move those partitions' processed positions back to the batch's first records."""
        fetcher = self._fetcher
        if fetcher is None or fetcher is asyncio.current_task() or self._back.is_set():
            return
        if not fetcher.done():
            back = asyncio.ensure_future(self._back.wait())
            try:
                await asyncio.wait(
                    {back, fetcher}, timeout=self._batch_wait, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                back.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await back
        if self._back.is_set():
            return
        if fetcher.done() and not fetcher.cancelled() and fetcher.exception() is None:
            return  # it ended normally: it processed what it had
        unfinished = {tp: self._in_hand[tp] for tp in partitions if tp in self._in_hand}
        if not unfinished:
            return
        for tp, first in unfinished.items():
            self._positions[tp] = first
        logger.warning(
            "consumer.batch_unfinished",
            group=self._config.group_id,
            partitions=sorted(str(tp) for tp in unfinished),
            waited_s=round(self._batch_wait, 3),
        )
