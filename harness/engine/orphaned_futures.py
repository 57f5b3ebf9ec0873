"""One line, not a traceback per sandbox, for an SDK's call that failed after nobody waited for it.

At a stop the engine cancels each rollout and terminates its sandbox. Some SDKs (Modal's, through synchronicity)
keep an inner task running after the caller was cancelled; it then fails against the terminated sandbox and asyncio
logs "Future exception was never retrieved" with a full traceback, one per sandbox in flight: a hundred tracebacks
on the run's stderr for a Ctrl-C that went as it should. The rollout's own row already says how it ended.
"""

from __future__ import annotations

import logging

NEVER_RETRIEVED = ("Future exception was never retrieved", "Task exception was never retrieved")


class OrphanedFutureFilter(logging.Filter):
    """Turns asyncio's never-retrieved reports into one line (the first) and a count kept for the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "asyncio" or not str(record.msg).startswith(NEVER_RETRIEVED):
            return True
        self.seen += 1
        if self.seen > 1:
            return False
        error = record.exc_info[1] if record.exc_info else None
        what = f"{type(error).__name__}: {error}" if error is not None else "an error"
        record.msg = (
            f"a vendor SDK's call ended in {what} after its rollout had stopped waiting for it (typically at a "
            "stop); later ones are not shown"
        )
        record.args = ()
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
