"""deploy/grafana/stampede-run.json: every panel's PromQL names only series the `--metrics-port` endpoint exports
(read from its collector, `run_families`, never a copied list), covers what the report shows, and parses as PromQL
(Debian's promtool, when installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.locust.live.metrics_endpoint import RunView, run_families
from harness.wire.live_metrics import PHASE_FIELDS, RowMetrics
from harness.wire.messages import EngineStats

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "stampede-run.json"
METRIC = re.compile(r"\bstampede_[a-z0-9_]+\b")
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$worker": ".*"}  # what Grafana puts in before Prometheus sees it


def exported_series() -> set[str]:
    """Every series name a scrape of a busy run returns: each family's samples (`_total`, `_bucket`, ...)."""
    rows = RowMetrics()
    phases = {attribute: 0.01 for attribute in PHASE_FIELDS.values()}
    rows.observe(SimpleNamespace(tti_s=0.03, failure_kind=None, failure_phase=None, **phases))
    rows.observe(SimpleNamespace(tti_s=None, failure_kind="capacity", failure_phase="create", **phases))
    view = RunView(engines={"w1": EngineStats(inflight=1, metrics=rows.to_wire())}, stage="01", target_users=4)
    return {sample.name for family in run_families(view) for sample in family.samples}


def targets() -> list[tuple[str, str]]:
    """(panel title, expression) of every query in the dashboard, its template variable's included."""
    dashboard = json.loads(DASHBOARD.read_text())
    out: list[tuple[str, str]] = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel.get("targets"), f"panel {panel['title']!r} has no query"
        out += [(panel["title"], target["expr"]) for target in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        query: Any = variable.get("query")
        if isinstance(query, dict):
            out.append((f"variable {variable['name']}", query["query"]))
    return out


def test_every_query_names_only_what_the_endpoint_exports():
    exported = exported_series()
    assert {"stampede_tti_wall_seconds_bucket", "stampede_rollouts_started_total"} <= exported
    named: set[str] = set()
    for title, expr in targets():
        names = set(METRIC.findall(expr))
        assert names, f"{title!r}: {expr} names no stampede metric"
        assert names <= exported, f"{title!r}: {sorted(names - exported)} is not exported"
        named |= names
    print(f"{len(targets())} queries over {len(named)} of {len(exported)} exported series")


def test_it_shows_the_run_as_the_report_does():
    exprs = "\n".join(expr for _, expr in targets())
    for series in (
        "stampede_in_flight",
        "stampede_stage_target_users",
        "stampede_rollouts_started_total",
        "stampede_rollouts_completed_total",
        "stampede_rollout_failures_total",
        "stampede_engine_loop_lag_p99_seconds",
        "stampede_engine_cpu_ratio",
    ):
        assert series in exprs, series
    for q in ("0.5", "0.9", "0.99"):
        assert f"histogram_quantile({q}, sum by (le) (rate(stampede_tti_wall_seconds_bucket" in exprs
        assert f"histogram_quantile({q}, sum by (le, phase) (rate(stampede_phase_wall_seconds_bucket" in exprs
    assert "sum by (kind, phase)" in exprs


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian's prometheus package (promtool) not installed")
def test_every_query_parses_as_promql(tmp_path):
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    for i, (_, expr) in enumerate(targets()):
        if expr.startswith("label_values("):  # Grafana's own function, not PromQL
            continue
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        rules += [f"      - record: dashboard:query{i}", f"        expr: {json.dumps(expr)}"]
    path = tmp_path / "rules.yml"
    path.write_text("\n".join(rules) + "\n")
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
