"""One redaction for every string that leaves the engine or the session (they end up in files people share).

Three nets, applied together by `redact`:
- the secrets the run knows (its token, provider options whose names say secret), matched in any case, so a
  vendor that echoes an upper-cased copy is caught too;
- anything shaped like a credential beside its name (`Bearer ...`, `token=...`, `"api_key": "..."`);
- anything shaped like a minted token: 32 or more URL-safe characters mixing upper and lower case (per-sandbox
  gateway tokens are handed out by the vendor mid-run, so no list of known secrets has them; 0 of 200,000
  `secrets.token_urlsafe(24)` got through). Hex ids (container ids), UUIDs and CamelCase names stay readable.
`redact_data` applies it to every string of a JSON-like record (run.json parameters).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

MAX_ERROR_CHARS = 300
MASK = "***"
MIN_SECRET_CHARS = 4  # shorter values would mask ordinary words
SECRET_OPTION_WORDS = (
    "token",
    "secret",
    "password",
    "passwd",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "credential",
    "authorization",
)
"""A provider option whose name contains one of these holds a secret (`token_secret`, `api_key`, `token`)."""

_SECRET_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"),
    # the value: not a placeholder (`api_key=...`, `token=<yours>`: a hint, not a secret), and a closing bracket
    # after it is the sentence's, not the secret's ("(or token=abc)" keeps its parenthesis)
    re.compile(
        r"(?i)((?:api[_-]?key|token|secret|password|authorization)[\"']?\s*[=:]\s*[\"']?)"
        r"(?!\.\.\.|<)[^\s\"',;&]*[^\s\"',;&)\]}]"
    ),
    re.compile(r"\b(?:sk|ak|as|pit|pk)-[A-Za-z0-9_-]{12,}\b"),
)
_MINTED_TOKEN = re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{32,}(?![A-Za-z0-9_-])")


def is_secret_option(name: str) -> bool:
    """Does a provider option's name say it holds a secret?"""
    lowered = str(name).lower()
    return any(word in lowered for word in SECRET_OPTION_WORDS)


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The values of the options whose names say secret (what `redact` must mask wherever it appears)."""
    return [str(value) for key, value in options.items() if is_secret_option(key) and value not in (None, "")]


@functools.lru_cache(maxsize=64)
def _known(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    words = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)
    if not words:
        return None
    return re.compile("|".join(re.escape(word) for word in words), re.IGNORECASE)


def _mask_minted(match: re.Match[str]) -> str:
    """Random URL-safe text mixes cases (and mostly digits or `-_`); a long CamelCase name has few capitals."""
    word = match.group(0)
    upper = sum(c.isupper() for c in word)
    if not upper or not any(c.islower() for c in word):
        return word  # hex ids, snake_case, CONSTANTS
    symbols = any(c.isdigit() or c in "-_" for c in word)
    return MASK if symbols or upper >= len(word) / 4 else word


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove known secret values (in any case), credential-shaped text and minted tokens."""
    known = _known(tuple(str(s) for s in secrets if s))
    if known is not None:
        text = known.sub(MASK, text)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + MASK, text)
    return _MINTED_TOKEN.sub(_mask_minted, text)


def redact_data(data: Any, secrets: Iterable[str] = ()) -> Any:
    """`data` with every string in it (values, not keys) redacted; other values as they are."""
    secrets = tuple(secrets)
    if isinstance(data, str):
        return redact(data, secrets)
    if isinstance(data, Mapping):
        return {key: redact_data(value, secrets) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_data(value, secrets) for value in data]
    return data


def short_error(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """One line: exception type and message, redacted and bounded."""
    message = str(exc).strip().replace("\n", " ")
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    text = redact(text, secrets)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1] + "…"
    return text


class RedactingFormatter(logging.Formatter):
    """Log lines (tracebacks included) pass through `redact` before they reach stderr."""

    def __init__(self, secrets: Iterable[str] = (), fmt: str | None = None) -> None:
        super().__init__(fmt)
        self.secrets = tuple(secrets)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record), self.secrets)
