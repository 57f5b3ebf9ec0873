"""Counter-based random draws: every value is a hash of (seed, key, draw index).

Why not one `random.Random`: a shared generator makes one sandbox's boot time depend on how many draws
every other sandbox made before it. Keyed streams make each sandbox's draws a function of the seed, its
acceptance number and the purpose alone, so changing one part of a workload does not reshuffle the rest.
"""

from __future__ import annotations

import hashlib
import math
from statistics import NormalDist

_NORMAL = NormalDist()
_SCALE = 1.0 / 18446744073709551616.0  # 2**-64


class Stream:
    """An independent, reproducible stream of draws named by `(seed, *key)`.

    One 64-byte BLAKE2b digest per block of eight draws keeps a draw well under a microsecond.
    """

    __slots__ = ("_block", "_buf", "_pos", "_prefix")

    def __init__(self, seed: int, *key: object) -> None:
        self._prefix = (f"{seed}|" + "|".join([str(k) for k in key]) + "|").encode()
        self._block = 0
        self._buf = b""
        self._pos = 64

    def uniform(self) -> float:
        """A float in the open interval (0, 1)."""
        pos = self._pos
        if pos >= 64:
            self._buf = hashlib.blake2b(self._prefix + b"%d" % self._block, digest_size=64).digest()
            self._block += 1
            pos = 0
        self._pos = pos + 8
        return (int.from_bytes(self._buf[pos : pos + 8], "little") + 0.5) * _SCALE

    def chance(self, p: float) -> bool:
        """True with probability `p` (always draws, so later draws do not shift with `p`)."""
        return self.uniform() < p

    def normal(self) -> float:
        return _NORMAL.inv_cdf(self.uniform())

    def lognormal(self, median: float, sigma: float) -> float:
        """Lognormal by its median and log-space sigma (how published percentiles are fitted)."""
        z = self.normal()
        if sigma <= 0 or median <= 0 or math.isinf(median):
            return median
        return median * math.exp(sigma * z)

    def choice_index(self, n: int) -> int:
        return min(n - 1, int(self.uniform() * n))
