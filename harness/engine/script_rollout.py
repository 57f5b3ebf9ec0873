"""A rollout that runs a plan's steps (`stampede run --plan`): create from an image, upload, tool calls, download,
a fork of G copies, each step timed and written as a row of the steps table.

Same discipline as the commands rollout it extends (harness.engine.rollout): every duration from the monotonic
clock from the rollout's start, every vendor call through `timed` (an ops row, a watchdog), the first failure the
rollout's (its phase the step's, or the finer one the vendor named: `ProviderError.phase`), the sandbox always
terminated. TTI is still until the first command's answer.

A plan with a fork step is a group: the rollout creates the prepared sandbox, runs the steps before the fork,
forks G copies (each in the registry of live sandboxes the moment the vendor returns it: through the vendor's own
fork of a running sandbox where it has one, `Provider.fork_running`, else from a snapshot it takes), runs the
steps after the fork in every copy at once, and terminates the prepared one once the copies are made. Each copy is
a rollout row of its own (`<group>-<i>`) whose clock starts when the fork call did (its create is the fork); all
end terminated, whatever happens to the others. Under the client's STARTING semaphore each copy holds a permit
from its fork until alive, the copies forked in batches of the permits free (`ScriptRollout.fork_group`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
import time
from collections.abc import Awaitable, Sequence

from harness.engine.rollout import OpSink, RolloutCancelled, RolloutContext, SandboxRegistry, _Rollout
from harness.engine.upload_payloads import NOISE_BYTES, materialise
from harness.wire.durations import Distribution
from harness.wire.plan import RolloutPlan
from harness.wire.records import RolloutRecord
from harness.wire.script_plan import COMMAND_S_MARK, ScriptPlan, Step, variant_image
from harness.wire.steps import step_record
from providers.base import (
    ExecResult,
    FailureKind,
    Phase,
    Provider,
    ProviderError,
    SandboxRef,
    SandboxSpec,
    StreamedExec,
)

_COMMAND_S = re.compile(re.escape(COMMAND_S_MARK) + r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")
_BUILD_IN_THREAD_BYTES = 1 << 20  # a bigger upload's bytes (and archive) are made off the loop
REPOSITORIES_PER_STEP = 16
"""Distinct file trees an engine makes for each tree upload of a plan, each drawn from the plan's `files` and
`file_size`; a rollout uploads one of them, picked by its own draw. Every rollout holding a tree of its own was 960
copies of ~20 MB in flight at once (the engine past 15 GB at 960 swe-task rollouts); 16 shared trees are ~300 MB
whatever the concurrency, and RL's rollouts share their task's repository too (a GRPO group, one prompt)."""
_repositories: dict[tuple[Step, int, int], asyncio.Future[tuple[list[tuple[str, bytes]], int]]] = {}


async def _make_tree(
    step: Step, paths: list[str], sizes: list[int], offsets: list[int]
) -> tuple[list[tuple[str, bytes]], int]:
    archive = f"{step.dest.rstrip('/')}/stampede-upload.tar" if step.mode == "tar" else None
    if sum(sizes) > _BUILD_IN_THREAD_BYTES:  # thousands of files: their bytes and archive made off the loop
        return await asyncio.to_thread(materialise, paths, sizes, offsets, archive), len(paths)
    return materialise(paths, sizes, offsets, archive), len(paths)


def reported_command_s(stdout: str) -> float | None:
    """The command's own run time, if it printed `STAMPEDE_COMMAND_S=<seconds>` (the last one counts)."""
    found = _COMMAND_S.findall(stdout or "")
    return float(found[-1]) if found else None


def _add(record: RolloutRecord, name: str, value: float | None) -> None:
    if value is not None:
        setattr(record, name, (getattr(record, name) or 0.0) + value)


