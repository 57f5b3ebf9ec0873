"""Typed argparse converters: every numeric option is finite and in range when the command line is parsed.

`float("nan")` compares false with everything, so a later `value <= 0` check lets NaN through; an unbounded
count (`--stages 1000000000`) gets past every type check and exhausts the machine once used. Each converter
here rejects both with an `argparse.ArgumentTypeError`, which argparse (and Locust's configargparse parser)
turns into one usage line and exit status 2. One definition serves `stampede run`, `locust -f` and the
simulated vendors' serve commands.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = [
    "bounded_float",
    "bounded_int",
    "finite_float",
    "fraction",
    "integer",
    "non_negative_float",
    "non_negative_int",
    "port",
    "positive_finite_float",
    "positive_float",
    "positive_int",
]


def _number(text: object) -> float:
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _whole(text: object) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def integer(text: object) -> int:
    """Any whole number (a seed)."""
    return _whole(text)


def finite_float(text: object) -> float:
    """Any finite number: no nan, no inf."""
    return _number(text)


def bounded_float(low: float, high: float, *, low_open: bool = False) -> Callable[[object], float]:
    """A converter for a finite number in [low, high] (or (low, high] with `low_open`)."""
    shown = f"{'more than' if low_open else 'at least'} {low:g} and at most {high:g}"

    def convert(text: object) -> float:
        value = _number(text)
        if value < low or (low_open and value == low) or value > high:
            raise argparse.ArgumentTypeError(f"must be {shown}, got {text!r}")
        return value

    convert.__name__ = f"number({shown})"
    return convert


def bounded_int(low: int, high: int) -> Callable[[object], int]:
    """A converter for a whole number in [low, high]."""

    def convert(text: object) -> int:
        value = _whole(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high}, got {text!r}")
        return value

    convert.__name__ = f"integer({low}..{high})"
    return convert


def positive_finite_float(text: object) -> float:
    """A number above 0 that is finite (no upper bound beyond that)."""
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


positive_float = positive_finite_float  # the serve commands' older name


def non_negative_float(text: object) -> float:
    """A finite number >= 0."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def positive_int(text: object) -> int:
    """A whole number >= 1."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return value


def non_negative_int(text: object) -> int:
    """A whole number >= 0."""
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def fraction(text: object) -> float:
    """A finite number from 0 to 1."""
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a fraction from 0 to 1, got {text!r}")
    return value


def port(text: object) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    try:
        value = int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535, got {value}")
    return value
