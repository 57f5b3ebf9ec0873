"""`stampede report` on real burst-hold runs (issue #32): the protocol's section shows the numbers summary.json's
`burst_hold` and `engine_health` carry, labelled with its run when several are side by side, and a run of any other
scenario gets no such section (harness.results.render.burst_hold_report)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from harness.results.render.burst_hold_report import BURST_HOLD_FIGURE, BURST_HOLD_NOTE
from harness.results.render.report import build_report
from harness.results.render.report_tables import Table, seconds
from tests.support.commands import stampede

pytestmark = pytest.mark.slow
FIGURE = BURST_HOLD_FIGURE[0]


def real_run(out: Path, run_id: str, *options: str) -> Path:
    result = stampede(
        "run", *options, "--profile", "ideal", "--out", str(out), "--run-id", run_id, "--progress-interval", "0"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out / run_id


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("runs")
    return {
        "bh": real_run(out, "bh", "--scenario", "burst-hold", "--users", "200", "--hold", "3"),
        "bh2": real_run(out, "bh2", "--scenario", "burst-hold", "--users", "120", "--hold", "3"),
        "plain": real_run(out, "plain", "--scenario", "burst", "--users", "50"),
    }


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def label(run_dir: Path) -> str:
    return f"stub/ideal ({run_dir.name})"


SECTION = (
    "result states",
    "allocate and readiness",
    "held at once",
    "TTI by submission quartile",
    "per engine",
    "per simulated vendor process",
)
"""What each of the section's tables' titles says, in the order the report prints them."""


def burst_tables(tables: list[Table], run_dir: Path) -> dict[str, Table]:
    """The run's burst-hold tables (their titles start with its label), keyed by `SECTION`."""
    found = [t for t in tables if t.title.startswith(f"{label(run_dir)}: burst-hold")]
    keyed = {key: t for t in found for key in SECTION if key in t.title}
    assert len(keyed) == len(found)
    return keyed


def cell(text: str) -> str:
    return text.removesuffix("~")  # the small-sample mark: the value is the same


def check_against_summary(tables: dict[str, Table], run_dir: Path) -> None:
    """Every number of the section equals summary.json's, as the report prints seconds."""
    document = summary(run_dir)
    figures = document["burst_hold"]
    states = tables["result states"]
    counts = {row[0]: int(row[1]) for row in states.rows}
    assert counts["success"] == figures["states"]["success"]
    assert counts["partial"] == figures["states"]["partial"]
    assert counts["readiness failed"] == figures["states"]["readiness_failed"]
    assert counts["failed"] == figures["states"]["failed"]
    for kind in ("timeout", "http", "network", "other"):
        assert counts[f"  create {kind}"] == figures["create_failures"][kind]
    assert f"{figures['n']} sandboxes fired at t=0, hold {figures['hold_s']:g} s" in states.title

    latency = {row[0]: row for row in tables["allocate and readiness"].rows}
    for name, key in (("allocate (create)", "allocate"), ("readiness", "readiness")):
        row = latency[name]
        assert int(row[1]) == figures[key]["n"]
        assert [cell(c) for c in row[2:]] == [seconds(figures[key][q]) for q in ("p50", "p95", "p99", "max")]

    ((n, reached, peak),) = tables["held at once"].rows
    assert int(n) == figures["n"] and int(peak) == figures["peak_held"]
    assert figures["time_to_n_s"] is not None and reached == seconds(figures["time_to_n_s"])

    quartiles = tables["TTI by submission quartile"].rows
    assert len(quartiles) == len(figures["quartiles"]) == 4
    for row, part in zip(quartiles, figures["quartiles"], strict=True):
        assert row[0] == f"Q{part['quartile']}"
        assert row[1] == f"{seconds(part['submit_from_s'])}..{seconds(part['submit_to_s'])}"
        assert (int(row[2]), int(row[3])) == (part["rollouts"], part["answered"])
        assert (cell(row[4]), cell(row[5])) == (seconds(part["tti_p50_s"]), seconds(part["tti_p99_s"]))

    engines = tables["per engine"]
    assert len(engines.rows) == len(document["engine_health"]) >= 1
    for row, health in zip(engines.rows, document["engine_health"], strict=True):
        assert row[0] == health["worker"] and int(row[1]) == health["rows"]
        assert row[2] == f"{health['loop_lag_max_ms']:.0f}"
        assert (int(row[3]), int(row[5])) == (health["open_fds_max"], health["sockets_max"])
        assert row[6].startswith("(!) bound: ") if health["bound"] else row[6] == "not bound"

    vendors = tables["per simulated vendor process"]
    assert len(vendors.rows) == len(document["vendor_loop"]) == 1  # the embedded vendor, one process
    for row, loop in zip(vendors.rows, document["vendor_loop"], strict=True):
        assert (int(row[0]), int(row[1])) == (loop["shard"], loop["probes"]) and loop["probes"] > 0
        assert (row[2], row[3]) == (f"{loop['lag_p99_ms']:.0f}", f"{loop['lag_max_ms']:.0f}")
        assert row[4].startswith("(!) stalled") if loop["bound"] else row[4] == "not stalled"


