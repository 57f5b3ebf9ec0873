"""A vendor's limit on vCPUs allocated per time window (Vercel Sandbox: Hobby 40 vCPU per 10 minutes, Pro 400 vCPU
per minute): a create is charged its vCPUs, not one token, so one 8-vCPU sandbox spends what four 2-vCPU ones do.

Modelled as a token bucket in vCPU units holding at most `vcpus` and refilling `vcpus / window_s` a second: the
vendor publishes the allowance per window, not whether the window is fixed or sliding, and a bucket is the
reading that never lets more than `vcpus` through in any window once the bucket has drained (an assumption each
profile says). `Admission` (admission.py) consults it after the create-rate bucket; a refusal is RATE_LIMITED with
`resource="vcpu_rate"` and the vendor seconds until enough vCPUs are back, so a front can word it as its vendor
does and the harness classifies it `rate_limited` (waiting cures it; no sandbox needs to end).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RESOURCE = "vcpu_rate"
"""`Rejected.resource` of a create refused by the vCPU allowance (fronts word it apart from the create rate)."""


@dataclass(frozen=True, slots=True)
class VcpuRate:
    """Profile section `[vcpu_rate]`: at most `vcpus` vCPUs allocated in any `window_s` vendor seconds. The defaults
    (no limit, a minute) are what `--set vcpu_rate.vcpus=N` starts from on a profile without the section."""

    vcpus: float = math.inf
    window_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.vcpus > 0:
            raise ValueError(f"vcpus must be positive, got {self.vcpus}")
        if not self.window_s > 0 or math.isinf(self.window_s):
            raise ValueError(f"window_s must be a positive finite number, got {self.window_s}")

    @property
    def per_s(self) -> float:
        """vCPUs that come back each vendor second."""
        return self.vcpus / self.window_s


class VcpuAllowance:
    """One account's vCPU bucket: full at the start, charged by each admitted create's vCPUs."""

    def __init__(self, rate: VcpuRate, now: float) -> None:
        self.rate = rate
        self._left = rate.vcpus
        self._at = now

    def left(self, now: float) -> float:
        """vCPUs that could be allocated at `now`."""
        return min(self.rate.vcpus, self._left + (now - self._at) * self.rate.per_s)

    def take(self, vcpus: float, now: float) -> float | None:
        """Charge `vcpus` and return None, or charge nothing and return the vendor seconds until they are back.

        A request larger than the whole allowance could never pass; it waits for a full bucket (the vendor's
        own validation refuses such a size first: a profile's `limits.max_cpu` sits below the allowance)."""
        self._left = self.left(now)
        self._at = now
        wanted = min(vcpus, self.rate.vcpus)
        if self._left + 1e-9 >= wanted:
            self._left -= wanted
            return None
        return (wanted - self._left) / self.rate.per_s