class ScriptRollout(_Rollout):
    """One rollout of a plan (or a fork group's prepared sandbox and its copies)."""

    def __init__(
        self,
        provider: Provider,
        plan: RolloutPlan,
        ctx: RolloutContext,
        on_op: OpSink,
        registry: SandboxRegistry,
        script: ScriptPlan,
    ) -> None:
        super().__init__(provider, plan, ctx, on_op, registry)
        self.script = script
        self.fork_index = script.fork_index
        self.t_rollout = self.record.t_submit
        self.image: str | None = None  # the snapshot taken (a fork starts its copies from it)
        last = len(script.steps) - 1
        # the step a terminate row belongs to: the plan's terminate step, else one past the last (a group's: its fork)
        self.terminate_index = last if script.steps[last].kind == "terminate" else last + 1

    # -- rows -------------------------------------------------------------------------------------------------------

    def emit(
        self,
        index: int,
        kind: str,
        name: str,
        t_start: float,
        duration: float | None,
        *,
        exc: BaseException | None = None,
        cancelled: bool = False,
        phase: Phase | None = None,
        extra: dict[str, object] | None = None,
    ) -> None:
        sink = self.ctx.on_step
        if sink is None:
            return
        failure_kind = failure_phase = None
        if exc is not None and phase is not None:
            failure_phase = str(self.phase_of(exc, phase))
            failure_kind = str(self.classify(exc, phase))
        elif cancelled and phase is not None:
            failure_phase = str(phase)
        sink(
            step_record(
                self.ctx.identity,
                step=index,
                kind=kind,
                name=name,
                t_start_s=t_start,
                duration_s=duration,
                ok=exc is None and not cancelled,
                failure_kind=failure_kind,
                failure_phase=failure_phase,
                sandbox_id=self.ref.sandbox_id if self.ref else None,
                t_rollout=self.t_rollout,
                **(extra or {}),  # type: ignore[arg-type]
            )
        )

    async def step(
        self,
        index: int,
        kind: str,
        name: str,
        phase: Phase,
        run: Awaitable[dict[str, object]],
    ) -> float:
        """Run one step's calls, timed as one row; the row says what it moved (`run`'s answer) or why it failed.
        Returns the step's duration (`run` may say it: `duration_s`, the calls without the payload's making)."""
        self.phase = phase
        start = self.elapsed()
        try:
            extra = await run
        except asyncio.CancelledError:
            self.emit(index, kind, name, start, self.elapsed() - start, cancelled=True, phase=phase)
            raise
        except BaseException as exc:
            self.emit(index, kind, name, start, self.elapsed() - start, exc=exc, phase=phase)
            raise
        said = extra.pop("duration_s", None)
        duration = self.elapsed() - start if not isinstance(said, float) else said
        self.emit(index, kind, name, start, duration, extra=extra)
        return duration

    # -- classification ---------------------------------------------------------------------------------------------

    @staticmethod
    def phase_of(exc: BaseException, phase: Phase) -> Phase:
        """The vendor may place a failure finer than the call (a pull inside readiness)."""
        said = getattr(exc, "phase", None) if isinstance(exc, ProviderError) else None
        return Phase(said) if said is not None else phase

    def classify(self, exc: BaseException, phase: Phase) -> FailureKind:
        if phase is Phase.DOWNLOAD and isinstance(exc, FileNotFoundError):
            return FailureKind.TRANSFER_ERROR  # the contract's answer for a missing file: the transfer failed
        return super().classify(exc, self.phase_of(exc, phase))

    def fail(self, exc: BaseException, phase: Phase) -> None:
        super().fail(exc, self.phase_of(exc, phase))

    # -- the lifecycle ----------------------------------------------------------------------------------------------

    def spec(self) -> SandboxSpec:
        create = self.script.steps[0]
        spec = super().spec()
        image = create.image if create.image is not None else spec.image
        if create.image_variants > 1 and image is not None:  # one image per task: this rollout's own draw
            draw = random.Random(f"{self.plan.seed}:{self.ctx.identity.rollout_id}:image")
            image = variant_image(image, draw.randrange(create.image_variants))
        return dataclasses.replace(spec, image=image, image_size_mb=create.image_size_mb)

    async def lifecycle(self) -> None:
        await self.create_step()
        end = self.fork_index if self.fork_index is not None else len(self.script.steps)
        await self.run_steps(1, end)
        if self.fork_index is not None:
            await self.fork_group(self.fork_index)

    async def run_steps(self, first: int, end: int) -> None:
        for index in range(first, end):
            step = self.script.steps[index]
            if step.kind != "terminate":  # the rollout's end terminates (and writes its row)
                await self.run_step(index, step)

    async def create_step(self) -> None:
        """create -> ready (-> pull, where the vendor says it pulled): the rows of the plan's first step."""
        step = self.script.steps[0]
        start = self.elapsed()
        try:
            await self.start()
        except asyncio.CancelledError:
            self._start_rows(step, start, cancelled=True)
            raise
        except BaseException as exc:
            self._start_rows(step, start, exc=exc)
            raise
        self._start_rows(step, start)

    def _start_rows(
        self, step: Step, start: float, *, exc: BaseException | None = None, cancelled: bool = False
    ) -> None:
        record = self.record
        failed_create = record.create_s is None
        create_end = record.create_s if record.create_s is not None else self.elapsed()
        create_exc = exc if failed_create else None
        self.emit(
            0, "create", step.name, start, create_end - start, exc=create_exc, phase=Phase.CREATE,
            cancelled=cancelled and failed_create,
        )  # fmt: skip
        if failed_create:
            return
        observation = self.observation
        pull_s = observation.pull_s if observation is not None else None
        if pull_s is not None:
            record.pull_s = pull_s
            self.emit(0, "pull", step.name, create_end, pull_s)
        ready_s = record.ready_s if record.ready_s is not None else self.elapsed() - create_end
        self.emit(0, "ready", step.name, create_end, ready_s, exc=exc, cancelled=cancelled, phase=Phase.READY)

    async def run_step(self, index: int, step: Step) -> None:
        if step.kind == "exec":
            await self.exec_step(index, step)
        elif step.kind == "upload":
            _add(self.record, "upload_s", await self.step(index, "upload", step.name, Phase.UPLOAD, self.upload(step)))
        elif step.kind == "download":
            took = await self.step(index, "download", step.name, Phase.DOWNLOAD, self.download(step))
            _add(self.record, "download_s", took)
        elif step.kind == "snapshot":
            took = await self.step(index, "snapshot", step.name, Phase.SNAPSHOT, self.take_snapshot())
            _add(self.record, "snapshot_s", took)
        elif step.kind == "background":
            await self.step(index, "background", step.name, Phase.EXEC, self.background(step))
        else:  # pragma: no cover - the plan parser admits no other kind here
            raise ValueError(f"step kind {step.kind!r} cannot run inside a rollout")

    # -- steps ------------------------------------------------------------------------------------------------------

    @property
    def live(self) -> SandboxRef:
        assert self.ref is not None, "steps run in a created sandbox"
        return self.ref

    def budget(self, step: Step | None = None) -> float:
        return step.timeout_s if step is not None and step.timeout_s is not None else self.plan.exec_timeout_s

    async def exec_step(self, index: int, step: Step) -> None:
        calls = max(0, round(Distribution.parse(step.repeat).sample(self.rng)))
        think = Distribution.parse(step.think)
        for call in range(calls):
            if call > 0:  # the model generates the next call: the sandbox is held meanwhile
                pause = think.sample(self.rng) * self.plan.time_scale
                if pause > 0:
                    _add(self.record, "gen_s", await self.think(pause))
            argv = tuple(word.replace("{i}", str(call)) for word in step.command)
            await self.step(index, "exec", step.name, Phase.EXEC, self.one_call(step, argv))

    async def one_call(self, step: Step, argv: Sequence[str]) -> dict[str, object]:
        record, timeout = self.record, self.budget(step)
        start = self.elapsed()
        extra: dict[str, object] = {}
        result: ExecResult
        if step.stream:
            streamed: StreamedExec = await self.timed(
                "exec_stream", Phase.EXEC, self.provider.exec_stream(self.live, argv, timeout), timeout
            )
            result = streamed.result
            extra.update(first_byte_s=streamed.first_byte_s, last_byte_s=streamed.last_byte_s)
        else:
            result = await self.timed("exec", Phase.EXEC, self.provider.exec(self.live, argv, timeout), timeout)
        duration = self.elapsed() - start
        record.exec_count += 1
        record.exec_s = (record.exec_s or 0.0) + duration
        if record.tti_s is None:
            record.tti_s = self.elapsed()
            if self.ctx.loop_lag is not None:
                record.loop_lag_s = self.ctx.loop_lag(self.t0, self.poll_window)
        own = reported_command_s(result.stdout)
        if own is None and step.command_s is not None:
            own = step.command_s
        if own is not None:
            command_s = own * self.plan.time_scale  # vendor seconds, as the sandbox measured or the plan says
            extra.update(command_s=command_s, overhead_s=duration - command_s)
            _add(record, "exec_overhead_s", duration - command_s)
        extra["duration_s"] = duration
        return extra

    async def upload(self, step: Step) -> dict[str, object]:
        if step.path is None:  # a tree: one of the engine's shared trees for this step
            uploads, files = await self.shared_tree(step, self.rng.randrange(REPOSITORIES_PER_STEP))
        else:
            paths, sizes, offsets = self.payload(step, self.rng)
            uploads, files = materialise(paths, sizes, offsets, None), 1
        start = self.elapsed()
        queue = list(reversed(uploads))

        async def worker() -> None:
            while queue:
                path, data = queue.pop()
                call = self.provider.upload_file(self.live, path, data)
                await self.timed("upload_file", Phase.UPLOAD, call, self.budget())

        workers = max(1, min(step.concurrency if step.mode == "files" else 1, len(uploads)))
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(workers):
                    group.create_task(worker())
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
        duration = self.elapsed() - start
        return {"duration_s": duration, "bytes": sum(len(data) for _, data in uploads), "files": files}

    async def shared_tree(self, step: Step, which: int) -> tuple[list[tuple[str, bytes]], int]:
        """Tree `which` of this step's REPOSITORIES_PER_STEP and its file count: made once, by a task of its own
        (a rollout cancelled while it is made does not cancel it for the others), then shared; its draws are the
        run's seed's, not a rollout's."""
        key = (step, self.plan.seed, which)  # by value: a step object's id may be reused once it is gone
        made = _repositories.get(key)
        if made is None or (made.get_loop() is not asyncio.get_running_loop() and not made.done()):
            rng = random.Random(f"{self.plan.seed}:{step.dest}:{which}")
            made = _repositories[key] = asyncio.ensure_future(_make_tree(step, *self.payload(step, rng)))
        return await asyncio.shield(made)

    @staticmethod
    def payload(step: Step, rng: random.Random) -> tuple[list[str], list[int], list[int]]:
        """The files an upload writes, drawn from the plan: paths, sizes and where in the noise each one's bytes
        start (the bytes made by `materialise`)."""
        if step.path is not None:
            paths = [step.path]
        else:
            count = max(0, round(Distribution.parse(step.files).sample(rng)))
            folder = step.dest.rstrip("/")
            paths = [f"{folder}/f{n:05d}.txt" for n in range(count)]
        size = Distribution.parse(step.file_size)
        sizes = [max(0, round(size.sample(rng))) for _ in paths]
        offsets = [rng.randrange(NOISE_BYTES) for _ in paths]
        return paths, sizes, offsets

    async def download(self, step: Step) -> dict[str, object]:
        assert step.path is not None
        start = self.elapsed()
        call = self.provider.download_file(self.live, step.path)
        data: bytes = await self.timed("download_file", Phase.DOWNLOAD, call, self.budget())
        return {"duration_s": self.elapsed() - start, "bytes": len(data), "files": 1}

    async def take_snapshot(self) -> dict[str, object]:
        start = self.elapsed()
        self.image = await self.timed("snapshot", Phase.SNAPSHOT, self.provider.snapshot(self.live), self.budget())
        return {"duration_s": self.elapsed() - start}

    async def background(self, step: Step) -> dict[str, object]:
        """Start a process and poll it until it exits (or only start it: `wait = false`)."""
        handle: str = await self.timed(
            "start_process", Phase.EXEC, self.provider.start_process(self.live, step.command), self.budget()
        )
        if not step.wait:
            return {}
        deadline = time.monotonic() + self.budget(step)
        while True:
            code = await self.timed(
                "process_exit", Phase.EXEC, self.provider.process_exit(self.live, handle), self.budget()
            )
            if code is not None:
                return {}
            if time.monotonic() >= deadline:
                raise ProviderError(FailureKind.EXEC_TIMEOUT, f"background {step.name} still running", phase=Phase.EXEC)
            await asyncio.sleep(step.poll_s * self.plan.time_scale)

    # -- the fork group ---------------------------------------------------------------------------------------------

    async def fork_group(self, index: int) -> None:
        """Fork G copies of the prepared sandbox, end the prepared one, run the copies' steps at once.

        A vendor that copies a running sandbox in its own call (`Provider.fork_running`, E2B) is asked to, unless the
        plan already took a snapshot; otherwise the prepared sandbox is snapshotted and the copies start from it.
        Under the client's STARTING semaphore (`--client`) each copy holds one permit from its fork until it is
        alive, as a fresh create does: the copies are forked in batches of the permits free (at least one, waited
        for), each copy running as soon as its batch is made, so a cap of N starting at once holds across forks."""
        step = self.script.steps[index]
        record = self.record
        record.group_id = self.ctx.identity.rollout_id
        native = self.image is None and self.provider.overrides("fork_running")
        if self.image is None and not native:
            _add(
                record,
                "snapshot_s",
                await self.step(index, "snapshot", step.name, Phase.SNAPSHOT, self.take_snapshot()),
            )
        spec = self.spec() if native else dataclasses.replace(self.spec(), image=self.image)
        gate = self.ctx.starting
        tasks: list[asyncio.Task[None]] = []
        failure: Exception | None = None
        self.terminate_index = index
        try:
            while len(tasks) < step.copies and failure is None:
                waited_wall, waited = time.time(), time.monotonic()  # a copy's clock: from its wait for a permit
                held = await _permits(gate, step.copies - len(tasks))
                refs: list[SandboxRef] = []
                fork_start = time.monotonic() if gate is not None else waited
                try:
                    await self.step(index, "fork", step.name, Phase.FORK, self._fork(native, spec, held, refs))
                except Exception as exc:  # no copy of this batch runs; those already running go on
                    failure = exc
                except BaseException:
                    await asyncio.shield(self._end_copies(refs))
                    raise
                finally:
                    if gate is not None and len(refs) < held:  # a failed or cancelled batch: its permits back
                        for _ in range(held - len(refs)):
                            gate.release()
                fork_s = time.monotonic() - fork_start
                if failure is None:
                    _add(record, "fork_s", fork_s)
                for ref in refs:  # a copy's create: its fork, and the wait for the permits before it
                    create_s = fork_s + (fork_start - waited)
                    copy = ForkCopy(self, ref, len(tasks), waited_wall, waited, fork_s, index, gate, create_s)
                    tasks.append(asyncio.ensure_future(copy.run_and_report()))
            await self.terminate()  # the prepared sandbox has done its part; its row ends when its copies do
            self.ref = None
            await asyncio.gather(*tasks)
        except BaseException:  # cancelled: every copy stops, writes its row and ends its sandbox
            for task in tasks:
                task.cancel()
            await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
            raise
        if failure is not None:
            raise failure

    async def _fork(self, native: bool, spec: SandboxSpec, count: int, refs: list[SandboxRef]) -> dict[str, object]:
        """One fork call of `count` copies; each is in the registry of live sandboxes the moment the vendor returns
        it. (Copies of later batches carry the same rollout label numbers as the first's: the rows number them.)"""
        if native:
            call = self.provider.fork_running(self.live, spec, count)
        else:
            call = self.provider.fork(self.image or "", spec, count)
        made: list[SandboxRef] = await self.timed("fork", Phase.FORK, call, self.plan.create_timeout_s)
        for ref in made:  # held before anything else can happen: none leaks even if a copy fails
            self.registry.add(ref, self.ctx.identity.rollout_id)
        refs.extend(made)
        return {"copies": count}

    async def _end_copies(self, refs: list[SandboxRef]) -> None:
        results = await asyncio.gather(*(self.provider.terminate(ref) for ref in refs), return_exceptions=True)
        for ref, result in zip(refs, results, strict=True):
            if not isinstance(result, BaseException):
                self.registry.discard(ref)

    async def terminate(self) -> None:
        """The base's terminate, and its row (the plan's terminate step, or the rollout's end)."""
        if self.ref is None:
            return
        start = self.elapsed()
        self.terminate_error = None
        await super().terminate()
        if self.record.terminate_s is None:
            return  # the client left it behind (its leak): no terminate happened
        index = self.terminate_index
        steps = self.script.steps
        name = steps[index].name if index < len(steps) and steps[index].kind == "terminate" else "terminate"
        self.emit(index, "terminate", name, start, self.elapsed() - start, exc=self.terminate_error,
                  phase=Phase.TERMINATE)  # fmt: skip