def test_report_shows_the_protocols_figures_equal_to_summary_json(runs: dict[str, Path], tmp_path: Path) -> None:
    run_dir = runs["bh"]
    assert summary(run_dir)["burst_hold"]["states"]["success"] == 200
    report = build_report([run_dir], tmp_path / "tables", figures=False)
    tables = burst_tables(report.tables, run_dir)
    assert list(tables) == list(SECTION)
    check_against_summary(tables, run_dir)
    for table in tables.values():  # the terminal text prints each table as built
        assert table.to_text() in report.text

    result = stampede("report", str(run_dir), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-2000:]
    page = (tmp_path / "out" / "report.html").read_text()
    assert f"<h2>{html.escape(label(run_dir))}: burst-hold</h2>" in page
    for table in tables.values():
        assert html.escape(table.title) in page
        for row in table.rows:
            for text in row:
                assert f">{html.escape(text)}<" in page
    assert html.escape(BURST_HOLD_NOTE) in page and html.escape(BURST_HOLD_FIGURE[1]) in page
    png = tmp_path / "out" / FIGURE
    height, width, _ = matplotlib.image.imread(png).shape
    assert width < height  # one column: held, loop lag, TTI by quartile one above the other
    assert page.count("data:image/png;base64,") == 6  # the five figures every report draws, and this one


def test_a_run_of_another_scenario_gets_no_burst_hold_section(runs: dict[str, Path], tmp_path: Path) -> None:
    run_dir = runs["plain"]
    assert "burst_hold" not in summary(run_dir) and summary(run_dir)["engine_health"]  # it has the health rows
    report = build_report([run_dir], tmp_path)
    assert not [t for t in report.tables if "burst-hold" in t.title]
    assert "burst-hold" not in report.text
    page = report.html_path.read_text()
    assert "burst-hold" not in page and "engine_health/" not in page
    assert not (tmp_path / FIGURE).exists()
    assert page.count("data:image/png;base64,") == 5


def test_side_by_side_each_burst_hold_section_is_labelled_with_its_run(runs: dict[str, Path], tmp_path: Path) -> None:
    report = build_report([runs["bh"], runs["plain"], runs["bh2"]], tmp_path)
    for name in ("bh", "bh2"):
        tables = burst_tables(report.tables, runs[name])
        assert list(tables) == list(SECTION)
        check_against_summary(tables, runs[name])
    assert not burst_tables(report.tables, runs["plain"])
    assert summary(runs["bh2"])["burst_hold"]["n"] == 120  # each section its own run's numbers
    page = report.html_path.read_text()
    headings = [f"<h2>{html.escape(label(runs[name]))}: burst-hold</h2>" for name in ("bh", "bh2")]
    assert all(page.count(heading) == 1 for heading in headings)
    assert (
        page.index(headings[0]) < page.index(f"<h2>{html.escape(label(runs['plain']))}</h2>") < page.index(headings[1])
    )
    assert f"<h2>{html.escape(label(runs['plain']))}: burst-hold</h2>" not in page
    height, width, _ = matplotlib.image.imread(tmp_path / FIGURE).shape
    assert width > height  # a column per burst-hold run: two side by side
