"""An in-memory provider whose behaviour a test scripts through options.

For unit tests of the harness's own logic (lifecycle bookkeeping, cancellation, classification plumbing,
engine protocol) where the vendor's behaviour must be exact. Integration tests use the real stub instead.
Options: ready_delay_s, exec_delay_s, create_delay_s, fail ("phase:kind"), fail_every (int, 1 = always),
terminate_fail (bool), classify_raises (bool), ledger (path: a JSON-lines file of create/terminate events,
so a test in another process can check that every sandbox created was terminated), echo (bool: a leaky
vendor that repeats the credentials it was given, as is, upper-cased and as a per-sandbox token, in every
error it raises), cleanup_fail (bool: the end-of-run sweep fails), terminate_delay_s (a vendor slow to terminate),
preflight_once (path: the first preflight passes and leaves this file, every later one is refused: a token revoked
between the check before a run and the engine's own preflight).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
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
        self.terminate_delay_s = float(options.get("terminate_delay_s", 0.0))
        fail = str(options.get("fail", ""))
        self.fail_phase, _, kind = fail.partition(":")
        self.fail_kind = FailureKind(kind) if kind else None
        self.fail_every = int(options.get("fail_every", 1))
        self.terminate_fail = str(options.get("terminate_fail", "")).lower() in ("1", "true")
        self.classify_raises = str(options.get("classify_raises", "")).lower() in ("1", "true")
        self.ledger = options.get("ledger")
        self.echo = str(options.get("echo", "")).lower() in ("1", "true")
        self.cleanup_fail = str(options.get("cleanup_fail", "")).lower() in ("1", "true")
        self.preflight_once = options.get("preflight_once")
        self.credentials = [str(value) for key, value in options.items() if key in ("token", "api_key", "token_secret")]
        self.sandbox_tokens: dict[str, str] = {}
        self.live: dict[str, SandboxSpec] = {}
        self.terminated: list[str] = []
        self._count = 0

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ScriptedProvider:
        return cls(options)

    async def preflight(self) -> None:
        if self.preflight_once:
            try:
                with open(self.preflight_once, "x"):
                    return
            except FileExistsError:
                raise ProviderError(FailureKind.AUTH, "scripted vendor refused the token (revoked)") from None

    def _log(self, event: str, sandbox_id: str) -> None:
        if self.ledger:
            with open(self.ledger, "a") as handle:
                handle.write(json.dumps({"event": event, "id": sandbox_id}) + "\n")

    def _echoed(self) -> str:
        """What a leaky vendor puts in its error text: every credential it saw, as is and upper-cased."""
        if not self.echo:
            return ""
        words = [*self.credentials, *(value.upper() for value in self.credentials), *self.sandbox_tokens.values()]
        return " (request was: " + " ".join(words) + ")"

    def _maybe_fail(self, phase: str) -> None:
        if self.fail_phase == phase and self.fail_kind and self._count % self.fail_every == 0:
            raise ProviderError(self.fail_kind, f"scripted {self.fail_kind} in {phase}{self._echoed()}")

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        self._count += 1
        await asyncio.sleep(self.create_delay_s)
        self._maybe_fail("create")
        sandbox_id = f"sb-{next(self._ids)}"
        self.live[sandbox_id] = spec
        if self.echo:  # a per-sandbox gateway token, as Prime's /auth hands out
            self.sandbox_tokens[sandbox_id] = secrets.token_urlsafe(24)
            if self.ledger:
                with open(self.ledger, "a") as handle:
                    line = {"event": "token", "id": sandbox_id, "token": self.sandbox_tokens[sandbox_id]}
                    handle.write(json.dumps(line) + "\n")
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
            raise ProviderError(FailureKind.TRANSPORT, f"scripted terminate failure{self._echoed()}")
        if self.terminate_delay_s:
            await asyncio.sleep(self.terminate_delay_s)
        if self.live.pop(ref.sandbox_id, None) is not None:
            self.terminated.append(ref.sandbox_id)
            self._log("terminate", ref.sandbox_id)

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        return [
            SandboxRef(sandbox_id=sid, provider=self.name, run_id=run_id)
            for sid, spec in self.live.items()
            if spec.run_id == run_id and (not engine or spec.engine == engine)
        ]

    async def cleanup(self, run_id: str, engine: str | None = None) -> int:
        if self.cleanup_fail:
            raise ProviderError(FailureKind.TRANSPORT, f"scripted sweep failure{self._echoed()}")
        return await super().cleanup(run_id, engine)

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        if self.classify_raises:
            raise RuntimeError("classifier bug")
        return classify_common(exc, phase)
