"""The table steps' runner (kgroup.analytics._tasks): order, concurrency, failures.

Plain threads, no Spark: the pipeline's own use is covered by the Spark tests (every table
against the reference) and by test_tables_concurrent.py.
"""

from __future__ import annotations

import threading
import time

import pytest

from kgroup.analytics._tasks import Step, Task, run_tasks


class Recorder:
    """Steps that note when they start and end (and on which thread ``on_done`` runs)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []
        self.running = 0
        self.most = 0
        self.done_threads: set[str] = set()

    def step(self, name: str, seconds: float = 0.02, error: BaseException | None = None) -> Step:
        def run() -> None:
            with self.lock:
                self.events.append(("start", name))
                self.running += 1
                self.most = max(self.most, self.running)
            try:
                time.sleep(seconds)
                if error is not None:
                    raise error
            finally:
                with self.lock:
                    self.running -= 1
                    self.events.append(("end", name))

        return run

    def started(self, name: str) -> bool:
        return ("start", name) in self.events

    def index(self, kind: str, name: str) -> int:
        return self.events.index((kind, name))


def test_each_task_starts_after_the_ones_it_waits_for() -> None:
    rec = Recorder()
    done: list[str] = []

    def on_done(name: str) -> None:
        rec.done_threads.add(threading.current_thread().name)
        done.append(name)

    tasks = [
        Task("a", rec.step("a", 0.05)),
        Task("b", rec.step("b")),
        Task("c", rec.step("c"), ("a", "b")),
        Task("d", rec.step("d"), ("c",)),
        Task("e", rec.step("e")),
    ]
    run_tasks(tasks, workers=3, on_done=on_done)
    assert sorted(done) == ["a", "b", "c", "d", "e"]
    assert rec.index("start", "c") > max(rec.index("end", "a"), rec.index("end", "b"))
    assert rec.index("start", "d") > rec.index("end", "c")
    # on_done runs on the caller's thread, never on a worker.
    assert rec.done_threads == {threading.current_thread().name}
    assert not [t for t in threading.enumerate() if t.name.startswith("kgroup-task")]


def test_no_more_than_workers_at_once_and_the_first_listed_first() -> None:
    rec = Recorder()
    started: list[str] = []

    def wrap(step: Step) -> Step:
        started.append(step.__name__)  # on the calling thread, as each is started
        return step

    def named(name: str) -> Step:
        step = rec.step(name, 0.0 if name == "0" else 0.1)
        step.__name__ = name
        return step

    # Ready together: started in the order listed; "late" waits for "0" (the quickest) and
    # takes the first free worker after it, before the tasks listed after it.
    tasks = [Task("late", named("late"), ("0",))]
    tasks += [Task(str(i), named(str(i))) for i in range(6)]
    run_tasks(tasks, workers=3, wrap=wrap)
    assert rec.most == 3
    assert started[:3] == ["0", "1", "2"]
    assert started.index("late") == 3
    assert sorted(started) == sorted(t.name for t in tasks)


class Boom(LookupError):
    pass


def test_a_failure_is_raised_as_it_was_after_the_running_tasks_end() -> None:
    rec = Recorder()
    release = threading.Event()
    slow_ended = threading.Event()

    def slow() -> None:
        rec.step("slow", 0.0)()
        release.wait(10)
        slow_ended.set()

    error = Boom("kgroup bug")
    tasks = [
        Task("slow", slow),
        Task("fails", rec.step("fails", 0.01, error)),
        Task("after_fails", rec.step("after_fails"), ("fails",)),
        Task("later", rec.step("later")),
    ]
    timer = threading.Timer(0.3, release.set)
    timer.start()
    try:
        with pytest.raises(Boom) as info:
            run_tasks(tasks, workers=2)
    finally:
        timer.cancel()
    assert info.value is error  # the task's own exception, not a wrapper
    # The task still running was waited for; nothing started after the failure.
    assert slow_ended.is_set()
    assert not rec.started("after_fails") and not rec.started("later")
    assert not [t for t in threading.enumerate() if t.name.startswith("kgroup-task")]


def test_a_second_failure_is_noted_on_the_first() -> None:
    rec = Recorder()
    first, second = Boom("first"), ValueError("second")
    tasks = [
        Task("one", rec.step("one", 0.01, first)),
        Task("two", rec.step("two", 0.2, second)),
    ]
    with pytest.raises(Boom) as info:
        run_tasks(tasks, workers=2)
    assert info.value is first
    assert any("'two'" in note and "second" in note for note in info.value.__notes__)


def test_a_failing_on_done_stops_the_run_after_the_running_tasks() -> None:
    rec = Recorder()

    def on_done(name: str) -> None:
        if name == "quick":
            raise RuntimeError("progress failed")

    tasks = [
        Task("quick", rec.step("quick", 0.0)),
        Task("slow", rec.step("slow", 0.2)),
        Task("next", rec.step("next"), ("quick",)),
    ]
    with pytest.raises(RuntimeError, match="progress failed"):
        run_tasks(tasks, workers=2, on_done=on_done)
    assert ("end", "slow") in rec.events and not rec.started("next")


def test_wrap_is_applied_to_each_step_on_the_calling_thread() -> None:
    wrapped_on: list[str] = []
    ran: list[str] = []

    def wrap(step: Step) -> Step:
        wrapped_on.append(threading.current_thread().name)

        def run() -> None:
            ran.append(threading.current_thread().name)
            step()

        return run

    run_tasks([Task(n, lambda: None) for n in "abc"], workers=2, wrap=wrap)
    assert wrapped_on == [threading.current_thread().name] * 3
    assert len(ran) == 3 and all(name.startswith("kgroup-task") for name in ran)


def test_bad_task_lists_are_refused() -> None:
    nothing = Task("x", lambda: None)
    with pytest.raises(ValueError, match="unknown"):
        run_tasks([Task("a", lambda: None, ("b",))], workers=1)
    with pytest.raises(ValueError, match="repeat"):
        run_tasks([nothing, nothing], workers=1)
    with pytest.raises(ValueError, match="at least 1"):
        run_tasks([nothing], workers=0)
    ran: list[str] = []
    cycle = [
        Task("free", lambda: ran.append("free")),
        Task("a", lambda: ran.append("a"), ("b",)),
        Task("b", lambda: ran.append("b"), ("a",)),
    ]
    with pytest.raises(ValueError, match="wait for each other: a, b"):
        run_tasks(cycle, workers=2)
    assert ran == ["free"]
