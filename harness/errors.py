"""The one kind of error a user can cause: bad input, printed as one line on stderr with exit status 2.

Every part of the harness raises `UsageError` (defined in `foundation.errors`, shared with the vendors' serve
commands) for a mistake the user can fix (a bad setting, plan, duration,
config, latency model or run folder, a vendor that cannot start); the command line prints it and exits 2.
Errors that are not the user's (the engine went away, a vendor failed) have their own classes where they are
raised; the provider contract's `ProviderConfigError` stays in `providers.base` (providers import no harness).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import TypeVar

from foundation.errors import EXIT_USAGE, UsageError

F = TypeVar("F", bound=Callable[..., int])


def print_usage_error(exc: BaseException) -> int:
    """`stampede: error: ...` on stderr; the exit status to return."""
    print(f"stampede: error: {exc}", file=sys.stderr)
    return EXIT_USAGE


def one_line_errors(run: F) -> F:
    """Turn UsageError into one line and exit status 2, wherever a command's run() is entered."""

    @wraps(run)
    def wrapper(*args: object, **kwargs: object) -> int:
        try:
            return run(*args, **kwargs)
        except UsageError as exc:
            return print_usage_error(exc)

    return wrapper  # type: ignore[return-value]
