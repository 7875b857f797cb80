"""Offset commits of a :class:`~kgroup.GroupConsumer`: committing given offsets or the
processed positions, and the best-effort auto-commit."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from .._config import GroupConfig
from .._core._consumer_protocol import TopicPartition
from .._errors import KGroupError
from .._log import logger
from ._member import GroupMember
from ._offsets import OffsetAndMetadata

__all__: list[str] = []


class _ConsumerCommits:
    """The commit layer of :class:`~kgroup.GroupConsumer`, which sets every attribute
    below in its ``__init__``."""

    _config: GroupConfig
    _member: GroupMember
    _positions: dict[TopicPartition, int]  # processed positions
    _committed: dict[TopicPartition, int]  # last offset known committed
    _commits_ok: int
    _commits_failed: int
    _auto_commits_ok: int
    _auto_commits_failed: int
    _last_commit_at: float | None

    @staticmethod
    def _now() -> float:
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:
            return 0.0

    def _normalise(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        if not isinstance(offsets, Mapping):
            raise TypeError(f"commit: offsets must be a mapping, got {type(offsets).__name__}")
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, value in offsets.items():
            if not isinstance(tp, tuple) or len(tp) != 2:
                raise TypeError(f"commit: keys must be TopicPartition values, got {tp!r}")
            part = TopicPartition(tp[0], tp[1])
            if isinstance(value, OffsetAndMetadata):
                meta = value
            elif isinstance(value, int) and not isinstance(value, bool):
                meta = OffsetAndMetadata(value)
            else:
                raise TypeError(
                    f"commit: the offset for {part} must be an int or OffsetAndMetadata, "
                    f"got {value!r}"
                )
            if meta.offset < 0:
                raise ValueError(f"commit: the offset for {part} must be >= 0, got {meta.offset}")
            out[part] = meta
        return out

    async def _commit(
        self, targets: Mapping[TopicPartition, OffsetAndMetadata], *, timeout: float | None = None
    ) -> None:
        try:
            await self._member.commit_offsets(targets, timeout=timeout)
        except BaseException as exc:
            self._commits_failed += 1
            logger.info("consumer.commit_failed", group=self._config.group_id, error=repr(exc))
            raise
        self._commits_ok += 1
        self._last_commit_at = self._now()
        for tp, meta in targets.items():
            self._committed[tp] = meta.offset
        logger.debug(
            "consumer.committed",
            group=self._config.group_id,
            offsets={str(tp): meta.offset for tp, meta in targets.items()},
        )

    async def _auto_commit_now(
        self, partitions: Iterable[TopicPartition], *, timeout: float | None = None
    ) -> None:
        """Commit the processed positions of ``partitions`` that moved since their last
        commit. Failures are logged and counted, never raised (auto-commit is best effort:
        at-least-once delivery covers a failed one)."""
        targets = {
            tp: OffsetAndMetadata(self._positions[tp])
            for tp in partitions
            if tp in self._positions and self._committed.get(tp) != self._positions[tp]
        }
        if not targets:
            return
        try:
            await self._commit(targets, timeout=timeout)
        except KGroupError as exc:
            self._auto_commits_failed += 1
            logger.warning(
                "consumer.auto_commit_failed",
                group=self._config.group_id,
                partitions=sorted(str(tp) for tp in targets),
                error=repr(exc),
            )
            return
        self._auto_commits_ok += 1
