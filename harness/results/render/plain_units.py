"""Numbers as a reader says them: `68.9k` sandbox-seconds, `2.1M`, `0.003942¢`, `0.95×`, never `6.886e+04`.

One rule for text and figures (the model's tables, prices, the sweep's and compare's axes), so a figure printed
in one place reads the same in another. Four significant digits, no exponent: thousands and up take k, M or G;
dollars under one are given in cents.
"""

from __future__ import annotations

import math

SIGNIFICANT = 4
_SUFFIXES: tuple[tuple[float, float, str], ...] = ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k"))
"""(from, divisor, suffix): k from 10,000 up (below it every digit is printed: `2152`, not `2.15k`)."""


def fixed(value: float, significant: int = SIGNIFICANT) -> str:
    """`significant` digits in positional notation, trailing zeros dropped: 0.0001057, 269, 2152, 0.1196."""
    if value == 0:
        return "0"
    decimals = max(0, significant - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def plain(value: float | None, significant: int = SIGNIFICANT) -> str:
    """A count, rate or duration: `-` for none or NaN, k/M/G from 10,000 up, else positional."""
    if value is None or value != value:
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    for start, divisor, suffix in _SUFFIXES:
        if abs(value) >= start:
            return fixed(value / divisor, min(significant, 3)) + suffix
    return fixed(value, significant)


def usd(value: float | None, significant: int = SIGNIFICANT) -> str:
    """Dollars: `$32.82`, `$1.2k`; under a dollar in cents, `3.94¢`, `0.003942¢`; `unknown` for None."""
    if value is None or value != value:
        return "unknown"
    if abs(value) < 1 and value != 0:
        return fixed(100 * value, significant) + "¢"
    return "$" + plain(value, significant)


def ratio(value: float, _position: object = None) -> str:
    """A ratio on an axis or in a cell: `0.95×`, `2×`, `1.2k×` (a matplotlib FuncFormatter takes it as is)."""
    return plain(value, 3) + "×"
