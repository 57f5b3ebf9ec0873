"""Sandbox prices as data (prices.toml): which vendor's price applies to a latency model, and what a sandbox-second
costs at the configured size.

A price is only ever a published figure with its source and the date it was read; a vendor without one has no
price, and the dollars built on it are reported as unknown (never as zero).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from harness.errors import UsageError

PRICES_RESOURCE = "prices.toml"
SIMULATED_SUFFIX = "-like"


@dataclass(frozen=True, slots=True)
class Price:
    """One vendor's published rates (None: not published or not found)."""

    vendor: str
    currency: str
    cpu_unit: str
    cpu_s: float | None  # per CPU-second in cpu_unit
    gib_s: float | None  # per GiB-second of memory
    per_create: float | None
    source: str
    seen: str

    @property
    def known(self) -> bool:
        return self.cpu_s is not None and self.gib_s is not None

    def per_sandbox_second(self, cpu: float, memory_gib: float) -> float | None:
        """Dollars per second of one sandbox of this size, or None when a rate is unknown."""
        if not self.known:
            return None
        assert self.cpu_s is not None and self.gib_s is not None
        return cpu * self.cpu_s + memory_gib * self.gib_s

    def describe(self) -> str:
        if not self.known:
            return f"{self.vendor}: no published price recorded ({self.source}; seen {self.seen})"
        from harness.results.render.plain_units import usd

        create = f", {usd(self.per_create)} per create" if self.per_create else ""
        return (
            f"{self.vendor}: {usd(self.cpu_s)} per {self.cpu_unit}-second, {usd(self.gib_s)} per GiB-second{create} "
            f"({self.currency}; {self.source}; seen {self.seen})"
        )


def _number(entry: dict[str, Any], key: str, where: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise UsageError(f"{where}: {key} must be a non-negative number, got {value!r}")
    return float(value)


def price_from_table(vendor: str, entry: dict[str, Any], where: str) -> Price:
    """A Price from a prices.toml table or a config's inline `[sandbox] price = {...}`; source and seen required."""
    for key in ("source", "seen"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise UsageError(f"{where}: a price needs `{key}` (where the figure was published, and the date seen)")
    known = {"currency", "cpu_unit", "cpu_s", "gib_s", "per_create", "source", "seen", "note"}
    unknown = set(entry) - known
    if unknown:
        raise UsageError(f"{where}: unknown price key {sorted(unknown)[0]!r} (known: {', '.join(sorted(known))})")
    return Price(
        vendor=vendor,
        currency=str(entry.get("currency", "USD")),
        cpu_unit=str(entry.get("cpu_unit", "CPU")),
        cpu_s=_number(entry, "cpu_s", where),
        gib_s=_number(entry, "gib_s", where),
        per_create=_number(entry, "per_create", where),
        source=entry["source"],
        seen=entry["seen"],
    )


@cache
def published_prices() -> dict[str, Price]:
    """Every vendor in harness/rlmodel/prices.toml."""
    text = resources.files("harness.rlmodel").joinpath(PRICES_RESOURCE).read_text()
    data = tomllib.loads(text)
    return {name: price_from_table(name, entry, f"prices.toml [{name}]") for name, entry in data.items()}


def vendor_key(provider: str, profile: str) -> tuple[str | None, str]:
    """Which prices.toml vendor a latency model's PROVIDER/PROFILE is priced as, and why.

    A real vendor is priced as itself; a simulated one (`stub/modal-like`, `modal/modal-like`) as the vendor its
    profile imitates, which the output says.
    """
    prices = published_prices()
    base = profile.split("[", 1)[0]
    if base.endswith(SIMULATED_SUFFIX) or "-like-" in base:
        imitated = base.split("-like", 1)[0]
        if imitated in prices:
            return imitated, f"simulated {base}: priced as {imitated}"
    if provider in prices:
        return provider, f"provider {provider}"
    return None, f"no prices.toml vendor matches {provider}/{profile}"


__all__ = ["Price", "price_from_table", "published_prices", "vendor_key"]
