"""Task ownership for the member's runtime: every task has an owner that keeps its failure.

:class:`TaskOwner` is the member's nursery. ``close()`` cancels and awaits every task it
spawned. A task that fails (anything but cancellation) is a bug in kgroup: the owner keeps
the exception, logs ``member.task_crashed`` with the traceback and hands an
:class:`~kgroup.InternalError` to ``on_failure`` (the member records it as a fatal error,
so the next ``poll()`` raises it). asyncio never sees an unretrieved task exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from .._errors import InternalError, UsageError
from .._log import logger

__all__ = ["TaskOwner", "consume", "require_asyncio", "running_loop"]


def running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def consume(fut: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned future's outcome so that asyncio does not warn about it."""
    if not fut.cancelled():
        fut.exception()


def require_asyncio() -> asyncio.AbstractEventLoop:
    """The running asyncio loop, or a UsageError that says what runs instead."""
    loop = running_loop()
    if loop is not None:
        return loop
    library = None
    try:
        import sniffio

        library = sniffio.current_async_library()
    except Exception:  # sniffio absent, or no async library detected
        library = None
    if library is not None and library != "asyncio":
        raise UsageError(
            f"kgroup needs asyncio, but this code runs under {library}: aiokafka, which "
            "kgroup uses for its connections, works on asyncio only. Under anyio use "
            "anyio.run(main, backend='asyncio')"
        )
    raise UsageError(
        "kgroup needs asyncio and found no running asyncio event loop: call it from a "
        "coroutine run by asyncio.run() (or anyio.run(main, backend='asyncio'))"
    )


class TaskOwner:
    """Owns every task the member starts; :meth:`aclose` cancels and awaits them all."""

    def __init__(self, group_id: str, on_failure: Callable[[InternalError], None]) -> None:
        self._group_id = group_id
        self._on_failure = on_failure
        #: Insertion-ordered (a dict, not a set), so close() cancels in spawn order and a
        #: run is reproducible on a virtual-time loop.
        self._tasks: dict[asyncio.Task[Any], None] = {}
        #: Every failure of an owned task, in order (kept for close() and tests).
        self.failures: list[InternalError] = []

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[task] = None
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if task.cancelled():
            return
        exc = task.exception()  # retrieved here, always
        if exc is not None:
            self.failed(task.get_name(), exc)

    def failed(self, name: str, exc: BaseException) -> None:
        """Work of the member's that runs outside a task (a callback of the loop), named
        ``name``, failed with ``exc``: kept and reported as a failed task is."""
        error = InternalError(name, exc)
        error.__cause__ = exc
        self.failures.append(error)
        logger.error(
            "member.task_crashed",
            group=self._group_id,
            task=name,
            error=repr(exc),
            exc_info=exc,
        )
        self._on_failure(error)

    async def aclose(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
