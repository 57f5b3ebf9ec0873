"""The scripted provider with every step a rollout plan takes: files, snapshots, forks, streamed exec, background.

For tests of the plan engine (harness.engine.script_rollout) before or besides the vendors' own implementations:
files live in memory per sandbox, a snapshot copies them, `fork` is the contract's default (a create per copy from
the snapshot), a background process ends after `exec_delay_s`. Options beyond ScriptedProvider's:
`fail_copy` (N: every command in a fork copy whose rollout id ends `-N` fails, exec_error), `answer_overhead_s`
(a fixed hold on every command's answer, as OpenSandbox's execd held each 1 s), `no_fork` (true: no snapshot and
no fork offered, for the capability check), `pull_s` (readiness says it pulled the image this long), `pull_fail`
(true: readiness fails as an image pull the vendor places in the pull phase).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from providers.base import (
    Capability,
    ExecResult,
    FailureKind,
    Phase,
    ProviderError,
    ReadyObservation,
    SandboxRef,
    SandboxSpec,
    StreamedExec,
)
from tests.support.scripted_provider import ScriptedProvider


class StepsProvider(ScriptedProvider):
    name = "steps"
    _snapshots = itertools.count(1)

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        self.files: dict[str, dict[str, bytes]] = {}
        self.images: dict[str, dict[str, bytes]] = {}
        self.processes: dict[str, float] = {}  # handle -> monotonic end
        self.fail_copy = options.get("fail_copy")
        self.answer_overhead_s = float(options.get("answer_overhead_s", 0.0))
        self.no_fork = str(options.get("no_fork", "")).lower() in ("1", "true")
        self.forks: list[int] = []  # the count of each fork call
        self.uploaded: dict[str, bytes] = {}  # every upload's last bytes by path, kept past the sandbox's end
        self.pull_s = float(options["pull_s"]) if "pull_s" in options else None
        self.pull_fail = str(options.get("pull_fail", "")).lower() in ("1", "true")

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> StepsProvider:
        return cls(options)

    def capabilities(self) -> frozenset[Capability]:
        offered = super().capabilities()
        return offered - {Capability.SNAPSHOT, Capability.FORK} if self.no_fork else offered

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        ref = await super().create(spec)
        self.files[ref.sandbox_id] = dict(self.images.get(spec.image or "", {}))
        return ref

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation | None:  # type: ignore[override]
        await super().wait_ready(ref, timeout)
        if self.pull_fail:
            raise ProviderError(FailureKind.IMAGE, "scripted: pull access denied", phase=Phase.PULL)
        return ReadyObservation(pull_s=self.pull_s) if self.pull_s is not None else None

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        spec = self.live.get(ref.sandbox_id)
        if self.fail_copy is not None and spec is not None and spec.rollout_id.endswith(f"-{self.fail_copy}"):
            raise ProviderError(FailureKind.EXEC_ERROR, f"scripted failure in copy {spec.rollout_id}")
        if list(argv[:1]) == ["sleep"]:
            await asyncio.sleep(float(argv[1]))
        result = await super().exec(ref, list(argv), timeout)
        if self.answer_overhead_s:
            await asyncio.sleep(self.answer_overhead_s)
        return result

    async def exec_stream(
        self, ref: SandboxRef, argv: Sequence[str], timeout: float, on_output: Callable[[str], None] | None = None
    ) -> StreamedExec:
        start = time.monotonic()
        result = await self.exec(ref, argv, timeout)
        at = time.monotonic() - start
        if on_output is not None and result.stdout:
            on_output(result.stdout)
        return StreamedExec(result, at if result.stdout else None, at if result.stdout else None)

    async def upload_file(self, ref: SandboxRef, path: str, data: bytes) -> None:
        self._sandbox_files(ref)[path] = data
        self.uploaded[path] = data

    async def download_file(self, ref: SandboxRef, path: str) -> bytes:
        try:
            return self._sandbox_files(ref)[path]
        except KeyError:
            raise FileNotFoundError(path) from None

    async def snapshot(self, ref: SandboxRef) -> str:
        image = f"snap-{next(self._snapshots)}"
        self.images[image] = dict(self._sandbox_files(ref))
        return image

    async def fork(self, snapshot: str, spec: SandboxSpec, count: int) -> list[SandboxRef]:
        self.forks.append(count)
        return await super().fork(snapshot, spec, count)

    async def start_process(self, ref: SandboxRef, argv: Sequence[str]) -> str:
        handle = f"p-{len(self.processes)}"
        self.processes[handle] = time.monotonic() + self.exec_delay_s
        return handle

    async def process_exit(self, ref: SandboxRef, handle: str) -> int | None:
        return 0 if time.monotonic() >= self.processes[handle] else None

    async def terminate(self, ref: SandboxRef) -> None:
        await super().terminate(ref)
        self.files.pop(ref.sandbox_id, None)

    def _sandbox_files(self, ref: SandboxRef) -> dict[str, bytes]:
        if ref.sandbox_id not in self.live:
            raise ProviderError(FailureKind.DIED_DURING_EXEC, f"sandbox {ref.sandbox_id} is gone", phase=Phase.UPLOAD)
        return self.files.setdefault(ref.sandbox_id, {})
