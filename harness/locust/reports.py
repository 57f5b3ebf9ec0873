"""Locust's own CSV and HTML reports, saved beside the parquet (`locust_stats.csv`, `locust_stats_history.csv`,
`locust_failures.csv`, `locust_exceptions.csv`, `locust.html`) for users who read Locust's reports.

They are the live view (Locust rounds samples of 10 s and more to whole seconds); the parquet is the truth.
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any

import gevent
from locust import stats
from locust.html import get_html_report

log = logging.getLogger("stampede")


class LocustReports:
    def __init__(self, environment: Any, run_dir: Path) -> None:
        self.environment = environment
        self.run_dir = run_dir
        self.writer = stats.StatsCSVFileWriter(
            environment, stats.PERCENTILES_TO_REPORT, str(run_dir / "locust"), full_history=True
        )
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        self._greenlet = gevent.spawn(self.writer.stats_writer)

    def abandon(self) -> None:
        """The run never started: stop writing, write nothing more (its folder is about to go)."""
        if self._greenlet is not None:
            self._greenlet.kill(block=True)
            self._greenlet = None
        try:
            self.writer.close_files()
        except Exception as exc:  # a courtesy's files; the folder goes anyway
            log.warning("could not close Locust's reports: %s", exc)

    def finish(self) -> None:
        """Final tables (not the last periodic snapshot), the history as it stands, and the HTML report."""
        if self._greenlet is not None:
            self._greenlet.kill(block=True)
            self._greenlet = None
        try:
            for handle, write in (
                (self.writer.requests_csv_filehandle, self.writer.requests_csv),
                (self.writer.failures_csv_filehandle, self.writer.failures_csv),
                (self.writer.exceptions_csv_filehandle, self.writer.exceptions_csv),
            ):
                handle.seek(0)
                handle.truncate()
                write(csv.writer(handle))
            self.writer.close_files()
            html = get_html_report(self.environment, show_download_link=False)
            (self.run_dir / "locust.html").write_text(html, encoding="utf-8")
        except Exception as exc:  # Locust's view is a courtesy; the run's own data must not suffer for it
            log.warning("could not write Locust's reports: %s", exc)
