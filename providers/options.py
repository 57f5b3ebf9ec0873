"""Provider options (`--provider-option KEY=VALUE`, or JSON to the engine) parsed one way for every adapter.

An adapter declares the keys it accepts, each an `Option` with its default, a converter and what a good
value looks like; `parse_options` returns the typed values and raises `ProviderConfigError` with one line
for a key nobody declared (a typo must not silently do nothing) or a value its converter refuses. Every
adapter declares `base_url` and `token` when it uses them: the harness passes them to the provider it runs
(and, with `--local`, whatever keys the simulated vendor announces, e.g. modal's `token_id`).

An option that is a field of the adapter's options dataclass is declared on the field (`declare`): the field's
default is the option's default, written once, and `declared_options` / `declared_values` read the specs and the
parsed values back off the dataclass, so the spec, the dataclass and what a parse returns cannot disagree.

Values arrive as strings from the command line and as JSON values from the engine's config; the
converters take both. A missing key or a `None` value is the default. Imports only `providers.base`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from providers.base import ProviderConfigError

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_DECLARED = "stampede_option"  # a dataclass field's metadata key: (option key, Option)


@dataclass(frozen=True, slots=True)
class Option:
    """One declared key: its default, how a raw value becomes a typed one, and what a good value is."""

    default: Any
    convert: Callable[[Any], Any]  # raises ValueError or TypeError on a value it refuses
    expects: str  # completes "<key> must be ..." in the error line


def parse_options(provider: str, options: Mapping[str, Any], declared: Mapping[str, Option]) -> dict[str, Any]:
    """Every declared key's typed value (its default when absent); one-line `ProviderConfigError` otherwise."""
    unknown = sorted(set(options) - set(declared))
    if unknown:
        raise ProviderConfigError(
            f"{provider} provider: unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(declared))})"
        )
    values: dict[str, Any] = {}
    for key, option in declared.items():
        raw = options.get(key)
        if raw is None:
            values[key] = option.default
            continue
        try:
            values[key] = option.convert(raw)
        except (TypeError, ValueError):
            raise ProviderConfigError(f"{provider} provider: {key} must be {option.expects} (got {raw!r})") from None
    return values


# --- the kinds of option ------------------------------------------------------------------------------------


def text(default: str | None = None) -> Option:
    """A string; an empty one is the default."""

    def convert(raw: Any) -> str | None:
        if isinstance(raw, (Mapping, list, tuple, set)):
            raise TypeError(raw)
        value = str(raw)
        return value if value else default

    return Option(default, convert, "a string")


def flag(default: bool, *, true: Sequence[str] = (), false: Sequence[str] = ()) -> Option:
    """On or off: 1/0, true/false, yes/no, on/off (and the extra words given); an empty string is the default."""
    on, off = _TRUE | {word.lower() for word in true}, _FALSE | {word.lower() for word in false}

    def convert(raw: Any) -> bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, int) and raw in (0, 1):
            return bool(raw)
        word = str(raw).strip().lower()
        if word in on:
            return True
        if word in off:
            return False
        if word == "":
            return default
        raise ValueError(raw)

    return Option(default, convert, "1 or 0")


def integer(default: int | None, *, minimum: int | None = None) -> Option:
    """A whole number (at least `minimum`)."""

    def convert(raw: Any) -> int:
        if isinstance(raw, bool) or isinstance(raw, float):
            raise TypeError(raw)
        value = int(str(raw).strip())
        if minimum is not None and value < minimum:
            raise ValueError(raw)
        return value

    expects = "a whole number" if minimum is None else f"a whole number >= {minimum}"
    return Option(default, convert, expects)


def number(default: float | None, *, positive: bool = False) -> Option:
    """A finite number (greater than 0 when `positive`)."""

    def convert(raw: Any) -> float:
        if isinstance(raw, bool):
            raise TypeError(raw)
        value = float(str(raw).strip())
        if not math.isfinite(value) or (positive and value <= 0):
            raise ValueError(raw)
        return value

    return Option(default, convert, "a positive number" if positive else "a number")


def choice(default: str, *choices: str) -> Option:
    """One of a few words (case-insensitive)."""

    def convert(raw: Any) -> str:
        word = str(raw).strip().lower()
        if word not in choices:
            raise ValueError(raw)
        return word

    return Option(default, convert, " or ".join(choices))


def words(default: tuple[str, ...] = ()) -> Option:
    """A list of words: `a,b c` from the command line, or a JSON list."""

    def convert(raw: Any) -> tuple[str, ...]:
        if isinstance(raw, str):
            return tuple(part for part in raw.replace(",", " ").split() if part)
        if isinstance(raw, Sequence):
            return tuple(str(part) for part in raw)
        raise TypeError(raw)

    return Option(default, convert, "a list of words")


def like(default: Any) -> Option:
    """The kind of option its default is: bool, int, float, tuple of words, or str."""
    if isinstance(default, bool):
        return flag(default)
    if isinstance(default, int):
        return integer(default)
    if isinstance(default, float):
        return number(default)
    if isinstance(default, tuple):
        return words(default)
    return text(default)


# --- options declared on an adapter's options dataclass -----------------------------------------------------


def declare(default: Any, kind: Callable[..., Option] = like, *args: Any, key: str | None = None, **limits: Any) -> Any:
    """A dataclass field that is also an option: `kind(default, *args, **limits)` is its spec (`like`: typed by
    the default), so the default is written here once. `key` is the option's name where it is not the field's
    (`preflight_timeout` fills `preflight_timeout_s`)."""
    return dataclasses.field(default=default, metadata={_DECLARED: (key, kind(default, *args, **limits))})


def _declared_fields(record: type) -> list[tuple[str, str, Option]]:
    """(option key, field name, spec) of every field of `record` made with `declare`."""
    found = []
    for spec_field in dataclasses.fields(record):
        declared = spec_field.metadata.get(_DECLARED)
        if declared is not None:
            key, option = declared
            found.append((key or spec_field.name, spec_field.name, option))
    return found


def declared_options(record: type) -> dict[str, Option]:
    """The options `record`'s fields declare, by option key (merge the keys that are no field, e.g. `token`)."""
    return {key: option for key, _, option in _declared_fields(record)}


def declared_values(record: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """The parsed values of `record`'s declared fields, by field name: keyword arguments for its constructor."""
    return {name: values[key] for key, name, _ in _declared_fields(record)}
