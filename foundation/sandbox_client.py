"""The RL framework's sandbox client, beside the vendor: what it does before a sandbox counts as started.

A vendor profile (`providers/sim/core/profiles/`) says what the vendor does; this says what the framework's own
client does around it, so a failure is put on the side it lives on. uni-agent's "Runtime did not start within 299s"
is SWE-ReX's client text: it waits for its own in-sandbox server for 300 s minus the sandbox's creation time, then
gives up, deletes the sandbox (or fails to: a leak) and retries. A `SandboxClient` holds that policy:

- `startup_deadline_s`: from the start of an attempt (the create call) to "alive"; past it the attempt fails as
  the client's (`CLIENT_DEADLINE_KIND`), never the vendor's;
- `install_s`: the client's own step after the vendor says RUNNING (start the in-sandbox server, install deps);
- `max_starting`: a semaphore on the client's sandboxes between create and alive (uni-agent's MODAL_MAX_STARTING);
- `retries`, `retry_backoff_s`, `init_budget_s`: how a failed start is retried, within a whole-init budget;
- `leak_prob`: the chance a failed attempt's sandbox is never deleted (it lives on to its lifetime, holding quota).

Pure data on the ground floor: the offline experiments (`providers/sim/core/experiments.py`) and the engine
(`harness/engine/`) read the same presets. Every value carries a source, or "assumed:" and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from foundation.errors import UsageError

CLIENT_DEADLINE_KIND = "client_startup_deadline"
"""The failure kind of an attempt the client gave up on (its own deadline), distinct from the vendor's kinds."""
CLIENT_BUDGET_KIND = "client_init_budget"
"""The failure kind of a rollout whose whole init budget (every attempt) ran out before a retry could start."""


