"""Whether the simulated vendor lets a create in: the admission half of the control plane (`simulator.py`).

A create is checked in the order a vendor's API checks it, and each refusal is counted by reason: the request
within the profile's `[limits]` (INVALID), the create-rate token bucket (RATE_LIMITED with the time until the next
token), an injected transient error (seeded by the create-attempt number), the account's concurrency quota and
its vCPU/memory/disk pool (QUOTA_EXHAUSTED), no room left in the node pool or its queue (CAPACITY), and last the
vCPUs allocated per window where the profile has `[vcpu_rate]` (RATE_LIMITED, `resource="vcpu_rate"`: vcpu_rate.py;
last, so that only a create let in is charged).
"""

from __future__ import annotations

import math
from collections import Counter

from providers.sim.core.draws import Stream
from providers.sim.core.profile import Profile
from providers.sim.core.records import CreateRequest, Rejected, RejectReason, SimSandbox
from providers.sim.core.vcpu_rate import RESOURCE as VCPU_RATE
from providers.sim.core.vcpu_rate import VcpuAllowance


class Admission:
    """One account's create-rate bucket, resource-pool use and refusal counts."""

    def __init__(self, profile: Profile, seed: int, now: float) -> None:
        self.profile = profile
        self.seed = seed
        self.rejections: Counter[str] = Counter()
        self.pool_used: tuple[float, float, float] = (0.0, 0.0, 0.0)  # vCPU, memory GiB, disk GiB of active sandboxes
        self._tokens = profile.create_rate.burst
        self._tokens_at = now
        # vCPUs allocated per window (profile `[vcpu_rate]`, Vercel Sandbox's plan limit); None: not modelled
        self.vcpu_allowance = None if profile.vcpu_rate is None else VcpuAllowance(profile.vcpu_rate, now)

    def admit(self, req: CreateRequest, now: float, attempt: int, *, active: int, no_room: bool) -> None:
        """Raise `Rejected` unless a valid create may be accepted now; `active`: sandboxes not yet ended (the
        quota counts leaked ones too), `no_room`: the pool is at its size limit, full, and its queue too."""
        retry_after = self._take_token(now)
        if retry_after is not None:
            self.rejections[RejectReason.RATE_LIMITED] += 1
            raise Rejected(
                RejectReason.RATE_LIMITED,
                f"Sandbox creation rate limit exceeded ({self.profile.create_rate.per_s:g}/s)",
                retry_after=retry_after,
                attempt=attempt,
            )
        if Stream(self.seed, "create", attempt).chance(self.profile.errors.create_transient_prob):
            self.rejections[RejectReason.TRANSIENT] += 1
            raise Rejected(RejectReason.TRANSIENT, "Internal error while creating the sandbox", attempt=attempt)
        limit = self.profile.quota.max_active
        if active >= limit:
            self.rejections[RejectReason.QUOTA_EXHAUSTED] += 1
            raise Rejected(
                RejectReason.QUOTA_EXHAUSTED,
                f"Sandbox limit reached: {active} active sandboxes, the account allows {limit:g}",
                attempt=attempt,
            )
        self._check_resource_pool(req, attempt)
        if no_room:
            self.rejections[RejectReason.CAPACITY] += 1
            raise Rejected(RejectReason.CAPACITY, "Insufficient capacity to create sandbox", attempt=attempt)
        if self.vcpu_allowance is not None:  # last: only a create let in is charged its vCPUs
            vcpu_wait = self.vcpu_allowance.take(req.cpu, now)
            if vcpu_wait is not None:
                self.rejections[RejectReason.RATE_LIMITED] += 1
                rate = self.vcpu_allowance.rate
                raise Rejected(
                    RejectReason.RATE_LIMITED,
                    f"vCPU allocation limit exceeded ({rate.vcpus:g} vCPUs per {rate.window_s:g}s)",
                    retry_after=vcpu_wait,
                    attempt=attempt,
                    resource=VCPU_RATE,
                    limit=rate.vcpus,
                )

    def tokens(self, now: float) -> float:
        """Create tokens in the bucket at `now` (infinite when the rate is unlimited)."""
        rate = self.profile.create_rate
        return min(rate.burst, self._tokens + (now - self._tokens_at) * rate.per_s)

    def validate(self, req: CreateRequest) -> None:
        """Refuse (INVALID) a request outside the profile's `[limits]`: no image, too many cpus, too much memory."""
        limits = self.profile.limits
        problem = None
        if not isinstance(req.image, str) or not req.image.strip():
            problem = "image is required"
        elif not req.cpu > 0 or req.cpu > limits.max_cpu:
            problem = f"cpu must be in (0, {limits.max_cpu:g}], got {req.cpu:g}"
        elif not req.memory_mb > 0 or req.memory_mb > limits.max_memory_mb:
            problem = f"memory_mb must be in (0, {limits.max_memory_mb:g}], got {req.memory_mb:g}"
        elif not req.lifetime_s > 0 or (
            req.lifetime_s > limits.max_lifetime_s and math.isfinite(limits.max_lifetime_s)
        ):
            problem = f"lifetime_s must be in (0, {limits.max_lifetime_s:g}], got {req.lifetime_s:g}"
        if problem is not None:
            self.rejections[RejectReason.INVALID] += 1
            raise Rejected(RejectReason.INVALID, problem)

    def readmit(self, sb: SimSandbox, *, active: int) -> None:
        """Raise `Rejected` unless a paused sandbox may resume: it counts against the quota again (`active`: the
        sandboxes that count now) and takes back its vCPU and memory (its disk it kept). No create token is spent."""
        limit = self.profile.quota.max_active
        if active >= limit:
            self.rejections[RejectReason.QUOTA_EXHAUSTED] += 1
            raise Rejected(
                RejectReason.QUOTA_EXHAUSTED,
                f"Sandbox limit reached: {active} running sandboxes, the account allows {limit:g}",
            )
        self._check_resource_pool(sb, None, disk=False)

    def _check_resource_pool(self, req: CreateRequest | SimSandbox, attempt: int | None, *, disk: bool = True) -> None:
        """Refuse a create that would overdraw the account's vCPU, memory or disk pool (profile `[resource_pool]`)."""
        pool = self.profile.resource_pool
        if pool is None:
            return
        wanted = (req.cpu, req.memory_mb / 1024, req.disk_gb if disk else 0.0)
        for resource, used, want, limit in zip(
            ("cpu", "memory", "disk"), self.pool_used, wanted, (pool.cpu, pool.memory_gb, pool.disk_gb), strict=True
        ):
            if used + want > limit + 1e-9:
                self.rejections[RejectReason.QUOTA_EXHAUSTED] += 1
                raise Rejected(
                    RejectReason.QUOTA_EXHAUSTED,
                    f"Total {resource} limit exceeded: {used:g} in use, {want:g} asked, the account allows {limit:g}",
                    attempt=attempt,
                    resource=resource,
                    limit=limit,
                )

    def hold(self, sb: SimSandbox, sign: float, *, compute: bool = True, disk: bool = True) -> None:
        """Take (+1) or give back (-1) a sandbox's share of the resource pool: its vCPU and memory (`compute`, what a
        pause gives back) and its disk (what a paused sandbox keeps)."""
        cpu, memory, used_disk = self.pool_used
        c = sign if compute else 0.0
        d = sign if disk else 0.0
        self.pool_used = (cpu + c * sb.cpu, memory + c * sb.memory_mb / 1024, used_disk + d * sb.disk_gb)

    def _take_token(self, now: float) -> float | None:
        """Spend one create token; return None, or the vendor seconds until the next token."""
        rate = self.profile.create_rate
        if math.isinf(rate.burst) or math.isinf(rate.per_s):
            return None
        self._tokens = min(rate.burst, self._tokens + (now - self._tokens_at) * rate.per_s)
        self._tokens_at = now
        if self._tokens >= 1.0 - 1e-9:
            self._tokens -= 1.0
            return None
        return (1.0 - self._tokens) / rate.per_s
