"""What report.html and compare.html say to someone reading them in a browser (issue #35 rows 5 and 8), checked
through the page's text with the markup stripped, as a browser renders it."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

REPO = Path(__file__).resolve().parent.parent


def stampede(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, timeout=180, cwd=REPO
    )


def page_text(path: Path) -> str:
    """The page as text: tags dropped (cells and blocks separated by a space), entities decoded, style removed."""
    markup = re.sub(r"<style>.*?</style>", " ", path.read_text(), flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", markup))).strip()


def failing_run(root: Path, run_id: str = "failing", profile: str = "modal-like") -> Path:
    """One stage of 400 rollouts, about 10% of them failing before they became interactive."""
    stage = SyntheticStage(100, 400, init_failure_p=0.10)
    return write_synthetic_run(root, SyntheticRun(run_id=run_id, profile=profile, stages=(stage,), seed=3))


def test_report_html_opens_with_every_threshold_and_its_verdict(tmp_path: Path) -> None:
    run_dir = failing_run(tmp_path)
    out = tmp_path / "report"
    result = stampede(
        "report", str(run_dir), "-o", str(out), "--no-figures",
        "--threshold", "init_failure_rate<2%", "--threshold", "tti.p50<60",
    )  # fmt: skip
    assert result.returncode == 99, result.stdout + result.stderr
    assert "CROSSED" in result.stdout
    text = page_text(out / "report.html")
    top = text[: text.index("Knee")]  # everything above the first section
    assert "thresholds: 1 of 2 CROSSED (exit 99)" in top
    crossed = re.search(r"init_failure_rate<2% run (\S+) \((\S+)%\) CROSSED", top)
    assert crossed is not None, top
    assert float(crossed.group(2)) > 2
    assert re.search(r"tti\.p50<60 run \S+ s OK", top), top
    # the verdict comes before the run's own (green) ending line
    assert top.index("CROSSED") < top.index("ended: completed")
