"""scripts/vendor-suite: the deselect list it keeps (node id pattern -> one-line reason) and the summary it prints.

The script runs a vendor's own tests from a checkout the user points at; what is ours to check without that
checkout is how it reads the deselect file, how it reads pytest's outcomes, and the figures it prints.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import io
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "vendor-suite"


@pytest.fixture(scope="module")
def suite() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("vendor_suite", str(SCRIPT))
    spec = importlib.util.spec_from_loader("vendor_suite", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["vendor_suite"] = module  # dataclasses look their module up while the class is made
    loader.exec_module(module)
    return module


def test_deselect_patterns_match_node_ids_across_folders(suite: ModuleType) -> None:
    deselect = suite.parse_deselect(
        '[deselected]\n"tests/*/template_*/*" = "template builds need E2B\'s build service"\n'
        '"*test_internet_access*" = "a simulated sandbox has no network"\n'
    )
    assert deselect.reason("tests/sync/template_sync/test_build.py::test_build") == (
        "template builds need E2B's build service"
    )
    assert deselect.reason("tests/async/sandbox_async/test_internet_access.py::test_ok[x]") == (
        "a simulated sandbox has no network"
    )
    assert deselect.reason("tests/sync/sandbox_sync/files/test_read.py::test_read") is None


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ('[deselected]\n"a" = "not implemented"\n', "say why"),
        ('[deselected]\n"a" = ""\n', "one-line reason"),
        ('[deselected]\n"a" = "two\\nlines"\n', "one-line reason"),
        ('[deselected]\n"a" = 3\n', "one-line reason"),
        ('[skip]\n"a" = "b"\n', "unknown tables"),
        ("[deselected\n", "not TOML"),
    ],
)
def test_a_deselect_file_without_honest_one_line_reasons_is_refused(
    suite: ModuleType, text: str, complaint: str
) -> None:
    with pytest.raises(suite.DeselectError, match=complaint):
        suite.parse_deselect(text, "e2b-deselected.toml")


def test_the_kept_deselect_files_parse(suite: ModuleType) -> None:
    for path in (SCRIPT.parents[1] / "conformance").glob("*-deselected.toml"):
        deselect = suite.parse_deselect(path.read_text(encoding="utf-8"), path.name)
        assert deselect.reasons, f"{path.name} lists nothing"


def test_a_failing_teardown_fails_a_passed_test(suite: ModuleType, tmp_path: Path) -> None:
    records = [
        {"nodeid": "tests/sync/sandbox_sync/test_kill.py::test_kill", "outcome": "passed"},
        {"nodeid": "tests/sync/sandbox_sync/test_kill.py::test_kill", "outcome": "failed", "when": "teardown"},
        {"nodeid": "tests/sync/sandbox_sync/files/test_read.py::test_read", "outcome": "passed"},
        {"nodeid": "tests/sync/template_sync/test_build.py::test_build", "deselected": "needs the build service"},
    ]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    summary = suite.read_results(results)
    assert summary.outcomes == {
        "tests/sync/sandbox_sync/test_kill.py::test_kill": "failed",
        "tests/sync/sandbox_sync/files/test_read.py::test_read": "passed",
    }
    assert summary.failed == 1
    assert summary.deselected == {"tests/sync/template_sync/test_build.py::test_build": "needs the build service"}


def test_the_summary_gives_totals_areas_failures_and_reasons(suite: ModuleType) -> None:
    summary = suite.Summary(
        outcomes={
            "tests/sync/sandbox_sync/files/test_read.py::test_read": "passed",
            "tests/async/sandbox_async/files/test_write.py::test_write": "failed",
            "tests/sync/sandbox_sync/commands/test_run.py::test_run": "passed",
            "tests/sync/sandbox_sync/test_snapshot.py::test_snapshot": "passed",
            "tests/sync/sandbox_sync/test_kill.py::test_kill": "skipped",
        },
        deselected={
            "tests/sync/template_sync/test_build.py::test_build": "template builds need the build service",
            "tests/async/template_async/test_build.py::test_build": "template builds need the build service",
            "tests/sync/sandbox_sync/test_internet_access.py::test_it": "no network in a simulated sandbox",
        },
    )
    out = io.StringIO()
    suite.print_summary(summary, suite.VENDORS["e2b"], out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "run 5 passed 3 failed 1 skipped 1 deselected 3"
    assert "  files: run 2 passed 1 failed 1 deselected 0" in lines
    assert "  commands: run 1 passed 1 failed 0 deselected 0" in lines
    assert "  snapshot/fork/pause: run 1 passed 1 failed 0 deselected 0" in lines
    assert "  sandbox lifecycle: run 1 passed 0 failed 0 skipped 1 deselected 1" in lines
    assert "  others: run 0 passed 0 failed 0 deselected 2" in lines
    assert lines[lines.index("failed (1):") + 1] == "  tests/async/sandbox_async/files/test_write.py::test_write"
    reasons = lines[lines.index("deselected (3) by reason:") + 1 :]
    assert reasons == ["  2: template builds need the build service", "  1: no network in a simulated sandbox"]