class ForkCopy(ScriptRollout):
    """One copy of a fork group: its clock starts when the fork call did; its create is the fork."""

    def __init__(
        self,
        group: ScriptRollout,
        ref: SandboxRef,
        number: int,
        fork_wall: float,
        fork_start: float,
        fork_s: float,
        fork_index: int,
        permit: asyncio.Semaphore | None = None,
        create_s: float | None = None,
    ) -> None:
        identity = dataclasses.replace(group.ctx.identity, rollout_id=f"{group.ctx.identity.rollout_id}-{number}")
        ctx = dataclasses.replace(group.ctx, identity=identity, starting=None)
        super().__init__(group.provider, group.plan, ctx, group.on_op, group.registry, group.script)
        self.permit = permit  # the STARTING permit it holds from its fork until alive (released once)
        self.t0 = fork_start
        self.record.t_submit = fork_wall
        self.t_rollout = fork_wall
        self.ref = ref
        self.record.sandbox_id = ref.sandbox_id
        self.record.create_s = fork_s if create_s is None else create_s
        self.record.fork_s = fork_s
        self.record.group_id = group.ctx.identity.rollout_id
        self.first = fork_index + 1
        self.rng.seed(f"{self.plan.seed}:{identity.rollout_id}:{identity.attempt}")

    async def lifecycle(self) -> None:
        self.phase = Phase.READY
        start = self.elapsed()
        budget = self.plan.ready_timeout_s

        async def ready() -> dict[str, object]:
            self.observation = await self.timed(
                "wait_ready", Phase.READY, self.provider.wait_ready(self.live, budget), budget
            )
            return {}

        try:
            await self.step(self.first - 1, "ready", self.script.steps[self.first - 1].name, Phase.READY, ready())
        finally:
            self.release_permit()  # alive, or failed to be: no longer starting
        self.record.ready_s = self.elapsed() - start
        await self.run_steps(self.first, len(self.script.steps))

    def release_permit(self) -> None:
        permit, self.permit = self.permit, None
        if permit is not None:
            permit.release()

    async def run_and_report(self) -> None:
        """Run the copy; its row goes to the engine whatever happened (a cancelled copy's too)."""
        report = self.ctx.on_record
        try:
            record = await self.run()
        except asyncio.CancelledError:
            if report is not None:
                report(self.record)
            raise
        finally:
            self.release_permit()  # a copy cancelled before its readiness step holds one still
        if report is not None:
            report(record)


async def _permits(gate: asyncio.Semaphore | None, wanted: int) -> int:
    """How many copies the next fork call makes: all `wanted` without a gate; else one permit waited for and as many
    more as are free at once (never a wait while holding some: two groups cannot starve each other)."""
    if gate is None:
        return wanted
    await gate.acquire()
    held = 1
    while held < wanted and not gate.locked():
        await gate.acquire()  # free: taken at once
        held += 1
    return held


async def run_script_rollout(
    provider: Provider,
    plan: RolloutPlan,
    ctx: RolloutContext,
    on_op: OpSink,
    registry: SandboxRegistry,
    script: ScriptPlan,
) -> RolloutRecord:
    """Run one rollout of a plan (a fork group: its prepared sandbox's row; the copies' rows go to `on_record`)."""
    rollout = ScriptRollout(provider, plan, ctx, on_op, registry, script)
    try:
        return await rollout.run()
    except asyncio.CancelledError:
        raise RolloutCancelled(rollout.record) from None
