"""What report.html and compare.html say to someone reading them in a browser (issue #35 rows 5 and 8), checked
through the page's text with the markup stripped, as a browser renders it."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.results.test_startup_across_retries import write_retried_run
from tests.support.commands import stampede
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

REPO = Path(__file__).resolve().parents[3]


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


def test_run_and_report_name_the_same_figures_the_same_way(tmp_path: Path) -> None:
    run_dir = failing_run(tmp_path)
    summary = stampede("summary", str(run_dir))
    report = stampede("report", str(run_dir), "-o", str(tmp_path / "report"), "--no-figures")
    assert summary.returncode == 0 and report.returncode == 0, summary.stderr + report.stderr
    run_header = next(line for line in summary.stdout.splitlines() if line.startswith("stage "))
    report_header = next(line for line in report.stdout.splitlines() if line.startswith("stage "))
    for header in (run_header, report_header):
        names = header.split()
        assert "fail%" in names and "starts/vendor" in names and "target" in names, header
        assert "ok%" not in names and "per" not in names and "users" not in names, header
    # and the same number under the same name
    fail = [line.split()[header.split().index("fail%")] for header, line in (
        (run_header, summary.stdout.splitlines()[summary.stdout.splitlines().index(run_header) + 2]),
        (report_header, report.stdout.splitlines()[report.stdout.splitlines().index(report_header) + 2]),
    )]  # fmt: skip
    assert fail[0] == fail[1], fail


def test_side_by_side_tells_two_runs_of_one_provider_and_profile_apart(tmp_path: Path) -> None:
    first, second = failing_run(tmp_path, "monday"), failing_run(tmp_path, "tuesday")
    out = tmp_path / "report"
    result = stampede("report", str(first), str(second), "-o", str(out), "--no-figures")
    assert result.returncode == 0, result.stderr
    text = page_text(out / "report.html")
    side = text[text.index("Side by side") :]
    assert "stub/modal-like (monday) p50" in side and "stub/modal-like (tuesday) p50" in side, side[:400]


def _widest_table_px(page: Path, width: int) -> float:
    """The right edge of the widest table as headless Chromium lays the page out in a `width` px window."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        pytest.skip("no headless Chromium (apt-get install chromium)")
    probe = page.with_name("probe.html")
    measure = (
        "<script>document.body.setAttribute('data-widest', Math.max(...Array.from("
        "document.querySelectorAll('table'), t => t.getBoundingClientRect().right)));</script>"
    )
    probe.write_text(page.read_text().replace("</body>", measure + "</body>"))
    result = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},900", "--dump-dom",
         probe.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    found = re.search(r'data-widest="([\d.]+)"', result.stdout)
    assert found, result.stderr[-2000:]
    return float(found.group(1))


def test_report_and_compare_tables_fit_a_1400_px_window(tmp_path: Path) -> None:
    # runs with retries: the widest stage table (attempts, retries, gave up, startup across retries)
    runs = [
        write_retried_run(tmp_path, name, timeout_s=t)
        for name, t in (("2026-12-05T10-00-00-a1b2", 30.0), ("2026-12-05T11-00-00-c3d4", 10.0))
    ]
    report = stampede("report", *map(str, runs), "-o", str(tmp_path / "report"), "--no-figures")
    assert report.returncode == 0, report.stderr
    compare = stampede("compare", *map(str, runs), "-o", str(tmp_path / "compare"), "--no-figures")
    assert compare.returncode in (0, 98), compare.stderr
    for page in (tmp_path / "report" / "report.html", tmp_path / "compare" / "compare.html"):
        assert _widest_table_px(page, 1400) <= 1400, page.name
