"""Rollout latency as exact distributions on a lattice: the laws every closed form reads (a dispatched rollout's
delivery, loss and end, from characteristic functions by FFT), and the order statistics and truncated means on them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from harness.rlmodel.duration_dists import ConstantDist, Dist
from harness.rlmodel.inputs import Plan

BINS = 1 << 16


def sum_upper(dist: Dist, count: int) -> float:
    """A bound on the sum of `count` draws: one extreme draw plus (count − 1) ordinary ones."""
    if count <= 0:
        return 0.0
    return dist.upper(1e-10) + (count - 1) * dist.upper(1e-4)


@dataclass(frozen=True, slots=True)
class Lattice:
    """Distributions as probability masses on 0, dt, 2dt, … (bin i holds the mass of [(i−½)dt, (i+½)dt))."""

    dt: float
    bins: int

    @property
    def n_fft(self) -> int:
        return 2 * self.bins

    def pmf(self, dist: Dist) -> np.ndarray:
        edges = (np.arange(self.bins) + 0.5) * self.dt
        cdf = np.clip(dist.cdf(edges), 0.0, 1.0)
        pmf = np.diff(np.concatenate(([0.0], cdf)))
        pmf[-1] += 1.0 - cdf[-1]
        return np.maximum(pmf, 0.0)

    def spectrum(self, dist: Dist) -> np.ndarray:
        return np.fft.rfft(self.pmf(dist), n=self.n_fft)

    def inverse(self, spectrum: np.ndarray) -> np.ndarray:
        full = np.fft.irfft(spectrum, n=self.n_fft)
        pmf = np.maximum(full[: self.bins], 0.0)
        pmf[-1] += max(0.0, float(np.maximum(full[self.bins :], 0.0).sum()))
        total = pmf.sum()
        return pmf / total if total > 0 else pmf

    def expected(self, survival: np.ndarray) -> float:
        """E[X] = Σ P(X > i·dt)·dt for a variable on the lattice."""
        return float(np.sum(survival) * self.dt)


@dataclass(frozen=True, slots=True)
class RolloutLaws:
    """CDFs on the lattice of one dispatched rollout: delivery (success), loss (start never succeeded), end."""

    lattice: Lattice
    p_success: float
    delivery_cdf: np.ndarray  # given success: dispatch -> sample ready
    lost_cdf: np.ndarray  # given every attempt failed: dispatch -> given up
    mean_delivery: float
    mean_lost: float
    mean_attempts: float

    def end_cdf(self) -> np.ndarray:
        return self.p_success * self.delivery_cdf + (1 - self.p_success) * self.lost_cdf

    def mean_sandbox(self, teardown: float) -> float:
        """Mean seconds a dispatched rollout keeps a sandbox: its delivery and teardown, or its failed starts."""
        return self.p_success * (self.mean_delivery + teardown) + (1 - self.p_success) * self.mean_lost

    def billed_create_wait(self, create_wait: float) -> float:
        """The share of a create-rate queue a sandbox is billed for: a retry queues for the create rate too, with
        its sandbox already held, so (attempts − 1) of the mean attempts' waits."""
        return create_wait * (self.mean_attempts - 1) / self.mean_attempts

    def mean_slot(self, teardown: float, teardown_holds_slot: bool) -> float:
        """Mean seconds it holds a concurrency slot: the same, teardown included only when the slot waits for it."""
        return self.mean_sandbox(teardown if teardown_holds_slot else 0.0)


def rollout_laws(plan: Plan) -> RolloutLaws:
    cfg = plan.config
    retries, backoff = cfg.max_retries, cfg.backoff_s
    p = plan.p_init
    tool_count = plan.turns if plan.tool_per_turn else 1
    work_upper = sum_upper(plan.generation, plan.turns) + sum_upper(plan.tool, tool_count) + plan.reward.upper()
    fail_upper = sum_upper(plan.init_failure_time, retries + 1) + retries * backoff
    upper = max(plan.startup.upper() + fail_upper + work_upper, fail_upper) + plan.teardown.upper()
    lattice = Lattice(dt=max(upper, 1e-6) * 1.02 / BINS, bins=BINS)

    start = lattice.spectrum(plan.startup)
    work = lattice.spectrum(plan.generation) ** plan.turns * lattice.spectrum(plan.tool) ** tool_count
    work = work * lattice.spectrum(plan.reward)
    fail_and_wait = lattice.spectrum(plan.init_failure_time) * lattice.spectrum(ConstantDist(backoff))
    weights = np.array([p**j * (1 - p) for j in range(retries + 1)])
    p_success = float(weights.sum())
    mixture = np.zeros_like(start)
    power = np.ones_like(start)
    for weight in weights:  # at most max_retries + 1 terms
        mixture = mixture + (weight / p_success) * power
        power = power * fail_and_wait
    delivery = lattice.inverse(start * work * mixture)
    lost = lattice.inverse(
        lattice.spectrum(plan.init_failure_time) ** (retries + 1) * lattice.spectrum(ConstantDist(backoff)) ** retries
    )
    failed_before = float(np.sum(np.arange(retries + 1) * weights) / p_success)
    mean_delivery = plan.startup.mean() + plan.mean_work() + failed_before * (plan.init_failure_time.mean() + backoff)
    mean_lost = (retries + 1) * plan.init_failure_time.mean() + retries * backoff
    attempts = float(np.sum((np.arange(retries + 1) + 1) * weights) + (1 - p_success) * (retries + 1))
    return RolloutLaws(lattice, p_success, np.cumsum(delivery), np.cumsum(lost), mean_delivery, mean_lost, attempts)


def cdf_at(lattice: Lattice, cdf: np.ndarray, t: float) -> float:
    index = int(min(max(math.floor(t / lattice.dt), 0), lattice.bins - 1))
    return float(cdf[index])


def mean_min(lattice: Lattice, cdf: np.ndarray, t: float) -> float:
    """E[min(X, t)] = ∫₀ᵗ P(X > u) du."""
    index = int(min(max(math.floor(t / lattice.dt), 0), lattice.bins))
    return float(np.sum(1.0 - cdf[:index]) * lattice.dt)


def order_statistic_time(lattice: Lattice, cdf: np.ndarray, k: int, n: int) -> float:
    """E[time of the k-th of n independent ends with this CDF]."""
    if k <= 0:
        return 0.0
    return lattice.expected(1.0 - special.betainc(k, n - k + 1, np.clip(cdf, 0.0, 1.0)))
