"""An in-memory provider whose behaviour a test scripts through options.

For unit tests of the harness's own logic (lifecycle bookkeeping, cancellation, classification plumbing,
engine protocol) where the vendor's behaviour must be exact. Integration tests use the real stub instead.
Options: ready_delay_s, exec_delay_s, create_delay_s, fail ("phase:kind"), fail_every (int, 1 = always),
terminate_fail (bool), classify_raises (bool), ledger (path: a JSON-lines file of create/terminate events,
so a test in another process can check that every sandbox created was terminated).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from providers.base import (
    ExecResult,
    FailureKind,
    Phase,
    Provider,
    ProviderError,
    SandboxRef,
    SandboxSpec,
    classify_common,
)


class ScriptedProvider(Provider):
    name = "scripted"
    _ids = itertools.count(1)

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.ready_delay_s = float(options.get("ready_delay_s", 0.0))
        self.exec_delay_s = float(options.get("exec_delay_s", 0.0))
        self.create_delay_s = float(options.get("create_delay_s", 0.0))
        fail = str(options.get("fail", ""))
        self.fail_phase, _, kind = fail.partition(":")
        self.fail_kind = FailureKind(kind) if kind else None
        self.fail_every = int(options.get("fail_every", 1))
        self.terminate_fail = str(options.get("terminate_fail", "")).lower() in ("1", "true")
        self.classify_raises = str(options.get("classify_raises", "")).lower() in ("1", "true")
        self.ledger = options.get("ledger")
        self.live: dict[str, SandboxSpec] = {}
        self.terminated: list[str] = []
        self._count = 0

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ScriptedProvider:
        return cls(options)

    def _log(self, event: str, sandbox_id: str) -> None:
        if self.ledger:
            with open(self.ledger, "a") as handle:
                handle.write(json.dumps({"event": event, "id": sandbox_id}) + "\n")

    def _maybe_fail(self, phase: str) -> None:
        if self.fail_phase == phase and self.fail_kind and self._count % self.fail_every == 0:
            raise ProviderError(self.fail_kind, f"scripted {self.fail_kind} in {phase}")

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        self._count += 1
        await asyncio.sleep(self.create_delay_s)
        self._maybe_fail("create")
        sandbox_id = f"sb-{next(self._ids)}"
        self.live[sandbox_id] = spec
        self._log("create", sandbox_id)
        return SandboxRef(sandbox_id=sandbox_id, provider=self.name, run_id=spec.run_id, rollout_id=spec.rollout_id)

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> None:
        if self.ready_delay_s > timeout:
            await asyncio.sleep(timeout)
            raise ProviderError(FailureKind.READY_TIMEOUT, "scripted ready timeout")
        await asyncio.sleep(self.ready_delay_s)
        self._maybe_fail("ready")

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        await asyncio.sleep(self.exec_delay_s)
        self._maybe_fail("exec")
        if list(argv[:1]) == ["false"]:
            return ExecResult(1, "", "")
        if list(argv[:1]) == ["boom"]:
            raise RuntimeError("an exception the adapter never heard of")
        return ExecResult(0, " ".join(argv[1:]) + "\n" if argv[:1] == ["echo"] else "", "")

    async def terminate(self, ref: SandboxRef) -> None:
        if self.terminate_fail:
            raise ProviderError(FailureKind.TRANSPORT, "scripted terminate failure")
        if self.live.pop(ref.sandbox_id, None) is not None:
            self.terminated.append(ref.sandbox_id)
            self._log("terminate", ref.sandbox_id)

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        return [
            SandboxRef(sandbox_id=sid, provider=self.name, run_id=run_id)
            for sid, spec in self.live.items()
            if spec.run_id == run_id and (not engine or spec.engine == engine)
        ]

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        if self.classify_raises:
            raise RuntimeError("classifier bug")
        return classify_common(exc, phase)
