"""`stampede calibrate --fit FILE.json --vendor V`: a dated profile of a vendor from one published results file."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from providers.sim.core.profile import load_profile
from tests.fitting.test_public_results import BURST, SEQUENTIAL
from tests.support.commands import stampede


def test_fit_from_published_files_writes_a_profile_naming_them_and_prints_the_fit(tmp_path: Path) -> None:
    out = tmp_path / "modal-fitted.toml"
    done = stampede(
        "calibrate", "--fit", str(SEQUENTIAL), str(BURST), "--vendor", "modal", "--name", "modal-fitted",
        "--prior", "modal-like", "--out", str(out), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # the fit per protocol: the file's published p50 (seconds) beside the fitted profile's simulated one
    assert re.search(r"^\| sequential@1 \| p50 \| 1\.72 s \| 1\.7\d s \| [+-]\d\.\d% \| yes \|$", done.stdout, re.M)
    assert re.search(r"^\| burst@100 \| p50 \| 2\.26 s \| 2\.[23]\d s \| [+-]\d\.\d% \| yes \|$", done.stdout, re.M)
    text = out.read_text()
    assert "computesdk results/sequential_tti/2026-05-05.json, modal" in text
    assert "computesdk results/burst_tti/2026-05-05.json, modal" in text
    profile = load_profile(str(out))
    assert profile.name == "modal-fitted"
    assert tomllib.loads(text)["boot"]["median_s_label"].startswith("calibrated: fitted by stampede calibrate --fit")


def test_a_file_of_several_vendors_without_vendor_is_one_usage_line(tmp_path: Path) -> None:
    done = stampede("calibrate", "--fit", str(BURST), "--name", "x", "--out", str(tmp_path / "x.toml"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().endswith("pick one with --vendor: e2b, modal") and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "x.toml").exists()