@dataclass(frozen=True, slots=True)
class SandboxClient:
    """One framework's sandbox-client policy; `sources` maps each field name to its provenance."""

    name: str
    description: str
    startup_deadline_s: float = math.inf
    timeout_message: str = "Runtime did not start within {remaining_s:.0f}s"
    install_s: float = 0.0
    max_starting: float = math.inf
    retries: int = 0
    retry_backoff_s: float = 1.0
    init_budget_s: float = math.inf
    leak_prob: float = 0.0
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name in ("startup_deadline_s", "max_starting"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        for name in ("install_s", "retry_backoff_s", "init_budget_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0")
        if self.retries < 0:
            raise ValueError("retries must be >= 0")
        if not 0.0 <= self.leak_prob <= 1.0:
            raise ValueError("leak_prob must be in [0, 1]")
        missing = [f for f in NUMERIC_FIELDS if f not in self.sources]
        if missing:
            raise ValueError(f"client {self.name!r}: no source for {', '.join(missing)}")

    def message(self, remaining_s: float) -> str:
        """The client's own text for a start it gave up on (SWE-ReX counts what was left after the create)."""
        return self.timeout_message.format(remaining_s=remaining_s)

    def values(self) -> dict[str, float]:
        """Every numeric setting by name (what `stampede run --client` and the tables print)."""
        return {name: float(getattr(self, name)) for name in NUMERIC_FIELDS}


NUMERIC_FIELDS: tuple[str, ...] = (
    "startup_deadline_s",
    "install_s",
    "max_starting",
    "retries",
    "retry_backoff_s",
    "init_budget_s",
    "leak_prob",
)

_PR47 = "verl-project/uni-agent PR #47 (2026-05-28)"
_SWEREX = (
    "SWE-ReX's Modal deployment `_wait_until_alive` (as read in issue #34): waits on its in-sandbox server for "
    "runtime_timeout (300 s) minus the sandbox's creation time, then raises 'Runtime did not start within Ns'"
)

CLIENTS: dict[str, SandboxClient] = {
    client.name: client
    for client in (
        SandboxClient(
            name="none",
            description="no client policy: the vendor seen directly (no deadline, no semaphore, no retries)",
            sources={
                "startup_deadline_s": "none: no client deadline",
                "install_s": "none: usable when the vendor says RUNNING",
                "max_starting": "none: no client semaphore",
                "retries": "none: a failed start is not retried",
                "retry_backoff_s": "none: unused without retries",
                "init_budget_s": "none: no whole-init budget",
                "leak_prob": "none: every failed sandbox is deleted",
            },
        ),
        SandboxClient(
            name="swe-rex-uni-agent",
            description="SWE-ReX under uni-agent after PR #47: 300 s to alive, 128 STARTING fleet-wide, 2 retries "
            "within a 900 s init budget",
            startup_deadline_s=300.0,
            max_starting=128,
            retries=2,
            retry_backoff_s=1.0,
            init_budget_s=900.0,
            sources={
                "startup_deadline_s": _SWEREX,
                "install_s": "assumed: 0, SWE-bench images are prebuilt so the server starts with the sandbox; set "
                "it to study an install step before alive",
                "max_starting": f"{_PR47}: fleet-wide semaphore MODAL_MAX_STARTING = 128 sandboxes in STARTING",
                "retries": f"{_PR47}: max_retries lowered from 5 to 2",
                "retry_backoff_s": "assumed: 1 s; the PR gives no backoff figure",
                "init_budget_s": f"{_PR47}: a 900 s init wall budget, exhausted -> reward 0 masked sample",
                "leak_prob": f"assumed: 0, {_PR47} fixed the teardown bug that leaked ~847 sandboxes",
            },
        ),
        SandboxClient(
            name="swe-rex-uni-agent-pre47",
            description="SWE-ReX under uni-agent before PR #47: 300 s to alive, no STARTING cap, 5 retries within "
            "a 900 s init budget (the client the 960 failures were reported with)",
            startup_deadline_s=300.0,
            retries=5,
            retry_backoff_s=1.0,
            init_budget_s=900.0,
            sources={
                "startup_deadline_s": _SWEREX,
                "install_s": "assumed: 0, SWE-bench images are prebuilt",
                "max_starting": f"{_PR47}: before the fix nothing capped sandboxes in STARTING",
                "retries": f"{_PR47}: max_retries was 5 before the PR lowered it to 2",
                "retry_backoff_s": "assumed: 1 s; the PR gives no backoff figure",
                "init_budget_s": f"{_PR47}: a 900 s init wall budget",
                "leak_prob": "assumed: 0 here; the teardown bug's leak rate is not public (set it to study ~847 "
                "leaks: the mechanisms table does)",
            },
        ),
        SandboxClient(
            name="uni-agent",
            description="uni-agent's documented defaults: 600 s startup timeout, 64 starting per process",
            startup_deadline_s=600.0,
            max_starting=64,
            retries=2,
            retry_backoff_s=1.0,
            init_budget_s=900.0,
            sources={
                "startup_deadline_s": "verl-project/uni-agent docs/source/concepts/sandbox.md: "
                "SANDBOX_STARTUP_TIMEOUT 600 s",
                "install_s": "assumed: 0, prebuilt images",
                "max_starting": "verl-project/uni-agent docs/source/concepts/sandbox.md: SANDBOX_STARTUP_CONCURRENCY "
                "64, process-wide (one process here)",
                "retries": f"{_PR47}: max_retries 2",
                "retry_backoff_s": "assumed: 1 s; no public figure",
                "init_budget_s": f"{_PR47}: 900 s init wall budget",
                "leak_prob": "assumed: 0 after PR #47's teardown fix",
            },
        ),
        SandboxClient(
            name="verifiers",
            description="verifiers' Modal runtime: creates paced by its cross-process limiter, a long readiness "
            "wait, no STARTING cap",
            startup_deadline_s=600.0,
            retries=1,
            retry_backoff_s=1.0,
            sources={
                "startup_deadline_s": "assumed: 600 s; verifiers/prime-rl wait longer for readiness than SWE-ReX "
                "(research peers-and-vendors.md), no single public figure",
                "install_s": "assumed: 0, prebuilt images",
                "max_starting": "PrimeIntellect-ai/verifiers v1 runtimes: a creation limiter (Modal 40/s, "
                "verifiers PR #1646), no cap on sandboxes starting",
                "retries": "assumed: 1; verifiers #589 added create retries, no count published",
                "retry_backoff_s": "assumed: 1 s; no public figure",
                "init_budget_s": "assumed: none beyond the per-attempt deadline",
                "leak_prob": "assumed: 0; verifiers #1412 (leaks when a rollout group failed) was fixed",
            },
        ),
        SandboxClient(
            name="skyrl",
            description="SkyRL as in issue #1194: a retry creates fresh sandboxes while the failed ones live on",
            startup_deadline_s=600.0,
            retries=2,
            retry_backoff_s=1.0,
            leak_prob=1.0,
            sources={
                "startup_deadline_s": "assumed: 600 s; no public SkyRL startup deadline",
                "install_s": "assumed: 0, prebuilt images",
                "max_starting": "assumed: none; SkyRL#1194 describes no STARTING cap",
                "retries": "assumed: 2; SkyRL#1194 says a retry needs fresh slots, not how many retries",
                "retry_backoff_s": "assumed: 1 s; no public figure",
                "init_budget_s": "assumed: none",
                "leak_prob": "NovaSky-AI/SkyRL#1194: a retry needs 1,000 fresh slots while the old ones live on "
                "(every failed attempt's sandbox is left to its lifetime)",
            },
        ),
    )
}


def client_named(name: str) -> SandboxClient:
    """The preset called `name`; a UsageError listing the presets otherwise."""
    try:
        return CLIENTS[name]
    except KeyError:
        raise UsageError(f"unknown client {name!r} (clients: {', '.join(CLIENTS)})") from None
