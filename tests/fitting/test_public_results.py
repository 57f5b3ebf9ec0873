"""Reading computesdk/benchmarks' published results files as fit input (issue #31, Deliver 2)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from foundation.errors import UsageError
from harness.fitting.public_results import failure_key, published_date, read_public_results
from providers.sim.core.calibration import _protocols, computesdk_stats, statistic
from providers.sim.core.profile import load_profile

DATA = Path(__file__).with_name("data") / "computesdk-0a010e0"
SEQUENTIAL = DATA / "sequential_tti" / "2026-05-05.json"
STAGGERED = DATA / "staggered_tti" / "2026-05-05.json"
BURST = DATA / "burst_tti" / "2026-05-05.json"
# Modal's published figures for 2026-05-05 (seconds), as providers/sim/core/targets/modal-like.toml cites them
MODAL = {
    SEQUENTIAL: ("sequential", 1, {"p50": 1.723, "p95": 2.309, "p99": 2.494}),
    STAGGERED: ("staggered", 100, {"p50": 1.711, "p95": 2.027, "p99": 2.243}),
    BURST: ("burst", 100, {"p50": 2.261, "p95": 2.943, "p99": 3.023}),
}


@pytest.mark.parametrize("path", list(MODAL), ids=lambda p: p.parent.name)
def test_each_mode_file_gives_modal_s_protocol_width_samples_and_published_quantiles(path: Path) -> None:
    protocol, width, published = MODAL[path]
    (obs,) = read_public_results(path, "Modal")
    assert (obs.protocol, obs.concurrency, obs.attempts, len(obs.tti_s)) == (protocol, width, 100, 100)
    assert obs.quantiles == pytest.approx(published, abs=0.001)
    assert obs.trimmed == 0.05 and obs.success_rate == 1.0 and not obs.failures
    assert obs.source == f"computesdk results/{path.parent.name}/2026-05-05.json, modal"
    assert list(obs.tti_s) == sorted(obs.tti_s) and 1.0 < obs.tti_s[0] < obs.quantiles["p50"]


@pytest.mark.parametrize("path", list(MODAL), ids=lambda p: p.parent.name)
def test_published_summary_is_the_5pct_trimmed_stats_of_the_published_samples(path: Path) -> None:
    """Our reading of their trimming holds: the summary they print is computesdk_stats of their own samples, so a
    fit compared through computesdk_stats is compared with the file like for like."""
    for vendor in ("modal", "e2b"):
        (obs,) = read_public_results(path, vendor)
        assert computesdk_stats(obs.tti_s) == pytest.approx(obs.quantiles, abs=0.0005)


def test_a_file_of_several_vendors_needs_one_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"measures 2 vendors; pick one with --vendor: e2b, modal$"):
        read_public_results(BURST)
    with pytest.raises(UsageError, match=r"no results for 'daytona'; it measures: e2b, modal$"):
        read_public_results(BURST, "daytona")
    one = tmp_path / "one.json"
    data = json.loads(BURST.read_text())
    data["results"] = [r for r in data["results"] if r["provider"] == "e2b"]
    one.write_text(json.dumps(data))
    (obs,) = read_public_results(one)
    assert obs.source.endswith(", e2b") and obs.quantiles["p50"] == pytest.approx(0.822, abs=0.001)


def _write(tmp_path: Path, results: list[dict[str, object]], folder: str = "x") -> Path:
    path = tmp_path / folder / "2026-05-05.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": "1.1", "timestamp": "2026-05-05T01:00:00Z", "results": results}))
    return path


def test_published_errors_count_as_failures_by_kind_and_phase(tmp_path: Path) -> None:
    iterations: list[dict[str, object]] = [{"ttiMs": 500.0 + i} for i in range(95)]
    iterations += [
        {"ttiMs": 0, "error": "Failed to create Vercel sandbox: Status code 429 is not ok"},
        {"ttiMs": 0, "error": "Daytona quota exceeded. Please check your usage at https://daytona.io/"},
        {"ttiMs": 0, "error": "First command execution timed out"},
        {"ttiMs": 0, "error": "Sandbox creation timed out"},
        {"ttiMs": 0, "error": "Failed to create HopX sandbox: An internal error occurred."},
    ]
    path = _write(tmp_path, [{"provider": "acme", "mode": "concurrent", "concurrency": 100, "iterations": iterations}])
    (obs,) = read_public_results(path)
    assert obs.protocol == "burst" and obs.attempts == 100 and len(obs.tti_s) == 95
    assert obs.source == "computesdk results/burst_tti/2026-05-05.json, acme"  # wherever the user saved it
    assert obs.success_rate == pytest.approx(0.95)
    assert obs.failures == {
        "rate_limited@create": 1,
        "quota_exhausted@create": 1,
        "exec_timeout@exec": 1,
        "ready_timeout@ready": 1,
        "create_error@create": 1,
    }
    # no summary in the file: the quantiles are computed from the samples as computesdk computes them
    assert obs.quantiles == computesdk_stats(obs.tti_s)
    assert failure_key("something new") == "unknown@unknown"
    assert failure_key("Network connection lost.") == "transport@create"


def test_mode_from_the_folder_when_the_entry_names_none_and_summary_only_files(tmp_path: Path) -> None:
    summary = {"ttiMs": {"median": 1500.0, "p95": 2000.0, "p99": 2500.0}}
    path = _write(tmp_path, [{"provider": "acme", "iterations": [], "summary": summary}], folder="staggered_tti")
    (obs,) = read_public_results(path)
    assert obs.protocol == "staggered" and obs.tti_s == ()
    assert obs.quantiles == {"p50": 1.5, "p95": 2.0, "p99": 2.5}
    assert read_public_results(_write(tmp_path, [{"provider": "acme", "iterations": [{"ttiMs": 9}]}]))[0].protocol == (
        "sequential"
    )
    assert published_date(path) == "2026-05-05" and published_date(SEQUENTIAL) == "2026-05-05"
    assert obs.source == "computesdk results/staggered_tti/2026-05-05.json, acme"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not a readable JSON results file"),
        ('{"results": 3}', "not a computesdk results file"),
        ('[{"provider": "modal"}]', "not a computesdk results file"),
        ('{"results": []}', "no vendor results"),
        ('{"results": [{"provider": "m", "iterations": [{"ttiMs": "fast"}]}]}', "ttiMs is not a duration"),
        ('{"results": [{"provider": "m", "mode": "weird", "iterations": []}]}', "unknown mode 'weird'"),
        ('{"results": [{"provider": "m", "skipped": true, "skipReason": "no key", "iterations": []}]}', "skipped"),
        ('{"results": [{"provider": "m", "iterations": []}]}', "neither iteration samples nor a summary"),
        (
            '{"results": [{"provider": "m", "iterations": [{"ttiMs": 0, "error": "Sandbox creation timed out"}]}]}',
            r"every iteration failed \(1 ready_timeout@ready\), no TTI to fit",
        ),
    ],
)
def test_a_malformed_file_is_one_usage_error_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=message) as caught:
        read_public_results(path)
    assert "\n" not in str(caught.value)


def test_a_missing_file_is_one_usage_error_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        read_public_results(tmp_path / "nope.json", "modal")


REPRODUCE_SEEDS = range(100, 110)  # not the fit's own seeds: the check is a fresh forward run of the fitted profile


@pytest.mark.slow
@pytest.mark.parametrize("vendor,prior", [("modal", "modal-like"), ("e2b", "e2b-like")])
@pytest.mark.parametrize("path", list(MODAL), ids=lambda p: p.parent.name)
def test_a_fit_from_one_published_file_reproduces_its_quantiles_within_10pct(
    path: Path, vendor: str, prior: str
) -> None:
    """Issue #31's done-when: fit from one public file, then run that file's protocol on the fitted profile
    (calibration's own computesdk protocols, fresh seeds, VirtualClock) and compare the trimmed p50/p95/p99."""
    from harness.fitting.fit import fit_profile

    (obs,) = read_public_results(path, vendor)
    result = fit_profile([obs], load_profile(prior), f"{vendor}-fitted")
    protocol = _protocols()[obs.protocol]
    runs = [protocol(result.profile, seed) for seed in REPRODUCE_SEEDS]
    for stat, published in obs.quantiles.items():
        reproduced = statistics.median(statistic(run, stat) for run in runs)
        assert reproduced == pytest.approx(published, rel=0.10), f"{vendor} {obs.protocol} {stat}"
    assert statistics.median(statistic(run, "success") for run in runs) == pytest.approx(obs.success_rate, abs=0.02)
