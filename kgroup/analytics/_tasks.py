"""A few driver-side steps at once, each after the ones it reads.

The tables are small Spark jobs of one to four tasks each, with a pause on the driver
between them: one after another they leave the cores idle much of the time. Spark runs the
jobs of several driver threads side by side (with PySpark's pinned threads each Python
thread has a JVM thread of its own, so each action is its own SQL execution), and
:func:`run_tasks` runs the steps on a few such threads, as soon as the steps they depend on
are done.

The run is structured: it returns only once every step it started has finished. When one
fails, no further step starts, the running ones are waited for, and the first failure is
raised as it was (the others are added to it as notes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

__all__ = ["Task", "run_tasks"]

Step = Callable[[], None]


@dataclass(frozen=True)
class Task:
    """A step, ``run``, named ``name``, to start once every task named in ``after`` is done."""

    name: str
    run: Step
    after: tuple[str, ...] = ()


def _same(step: Step) -> Step:
    return step


def run_tasks(
    tasks: Sequence[Task],
    *,
    workers: int,
    on_done: Callable[[str], None] | None = None,
    wrap: Callable[[Step], Step] = _same,
) -> None:
    """Run ``tasks`` on at most ``workers`` threads, each after the tasks it names in
    ``after``; of the tasks ready to start, the first in ``tasks`` starts first (list the
    ones on the longest chain first).

    ``on_done(name)`` is called on this thread as each task finishes. ``wrap`` is applied to
    each task's step on this thread when it is started (for example PySpark's
    ``inheritable_thread_target``, which hands the caller's Spark local properties to the
    thread that runs it).

    Raises the first failure, of a task or of ``on_done`` (a ``KeyboardInterrupt`` too),
    after every started task has finished; no task starts after a failure."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    names = [task.name for task in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"task names repeat: {names}")
    for task in tasks:
        unknown = [name for name in task.after if name not in names]
        if unknown:
            raise ValueError(f"task {task.name!r} waits for unknown tasks {unknown}")
    waiting = list(tasks)
    finished: set[str] = set()
    running: dict[Future[None], Task] = {}
    failure: BaseException | None = None

    def fail(exc: BaseException, where: str) -> None:
        nonlocal failure
        if failure is None:
            failure = exc
        elif exc is not failure:
            failure.add_note(f"{where} failed as well: {exc!r}")

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kgroup-task") as pool:
        while waiting or running:
            try:
                while failure is None and len(running) < workers:
                    ready = next((t for t in waiting if finished.issuperset(t.after)), None)
                    if ready is None:
                        break
                    waiting.remove(ready)
                    running[pool.submit(wrap(ready.run))] = ready
                if not running:
                    if failure is None:
                        left = ", ".join(t.name for t in waiting)
                        raise ValueError(f"tasks wait for each other: {left}")
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                # In the order they were listed, so that the report of them is steady.
                for future in sorted(done, key=lambda f: names.index(running[f].name)):
                    task = running.pop(future)
                    exc = future.exception()
                    if exc is not None:
                        fail(exc, f"task {task.name!r}")
                        continue
                    finished.add(task.name)
                    if failure is None and on_done is not None:
                        on_done(task.name)
            except BaseException as exc:  # on_done, an interrupt: stop, then wait for the rest
                fail(exc, "the caller")
    if failure is not None:
        raise failure
