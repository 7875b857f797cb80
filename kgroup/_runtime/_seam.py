"""The one seam between the application's loop and the coordinator side.

A member's coordinator side (heartbeat task, lookup, join chain, the coordinator
connection) runs either on the application's event loop (the default) or on a private loop
in its own thread (``GroupConfig.isolate_heartbeat``). Everything that crosses between the
two goes through :class:`LoopSeam`, so the rest of the runtime is written once: in the
default mode every hop is a direct call, in isolated mode a thread-safe hop
(:class:`~kgroup._runtime._loop_thread.LoopThread`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .._errors import CoordinatorError
from ._loop_thread import LoopThread, set_event, task_future
from ._tasks import consume, running_loop

__all__ = ["LoopSeam"]

_T = TypeVar("_T")


class LoopSeam:
    """Which loop runs what, and the doors between them."""

    def __init__(self, app_loop: asyncio.AbstractEventLoop, thread: LoopThread | None) -> None:
        self.app_loop = app_loop
        self.thread = thread
        self.coord_loop = app_loop if thread is None else thread.loop

    @property
    def isolated(self) -> bool:
        return self.thread is not None

    def wake_coordinator(self, event: asyncio.Event) -> None:
        """Set ``event``, waited on by the coordinator side, from either loop."""
        if self.thread is None:
            event.set()
        else:
            set_event(event, self.coord_loop)

    def wake_app(self, event: asyncio.Event) -> None:
        """Set ``event``, waited on by the application's side, from either loop."""
        if self.thread is None:
            event.set()
        else:
            set_event(event, self.app_loop)

    def to_app(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the application's loop: now if this is it, else soon."""
        if self.thread is None or running_loop() is self.app_loop:
            fn(*args)
        else:
            with contextlib.suppress(RuntimeError):  # the application's loop is closed
                self.app_loop.call_soon_threadsafe(fn, *args)

    def to_coordinator(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the coordinator loop: now if this is it, else soon."""
        thread = self.thread
        if thread is None or running_loop() is thread.loop:
            fn()
        else:
            thread.call(fn)

    async def run_on_coordinator(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Await ``coro`` on the coordinator loop. Cancelling the caller cancels it there."""
        thread = self.thread
        if thread is None:
            return await coro
        try:
            return await asyncio.wrap_future(thread.submit(coro))
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise  # the caller was cancelled (and so was the coroutine over there)
            # Cancelled over there, not here: the coordinator loop is shutting down.
            raise CoordinatorError("member is closed: the coordinator loop stopped") from None

    async def wait_task(
        self,
        get: Callable[[], asyncio.Task[Any] | None],
        timeout: Callable[[], float | None],
        *,
        still_open: Callable[[], bool],
        on_started: Callable[[concurrent.futures.Future[Any]], None] | None = None,
    ) -> None:
        """Wait (never cancelling it) for the coordinator-loop task ``get()`` returns, at most
        ``timeout()`` seconds (None: no limit). ``get`` runs on the coordinator loop (it may
        start the task), even if the caller is cancelled first (``LoopThread.call``)."""
        thread = self.thread
        if thread is None:
            task = get()
            if task is not None:
                await asyncio.wait({task}, timeout=timeout())  # never cancels the task
            return

        def mirror() -> concurrent.futures.Future[Any] | None:
            task = get()
            return None if task is None else task_future(task)

        started = thread.call(mirror)
        if on_started is not None:
            on_started(started)
        # Shielded: a cancelled caller must not mark ``started`` done before ``get`` ran
        # (the poll path reads it to know whether the chain's start is still queued).
        hop = asyncio.wrap_future(started)
        hop.add_done_callback(consume)
        try:
            done = await asyncio.shield(hop)
        except CoordinatorError:
            if still_open():
                raise
            return  # closing: the loop is gone
        if done is None:
            return
        waiter = asyncio.wrap_future(done)
        waiter.add_done_callback(consume)
        await asyncio.wait({waiter}, timeout=timeout())  # never cancels the task

    def app_loop_closed(self) -> bool:
        """Isolated mode: the application's loop closed (without close())."""
        return self.thread is not None and self.app_loop.is_closed()

    async def shutdown(self, coordinator_side: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``coordinator_side()`` on the coordinator loop, then stop that loop's thread."""
        thread = self.thread
        if thread is None:
            await coordinator_side()
            return
        try:
            await asyncio.wrap_future(thread.submit(coordinator_side()))
        except CoordinatorError:  # the loop is already gone
            pass
        finally:
            await thread.aclose()  # cancels whatever is left there; joins the thread
