"""The public leaderboard's published results as fit input: computesdk/benchmarks' results JSON, one vendor.

computesdk publishes one file per mode and day (`results/<mode>_tti/<date>.json`, and `latest.json`): for each
vendor, every iteration's TTI in ms (or its error) and a summary of median / p95 / p99 taken after trimming 5% from
each end. So a dated profile of any vendor they measure needs nothing but that file: each vendor's entry becomes one
`ProtocolObservation` with the raw samples of its successes and the quantiles as the file publishes them (the figure
a fit has to reproduce), computed the same way from the samples where a file carries no summary.

The mode comes from the entry (`mode`: "concurrent" is their burst, "staggered"), or from the folder the file sits in
(`sequential_tti/`), else sequential: their oldest files and the sequential ones name no mode. Width is the entry's
`concurrency` (100 in their daily runs), 1 for sequential. Their error strings are sorted into our failure kinds
and phases by what they say ("429", "quota exceeded", "creation timed out", "First command execution timed out"),
so a vendor's published refusals count as the same kinds our own runs record.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from foundation.errors import UsageError
from harness.fitting.observations import ProtocolObservation
from providers.sim.core.calibration import computesdk_stats

TRIM = 0.05  # computesdk trims 5% from each end before its median / p95 / p99 (their src/util/stats.ts)
_MODES = {"sequential": "sequential", "staggered": "staggered", "burst": "burst", "concurrent": "burst"}
_FOLDER_MODES = {"sequential_tti": "sequential", "staggered_tti": "staggered", "burst_tti": "burst"}
_SUMMARY_KEYS = {"median": "p50", "p95": "p95", "p99": "p99"}
# Their error strings -> our "kind@phase", first match wins. The order matters: a 429 inside "Failed to create" is
# a rate limit, not a generic create error.
_ERROR_KINDS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), kind)
    for pattern, kind in (
        (r"\b429\b|rate.?limit|too many requests", "rate_limited@create"),
        (r"quota|concurren\w* limit|insufficient balance", "quota_exhausted@create"),
        (r"unauthori[sz]ed|invalid or expired token|forbidden|\b401\b|\b403\b", "auth@create"),
        (r"first command execution timed out", "exec_timeout@exec"),
        (r"creation timed out|identity check timed out|timed out|timeout", "ready_timeout@ready"),
        (r"enotfound|econnreset|econnrefused|socket hang up|getaddrinfo|connection lost", "transport@create"),
        (r"command failed|exit code", "exec_error@exec"),
        (r"failed to create|creat|\b5\d\d\b|internal", "create_error@create"),
    )
)


def failure_key(error: str) -> str:
    """One published error string as the `kind@phase` our own runs would record for it."""
    for pattern, kind in _ERROR_KINDS:
        if pattern.search(error):
            return kind
    return "unknown@unknown"


def is_public_results_file(path: Path | str) -> bool:
    """Whether a `--fit` input is a published results file (a .json file) rather than a stampede run folder."""
    path = Path(path)
    return path.suffix.lower() == ".json" and not path.is_dir()


def read_public_results(path: Path | str, vendor: str | None = None) -> list[ProtocolObservation]:
    """The observations one computesdk results file holds for one vendor (one per mode in the file).

    `vendor` is matched case-insensitively against the file's `provider` names; it may be left out when the file
    measures one vendor only. A file that is not a results file, or a vendor it does not hold, is one UsageError
    line naming what the file does hold."""
    path = Path(path)
    data = _load(path)
    entries = [e for e in data["results"] if isinstance(e, dict) and isinstance(e.get("provider"), str)]
    if not entries:
        raise UsageError(f"{path}: no vendor results in this computesdk results file")
    names = sorted({e["provider"] for e in entries})
    if vendor is None:
        if len(names) > 1:
            raise UsageError(f"{path} measures {len(names)} vendors; pick one with --vendor: {', '.join(names)}")
        vendor = names[0]
    chosen = [e for e in entries if e["provider"].lower() == vendor.lower()]
    if not chosen:
        raise UsageError(f"{path} has no results for {vendor!r}; it measures: {', '.join(names)}")
    measured = [e for e in chosen if not e.get("skipped")]
    if not measured:
        reason = next((str(e.get("skipReason")) for e in chosen if e.get("skipReason")), "no reason given")
        raise UsageError(f"{path}: {vendor} was skipped in this run ({reason}), nothing to fit")
    config = data.get("config")
    config = config if isinstance(config, dict) else {}
    return [_observation(path, e, config) for e in measured]


def published_date(path: Path | str) -> str:
    """The day the file's run happened (its `timestamp`, else its name), for a dated profile's name and label."""
    path = Path(path)
    stamp = _load(path).get("timestamp")
    if isinstance(stamp, str) and re.match(r"\d{4}-\d{2}-\d{2}", stamp):
        return stamp[:10]
    found = re.match(r"\d{4}-\d{2}-\d{2}", path.name)
    return found.group(0) if found else "undated"


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a readable JSON results file ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise UsageError(f"{path}: not a computesdk results file (expected an object with a 'results' list)")
    return data


def _mode(path: Path, entry: Mapping[str, Any]) -> str:
    mode = entry.get("mode")
    if mode is not None:
        if mode not in _MODES:
            raise UsageError(f"{path}: {entry['provider']}: unknown mode {mode!r} (known: {', '.join(_MODES)})")
        return _MODES[mode]
    return _FOLDER_MODES.get(path.parent.name, "sequential")


def _observation(path: Path, entry: Mapping[str, Any], config: Mapping[str, Any]) -> ProtocolObservation:
    vendor = entry["provider"]
    protocol = _mode(path, entry)
    iterations = entry.get("iterations")
    if not isinstance(iterations, list):
        raise UsageError(f"{path}: {vendor}: 'iterations' is not a list")
    samples: list[float] = []
    failures: dict[str, int] = {}
    for item in iterations:
        if not isinstance(item, dict):
            raise UsageError(f"{path}: {vendor}: an iteration is not an object: {item!r}")
        error = item.get("error")
        if error:
            key = failure_key(str(error))
            failures[key] = failures.get(key, 0) + 1
            continue
        tti = item.get("ttiMs")
        if not isinstance(tti, int | float) or not math.isfinite(tti) or tti < 0:
            raise UsageError(f"{path}: {vendor}: an iteration's ttiMs is not a duration: {tti!r}")
        samples.append(float(tti) / 1000.0)
    attempts = len(iterations) or int(config.get("iterations") or 0)
    quantiles = _published_quantiles(path, entry) or (computesdk_stats(samples, TRIM) if samples else {})
    if not quantiles and failures:
        kinds = ", ".join(f"{n} {key}" for key, n in sorted(failures.items(), key=lambda kv: -kv[1]))
        raise UsageError(f"{path}: {vendor}: every iteration failed ({kinds}), no TTI to fit")
    if not quantiles:
        raise UsageError(f"{path}: {vendor}: neither iteration samples nor a summary to fit")
    success = entry.get("successRate")
    if not isinstance(success, int | float):
        success = len(samples) / attempts if attempts else 0.0
    width = entry.get("concurrency")
    concurrency = (
        int(width) if isinstance(width, int | float) and width >= 1 else (1 if protocol == "sequential" else 100)
    )
    folder = {mode: folder for folder, mode in _FOLDER_MODES.items()}[protocol]  # where computesdk publishes it
    return ProtocolObservation(
        protocol=protocol,
        concurrency=concurrency,
        attempts=attempts,
        tti_s=tuple(sorted(samples)),
        quantiles=quantiles,
        trimmed=TRIM,
        success_rate=float(success),
        failures=failures,
        source=f"computesdk results/{folder}/{path.name}, {vendor}",
    )


def _published_quantiles(path: Path, entry: Mapping[str, Any]) -> dict[str, float]:
    """The file's own summary (ms -> s): the figures a fit reproduces. Empty when the file carries none, or an
    all-zero one (what computesdk writes when every iteration failed)."""
    summary = entry.get("summary")
    stats = summary.get("ttiMs") if isinstance(summary, dict) else None
    if not isinstance(stats, dict):
        return {}
    out: dict[str, float] = {}
    for theirs, ours in _SUMMARY_KEYS.items():
        value = stats.get(theirs)
        if value is None:
            continue
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise UsageError(f"{path}: {entry['provider']}: summary ttiMs.{theirs} is not a duration: {value!r}")
        out[ours] = float(value) / 1000.0
    return out if any(out.values()) else {}
