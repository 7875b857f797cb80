"""A private event loop in a background thread, owned by one GroupMember (isolated mode).

The member's coordinator side (heartbeat and lease tasks, coordinator and bootstrap
connections, FindCoordinator, the JoinGroup/SyncGroup chain) runs here, so that an
application handler that blocks the application's loop cannot starve the heartbeats.

Everything crossing between the two loops goes through three doors:

- :meth:`LoopThread.call` runs a plain function on this loop and returns its result as a
  :class:`concurrent.futures.Future` (the function always runs, even if the caller stops
  waiting: starting a JoinGroup must not be undone by a cancelled ``poll()``);
- :meth:`LoopThread.submit` runs a coroutine on this loop; cancelling the returned future
  (for instance through :func:`asyncio.wrap_future` when the awaiting task is cancelled)
  cancels the coroutine's task;
- :func:`set_event` sets an ``asyncio.Event`` from any thread, on the loop that waits on it.

Every future handed out is resolved by :meth:`LoopThread.aclose` at the latest (failed with
``CoordinatorError("member is closed")`` if the loop stopped before it ran), so no waiter on
the application's side can hang on a loop that is gone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .._errors import CoordinatorError
from .._log import logger

__all__ = ["LoopThread", "set_event", "task_future"]

_T = TypeVar("_T")


def set_event(event: asyncio.Event, loop: asyncio.AbstractEventLoop) -> None:
    """Set ``event``, whose waiters run on ``loop``, from whichever thread runs now."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        event.set()
        return
    with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
        loop.call_soon_threadsafe(event.set)


def _settle(target: concurrent.futures.Future[Any], source: asyncio.Future[Any]) -> None:
    if target.done():
        return
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        if source.cancelled():
            target.cancel()
        elif (exc := source.exception()) is not None:
            target.set_exception(exc)
        else:
            target.set_result(source.result())


def task_future(task: asyncio.Future[_T]) -> concurrent.futures.Future[_T]:
    """A thread-safe mirror of ``task`` (call on the task's own loop). Cancelling the mirror
    does not touch the task."""
    mirror: concurrent.futures.Future[_T] = concurrent.futures.Future()
    task.add_done_callback(lambda t: _settle(mirror, t))
    return mirror


class LoopThread:
    """One event loop running in one daemon thread until :meth:`aclose`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._pending_lock = threading.Lock()
        self._stopping = False
        self._on_exit: Callable[[], None] | None = None
        self._exit_lock = threading.Lock()
        self._exited = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self._main())
            finally:
                self._ready.set()  # never leave start() waiting
            self._cancel_remaining()
            loop.run_until_complete(loop.shutdown_asyncgens())
        except BaseException:  # pragma: no cover - a bug in kgroup; never lose it silently
            logger.exception("member.loop_thread_crashed", thread=self._name)
        finally:
            asyncio.set_event_loop(None)
            loop.close()
            self._fail_pending()
            with self._exit_lock:
                self._exited = True
                on_exit = self._on_exit
            if on_exit is not None:
                on_exit()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()

    def _cancel_remaining(self) -> None:
        tasks = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))

    def _fail_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, set()
        for fut in pending:
            if not fut.done():
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    fut.set_exception(CoordinatorError("member is closed"))

    def _track(self, fut: concurrent.futures.Future[Any]) -> None:
        with self._pending_lock:
            self._pending.add(fut)
        fut.add_done_callback(self._untrack)

    def _untrack(self, fut: concurrent.futures.Future[Any]) -> None:
        with self._pending_lock:
            self._pending.discard(fut)

    def _schedule(self, fut: concurrent.futures.Future[Any], callback: Callable[[], None]) -> bool:
        self._track(fut)
        if not self._stopping:
            try:
                self._loop.call_soon_threadsafe(callback)
                return True
            except RuntimeError:  # the loop is closed
                pass
        fut.set_exception(CoordinatorError("member is closed"))
        return False

    def call(self, fn: Callable[[], _T]) -> concurrent.futures.Future[_T]:
        """Run ``fn()`` on this loop; its result or exception lands in the returned future."""
        fut: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                result = fn()
            except BaseException as exc:
                if fut.set_running_or_notify_cancel():
                    fut.set_exception(exc)
            else:
                if fut.set_running_or_notify_cancel():
                    fut.set_result(result)

        self._schedule(fut, run)
        return fut

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Run ``coro`` as a task on this loop. Cancelling the future cancels the task."""
        fut: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def start() -> None:
            if fut.cancelled():
                coro.close()
                return
            task = self._loop.create_task(coro)
            task.add_done_callback(lambda t: _settle(fut, t))
            fut.add_done_callback(lambda f: self._cancel_from_anywhere(f, task))

        if not self._schedule(fut, start):
            coro.close()  # never scheduled: do not leave a never-awaited coroutine
        return fut

    def _cancel_from_anywhere(
        self, fut: concurrent.futures.Future[Any], task: asyncio.Task[Any]
    ) -> None:
        if fut.cancelled() and not task.done():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(task.cancel)

    def stop_soon(self) -> None:
        """Ask the loop to stop (from any thread); what still runs on it is cancelled."""
        self._stopping = True
        stop = self._stop
        if stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(stop.set)

    async def aclose(self) -> None:
        """Stop the loop (every task still on it is cancelled and awaited), wait for the
        thread to finish without blocking the caller's loop, and join it. Idempotent."""
        self._stopping = True
        caller = asyncio.get_running_loop()
        finished: asyncio.Future[None] = caller.create_future()

        def resolve() -> None:
            if not finished.done():
                finished.set_result(None)

        def wake() -> None:
            with contextlib.suppress(RuntimeError):
                caller.call_soon_threadsafe(resolve)

        with self._exit_lock:
            exited = self._exited or not self._thread.is_alive()
            if not exited:
                self._on_exit = wake
        if not exited:
            self.stop_soon()
            await asyncio.shield(finished)
        if self._thread.ident is not None:  # started
            self._thread.join()
        self._fail_pending()
