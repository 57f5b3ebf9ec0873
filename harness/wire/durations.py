"""Durations drawn from a named distribution, written on the command line as `kind:params`.

Used for the emulated model generation time between an agentic rollout's turns (`--gen-time lognormal:20,0.8`),
so a rollout holds its sandbox as long as a real episode would.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from harness.errors import UsageError

KINDS = {
    "const": ("seconds",),
    "uniform": ("low", "high"),
    "lognormal": ("median", "sigma"),
    "exp": ("mean",),
}


@dataclass(frozen=True, slots=True)
class Distribution:
    kind: str
    params: tuple[float, ...]

    @classmethod
    def parse(cls, text: str) -> Distribution:
        """`const:5`, `uniform:1,3`, `lognormal:20,0.8` (median, sigma), `exp:20` (mean); a bare number is const."""
        text = str(text).strip()
        kind, sep, rest = text.partition(":")
        if not sep:
            kind, rest = "const", text
        kind = kind.strip().lower()
        if kind not in KINDS:
            raise UsageError(f"unknown distribution {kind!r} in {text!r} (use {', '.join(KINDS)})")
        try:
            params = tuple(float(part) for part in rest.split(",") if part.strip())
        except ValueError:
            raise UsageError(f"distribution {text!r}: parameters must be numbers") from None
        names = KINDS[kind]
        if len(params) != len(names):
            raise UsageError(f"distribution {text!r}: {kind} takes {', '.join(names)}")
        if any(not math.isfinite(p) or p < 0 for p in params) or (kind == "uniform" and params[0] > params[1]):
            raise UsageError(f"distribution {text!r}: parameters must be finite, non-negative and ordered")
        return cls(kind, params)

    def sample(self, rng: random.Random) -> float:
        if self.kind == "const":
            return self.params[0]
        if self.kind == "uniform":
            return rng.uniform(self.params[0], self.params[1])
        if self.kind == "lognormal":
            median, sigma = self.params
            return median * math.exp(sigma * rng.gauss(0.0, 1.0)) if median > 0 else 0.0
        mean = self.params[0]
        return rng.expovariate(1.0 / mean) if mean > 0 else 0.0

    @property
    def mean(self) -> float:
        if self.kind == "const":
            return self.params[0]
        if self.kind == "uniform":
            return (self.params[0] + self.params[1]) / 2
        if self.kind == "lognormal":
            return self.params[0] * math.exp(self.params[1] ** 2 / 2)
        return self.params[0]

    def __str__(self) -> str:
        return f"{self.kind}:{','.join(f'{p:g}' for p in self.params)}"
