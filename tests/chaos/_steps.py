"""The chaos run's timeline: applying a schedule's steps at their offsets, and undoing
every fault at the end of the fault window.

:class:`StepDriver` works on its :class:`~._runner.ChaosRunner`'s processes, target and
timeline: a step with a ``duration`` is undone when it ends; slow steps (broker restarts,
new processes, topic changes) run beside the timeline as the runner's background tasks; a
step whose member slot has no running process is skipped and recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from typing import TYPE_CHECKING

from kgroup import TopicPartition
from kgroup.testing import KafkaBroker, MockCluster, TansuBroker

from ._procs import MemberProc
from ._schedule import API_KEYS, MemberSpec, Step

if TYPE_CHECKING:
    from ._runner import ChaosRunner

__all__ = ["StepDriver"]


class StepDriver:
    """Applies a schedule's steps for ``runner`` (see the module docstring)."""

    def __init__(self, runner: ChaosRunner) -> None:
        self.runner = runner

    async def apply_steps(self) -> None:
        assert self.runner._t0 is not None
        actions: list[tuple[float, int, str, Step]] = []
        for i, step in enumerate(self.runner.schedule.steps):
            actions.append((step.at, 2 * i, "start", step))
            if step.duration > 0:
                actions.append((step.end, 2 * i + 1, "end", step))
        actions.sort(key=lambda a: (a[0], a[1]))
        for at, _, phase, step in actions:
            delay = self.runner._t0 + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule's own time offset
            if phase == "start":
                await self._start(step)
            else:
                await self._end(step)
        if self.runner._background:
            await asyncio.gather(*self.runner._background)

    def _applied(self, step: Step, detail: str = "") -> None:
        self.runner.result.applied[step.kind] += 1
        self.runner.note(
            f"APPLY {step.kind} {' '.join(f'{k}={v}' for k, v in step.args)} {detail}".rstrip()
        )

    def _skip(self, step: Step, why: str) -> None:
        self.runner.result.skipped.append(f"{step}: {why}")
        self.runner.note(f"SKIP {step.kind}: {why}")

    def _running(self, step: Step) -> MemberProc | None:
        """The running (not paused) process of ``step``'s member slot; None, with the step
        recorded as skipped, when there is none."""
        slot = step.member
        assert slot is not None
        mp = self.runner.current(slot)
        if mp is None or not mp.live or mp.state == "paused":
            self._skip(step, f"{slot} has no running process")
            return None
        return mp

    async def _start(self, step: Step) -> None:
        kind = step.kind
        target = self.runner.target
        if kind in ("crash", "pause", "leave"):
            mp = self._running(step)
            if mp is None:
                return
            if kind == "crash":
                mp.state = "killed"
                self.runner._signal(mp, signal.SIGKILL)
                self._applied(step, mp.name)
            elif kind == "pause":
                if self.runner._signal(mp, signal.SIGSTOP):
                    mp.state = "paused"
                    self._applied(step, mp.name)
            else:
                self.runner._later(f"leave-{mp.name}", self._leave(step, mp))
        elif kind == "rejoin":
            slot = step.member
            assert slot is not None
            old = self.runner.current(slot)
            spec = self.runner.schedule.member(slot)
            if spec.instance_id and old is not None and not old.done.is_set():
                # A static member's previous process still closing (or being reaped): wait,
                # bounded, so that two processes of one instance id never overlap.
                await self.runner.wait_for(lambda: None if old.done.is_set() else "closing", 15.0)
            self._applied(step)
            self.runner._later(f"rejoin-{slot}", self._spawn_quietly(spec))
        elif kind == "roll":
            mp = self._running(step)
            if mp is None:
                return
            self.runner._later(f"roll-{mp.name}", self._roll(step, mp))
        elif kind == "black_hole":
            assert target.proxy is not None
            target.proxy.black_hole(step.arg("direction", "both"))
            self._applied(step)
        elif kind == "latency":
            assert target.proxy is not None
            target.proxy.add_latency(
                float(step.arg("seconds")), jitter=float(step.arg("jitter", 0.0))
            )
            self._applied(step)
        elif kind == "cut":
            assert target.proxy is not None
            target.proxy.cut()
            self._applied(step)
        elif kind == "broker_restart":
            self._applied(step)
            self.runner._later(
                "broker-restart", self._restart_broker(bool(step.arg("hard", False)))
            )
        elif kind == "tansu_restart":
            self._applied(step)
            self.runner._later("tansu-restart", self._restart_tansu())
        elif kind == "coordinator_move":
            cluster = self._mock()
            cluster.set_coordinator(self.runner.group, int(step.arg("broker_id")))
            self._applied(step)
        elif kind == "broker_down":
            self._mock().broker_down(int(step.arg("broker_id")))
            self._applied(step)
        elif kind == "inject_errors":
            codes = [int(c) for c in step.arg("codes", ())]
            self._mock().push_request_errors(int(step.arg("api_key")), *codes)
            self._applied(step)
        elif kind == "add_partitions":
            self.runner._later("add-partitions", self._grow_topic(step))
        elif kind == "create_topic":
            self.runner._later("create-topic", self._create_topic(step))
        elif kind == "delete_topic":
            self.runner._later("delete-topic", self._delete_topic(step))
        elif kind == "create_again":
            self.runner._later("create-again", self._create_again(step))
        else:
            raise ValueError(f"unknown fault kind {kind!r}")

    async def _end(self, step: Step) -> None:
        kind = step.kind
        if kind == "pause":
            slot = step.member
            assert slot is not None
            mp = self.runner.current(slot)
            if mp is not None and mp.state == "paused":
                self.runner._signal(mp, signal.SIGCONT)
                mp.state = "running"
                self.runner.note(f"END pause: SIGCONT {mp.name}")
        elif kind in ("black_hole", "latency"):
            proxy = self.runner.target.proxy
            assert proxy is not None
            if step.arg("end") == "cut":
                proxy.cut()
            proxy.heal()
            self.runner.note(f"END {kind}: {'cut + ' if step.arg('end') == 'cut' else ''}heal")
        elif kind == "broker_down":
            self._mock().broker_up(int(step.arg("broker_id")))
            self.runner.note(f"END broker_down: broker {step.arg('broker_id')} up")

    async def _grow_topic(self, step: Step) -> None:
        total = int(step.arg("total"))
        await self.runner.target.grow_topic(self.runner.topic, total)
        mine = [tp for tp in self.runner.partitions if tp.topic == self.runner.topic]
        total = max(total, len(mine))  # a later step's call may have ended first
        others = {tp for tp in self.runner.partitions if tp.topic != self.runner.topic}
        self.runner.partitions = frozenset(
            others | {TopicPartition(self.runner.topic, p) for p in range(total)}
        )
        self.runner.result.grown_to = len(self.runner.partitions)
        self._applied(step, f"{self.runner.topic} has {total} partitions")
        self.runner._changed.set()

    async def _create_topic(self, step: Step) -> None:
        """A second topic that the members' pattern matches (``{topic}-{index}``)."""
        name, count = f"{self.runner.topic}-{step.arg('index')}", int(step.arg("partitions"))
        await self.runner.target.create_topic(name, count)
        self.runner.partitions |= {TopicPartition(name, p) for p in range(count)}
        self.runner.result.grown_to = len(self.runner.partitions)
        self._applied(step, f"{name} ({count} partitions)")
        self.runner._changed.set()

    async def _delete_topic(self, step: Step) -> None:
        """The second topic goes again (``{topic}-{index}``), once its creation is done:
        from then on the group must own none of its partitions."""
        name = f"{self.runner.topic}-{step.arg('index')}"
        created = await self.runner.wait_for(
            lambda: (
                None if any(tp.topic == name for tp in self.runner.partitions) else "not created"
            ),
            timeout=60.0,
        )
        if created is not None:
            raise RuntimeError(f"delete_topic: {name} was never created")
        sent_at = time.monotonic()
        await self.runner.target.delete_topic(name)
        self.runner.deleted_topics[name] = sent_at
        self.runner.partitions = frozenset(tp for tp in self.runner.partitions if tp.topic != name)
        self.runner.result.grown_to = len(self.runner.partitions)
        self._applied(step, f"{name} deleted")
        self.runner._changed.set()

    async def _create_again(self, step: Step) -> None:
        """The deleted second topic is created again under its name, once its deletion is
        done: a new topic id, whose partitions the group must own again. To Kafka they are
        other partitions than the old ones of the same names, which a member may still be
        revoking (the verdict tolerates exactly that overlap)."""
        name, count = f"{self.runner.topic}-{step.arg('index')}", int(step.arg("partitions"))
        deleted = await self.runner.wait_for(
            lambda: None if name in self.runner.deleted_topics else "not deleted", timeout=120.0
        )
        if deleted is not None:
            raise RuntimeError(f"create_again: {name} was never deleted")
        self.runner.recreated_topics[name] = time.monotonic()
        await self.runner.target.create_topic(name, count)
        self.runner.partitions |= {TopicPartition(name, p) for p in range(count)}
        self.runner.result.grown_to = len(self.runner.partitions)
        self._applied(step, f"{name} created again ({count} partitions, a new topic id)")
        self.runner._changed.set()

    def _mock(self) -> MockCluster:
        broker = self.runner.target.broker
        assert isinstance(broker, MockCluster), f"{self.runner.target.kind} is not the mock cluster"
        return broker

    async def _spawn_quietly(self, spec: MemberSpec) -> None:
        await self.runner.spawn(spec)

    async def _roll(self, step: Step, mp: MemberProc) -> None:
        """A migration's roll: the member closes (SIGTERM), then its slot's next process
        starts, on the consumer protocol (``protocol_for``)."""
        await self._leave(step, mp)
        if mp.state != "terminating":
            return  # skipped: not running
        why = await self.runner.wait_for(
            lambda: None if mp.done.is_set() else f"{mp.name} closing", self.runner._close_bound()
        )
        if why is not None:
            self.runner.note(
                f"roll: {why} after {self.runner._close_bound():.0f} s; its successor starts"
            )
        await self.runner.spawn(mp.spec)

    async def _leave(self, step: Step, mp: MemberProc) -> None:
        if not mp.ready.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(20.0):
                    await mp.ready.wait()
        if not mp.live or mp.state == "paused":
            self._skip(step, f"{mp.name} is {mp.state}")
            return
        mp.terminated_before_ready = not mp.ready.is_set()
        mp.state = "terminating"
        self.runner._signal(mp, signal.SIGTERM)
        self._applied(step, mp.name)

    async def _restart_broker(self, hard: bool) -> None:
        broker = self.runner.target.broker
        assert isinstance(broker, KafkaBroker)
        async with self.runner._restart_lock:
            t = time.monotonic()
            if hard:
                await asyncio.to_thread(broker.kill)
                await asyncio.to_thread(broker.start)
            else:
                await asyncio.to_thread(broker.restart)
            self.runner._kafka_restarts.append((t, time.monotonic()))
        self.runner.note(f"END broker_restart: Kafka back after {time.monotonic() - t:.2f} s")

    async def _restart_tansu(self) -> None:
        broker = self.runner.target.broker
        assert isinstance(broker, TansuBroker)
        async with self.runner._restart_lock:
            t = time.monotonic()
            await asyncio.to_thread(broker.restart)
            self.runner._broker_epoch += 1
            await self.runner.target.create_topic(
                self.runner.topic, self.runner.schedule.partitions
            )
            self.runner._state_losses.append((t, time.monotonic()))
        self.runner.note(
            f"END tansu_restart: back with the topic recreated after {time.monotonic() - t:.2f} s"
        )

    async def stop_faults(self) -> None:
        """Undo whatever is still in effect: every fault stops here."""
        proxy = self.runner.target.proxy
        if proxy is not None:
            proxy.heal()
        broker = self.runner.target.broker
        if isinstance(broker, MockCluster):
            broker.broker_up(-1)
            for api_key in API_KEYS.values():
                broker.clear_request_errors(api_key)
        elif not broker.running():
            self.runner.fail(
                f"the {self.runner.target.kind} broker is not running after the fault window"
            )
        for mp in self.runner.procs:
            if mp.state == "paused":
                self.runner._signal(mp, signal.SIGCONT)
                mp.state = "running"

    # -- shutting down and the final checks ---------------------------------------------------
