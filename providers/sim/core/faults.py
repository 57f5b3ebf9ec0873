"""Transport faults a simulated vendor's front injects: the hostile-network half of a vendor.

The vendor model (simulator) decides what a vendor *answers*: quota, rate limits, boot crashes. This
decides what the *wire* does to a request on its way: a reset connection, a 502 from a load balancer, a
hung or slow response, a body that is not JSON, a 429 storm with or without Retry-After, a gateway that
drops an exec mid-command. Every front (Prime REST and gateway, Modal gRPC, E2B, Daytona) draws from the
same `FaultInjector`, so a profile's `[faults]` section (or `--profile-set faults.reset_prob=0.05`) means
the same thing for every client under test.

Delays here are wall seconds, not vendor seconds: they exercise the client's own wall-clock timeouts.
"""

from __future__ import annotations

import enum
import math
import random
import threading
from dataclasses import dataclass

OPERATIONS = ("create", "status", "exec", "terminate", "list", "logs")
"""Operation names a front reports to the injector (a front maps its routes or RPCs onto these)."""


class FaultKind(enum.Enum):
    RESET = "reset"  # the connection closes without an answer
    ERROR_5XX = "error_5xx"  # 500/502/503 (gRPC: UNAVAILABLE or INTERNAL)
    SLOW = "slow"  # the right answer, `slow_delay_s` late
    HANG = "hang"  # no answer for `hang_hold_s`, then the connection closes
    MALFORMED = "malformed"  # a 200 whose body is not what the protocol promises (garbage, truncated, wrong type)
    THROTTLE = "throttle"  # 429 (gRPC: RESOURCE_EXHAUSTED), with Retry-After when `retry_after_s` > 0
    GATEWAY_DEATH = "gateway_death"  # an exec's connection dropped after the command started (exec only)


def _check_probability(name: str, value: float) -> None:
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value}")


def _check_non_negative(name: str, value: float) -> None:
    if math.isnan(value) or value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class TransportFaults:
    """Profile section `[faults]`: per-request probabilities of each fault (their sum must not exceed 1).

    An optional section; every field has a default, so `--profile-set faults.error_5xx_prob=0.1` alone
    turns the section on. `operations` limits the faults to some operations ("*" = all of them).
    """

    reset_prob: float = 0.0
    error_5xx_prob: float = 0.0
    slow_prob: float = 0.0
    slow_delay_s: float = 5.0
    hang_prob: float = 0.0
    hang_hold_s: float = 600.0
    malformed_prob: float = 0.0
    throttle_prob: float = 0.0
    retry_after_s: float = 0.0
    gateway_death_prob: float = 0.0
    operations: str = "*"
    seed: int = 0

    def __post_init__(self) -> None:
        for kind in FaultKind:
            _check_probability(f"{kind.value}_prob", getattr(self, f"{kind.value}_prob"))
        total = sum(getattr(self, f"{kind.value}_prob") for kind in FaultKind)
        if total > 1.0 + 1e-9:
            raise ValueError(f"the fault probabilities add up to {total:g}, more than 1")
        _check_non_negative("slow_delay_s", self.slow_delay_s)
        _check_non_negative("hang_hold_s", self.hang_hold_s)
        _check_non_negative("retry_after_s", self.retry_after_s)
        unknown = [op for op in self.operation_set() if op not in OPERATIONS]
        if unknown:
            raise ValueError(f"operations: unknown {', '.join(unknown)} (known: *, {', '.join(OPERATIONS)})")

    def operation_set(self) -> frozenset[str]:
        text = self.operations.strip()
        if text in ("", "*"):
            return frozenset(OPERATIONS)
        return frozenset(part.strip() for part in text.split(",") if part.strip())

    @property
    def active(self) -> bool:
        return any(getattr(self, f"{kind.value}_prob") > 0 for kind in FaultKind)


class FaultInjector:
    """Draws the fault (or none) for each request; seeded, and safe to call from any thread of a front."""

    def __init__(self, faults: TransportFaults | None) -> None:
        self.faults = faults if faults is not None and faults.active else None
        self._random = random.Random(faults.seed if faults is not None else 0)
        self._lock = threading.Lock()
        self._operations = self.faults.operation_set() if self.faults is not None else frozenset()
        self.injected: dict[str, int] = {}

    @property
    def active(self) -> bool:
        return self.faults is not None

    def draw(self, operation: str) -> FaultKind | None:
        """The fault for one request of `operation`, or None. GATEWAY_DEATH is only drawn for exec."""
        faults = self.faults
        if faults is None or operation not in self._operations:
            return None
        with self._lock:
            u = self._random.random()
            for kind in FaultKind:
                if kind is FaultKind.GATEWAY_DEATH and operation != "exec":
                    continue
                p = getattr(faults, f"{kind.value}_prob")
                if u < p:
                    key = f"{operation}:{kind.value}"
                    self.injected[key] = self.injected.get(key, 0) + 1
                    return kind
                u -= p
        return None

    def malformed_variant(self) -> int:
        """Which malformed body to send (0 garbage, 1 truncated JSON, 2 wrong content type): rotates by draw."""
        with self._lock:
            return self._random.randrange(3)
