"""Short, secret-free error strings for the results (they end up in files people share)."""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_ERROR_CHARS = 300

_SECRET_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"),
    re.compile(r"(?i)((?:api[_-]?key|token|secret|password|authorization)[\"']?\s*[=:]\s*[\"']?)[^\s\"',;&]+"),
    re.compile(r"\b(?:sk|ak|as|pit|pk)-[A-Za-z0-9_-]{12,}\b"),
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove known secret values and anything shaped like a credential."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "***", text)
    return text


def short_error(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """One line: exception type and message, redacted and bounded."""
    message = str(exc).strip().replace("\n", " ")
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    text = redact(text, secrets)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1] + "…"
    return text
