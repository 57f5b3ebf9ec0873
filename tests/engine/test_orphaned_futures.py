"""A Ctrl-C through Modal's SDK printed a traceback per sandbox in flight: its inner calls failed against the
terminated sandboxes after the engine stopped waiting, and asyncio reported each as never retrieved."""

from __future__ import annotations

import asyncio
import gc
import io
import logging

from harness.engine.orphaned_futures import OrphanedFutureFilter


def _orphans(count: int, with_filter: bool) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    if with_filter:
        handler.addFilter(OrphanedFutureFilter())
    logger = logging.getLogger("asyncio")
    logger.addHandler(handler)
    loop = asyncio.new_event_loop()
    try:
        for i in range(count):
            future = loop.create_future()
            try:
                raise LookupError(f"Task ta-{i} is not running: Sandbox was terminated")
            except LookupError as exc:  # raised, as an SDK's is, so it carries a traceback
                future.set_exception(exc)
            del future
            gc.collect()  # asyncio reports an unretrieved exception when the future is collected
    finally:
        loop.close()
        logger.removeHandler(handler)
    return stream.getvalue()


def test_never_retrieved_sdk_failures_are_one_line_not_a_traceback_each() -> None:
    assert _orphans(3, with_filter=False).count("Traceback") == 3  # what a stop printed before
    shown = _orphans(3, with_filter=True)
    assert "Traceback" not in shown
    assert shown.count("\n") == 1
    assert shown.startswith("WARNING asyncio: a vendor SDK's call ended in LookupError: Task ta-0 is not running")


def test_other_asyncio_errors_pass_unchanged() -> None:
    record = logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "Unclosed client session", (), None)
    assert OrphanedFutureFilter().filter(record) and record.msg == "Unclosed client session"
