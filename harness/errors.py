"""The one error the analysis commands let reach the user: bad input, printed as one line with exit status 2."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import TypeVar

EXIT_USAGE = 2

F = TypeVar("F", bound=Callable[..., int])


class AnalysisInputError(Exception):
    """Input a user can get wrong (missing folder, not a run, bad config or latency model)."""


def one_line_errors(run: F) -> F:
    """Turn AnalysisInputError into `stampede: error: ...` on stderr and exit status 2, wherever run() is wired."""

    @wraps(run)
    def wrapper(*args: object, **kwargs: object) -> int:
        try:
            return run(*args, **kwargs)
        except AnalysisInputError as exc:
            print(f"stampede: error: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return wrapper  # type: ignore[return-value]
