"""Vendor behaviour as data: TOML profiles, each number next to the public figure it came from.

A profile is what makes the simulator "Modal-like" or "Prime-like". Keeping it in TOML (not code) lets a
user try "Starter account (100)" against "Team (1000)" with one override and lets every number carry its
provenance: for a field `x`, the string `x_source` says which public source gave it, or
`"assumption: ..."` and why, when nobody published one. Beside it `x_label` says what kind of number it is, as
"<kind>: <why>": `calibrated` (fitted so that a public figure is reproduced; names the `stampede calibrate` checks
that hold it, `protocol/stat`), `documented` (copied from a vendor's docs or a maintainer's statement; no check
holds it), `assumed` (no public figure; why this value), or `circular` (set from the very figure the check that
"holds" it compares with, so passing that check proves nothing). `stampede profiles --provenance` prints them.

Over 600 lines on purpose: it is the profile's schema, one frozen dataclass per TOML section with its checks, read
together by whoever writes a profile (a section's meaning, units and bounds in one place); split, a profile author
would chase one file per section for what a single `[section]` table may hold.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from providers.sim.core.faults import TransportFaults
from providers.sim.core.serving_queue import Serving
from providers.sim.core.vcpu_rate import VcpuRate

PROFILES_DIR = Path(__file__).with_name("profiles")
SOURCE_SUFFIX = "_source"
OVERRIDE_SOURCE = "override: set by the user for this run"
LABEL_SUFFIX = "_label"
LABEL_KINDS = ("calibrated", "documented", "assumed", "circular")
OVERRIDE_LABEL = "assumed: set by the user for this run"
DEFAULTED_LABEL = "assumed: the simulator's default (the profile has no [{section}] section)"


def label_kind(label: str) -> str:
    """The kind of a provenance label ("calibrated: sequential/p50" -> "calibrated"); "" when malformed."""
    kind, colon, why = label.partition(":")
    return kind.strip() if colon and why.strip() and kind.strip() in LABEL_KINDS else ""


class ProfileError(Exception):
    """A profile that cannot be used; the message is one line a user can act on."""


def _non_negative(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if math.isnan(value) or value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def _positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if math.isnan(value) or value <= 0:
            raise ValueError(f"{name} must be > 0, got {value}")


def _probability(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {value}")


@dataclass(frozen=True, slots=True)
class CreateRate:
    """Token bucket on create calls: `per_s` tokens a second, holding at most `burst` (inf = no limit)."""

    per_s: float
    burst: float

    def __post_init__(self) -> None:
        _positive(self, "per_s", "burst")


@dataclass(frozen=True, slots=True)
class Quota:
    """Account concurrency cap: sandboxes not yet ended (pending, provisioning, running) count against it."""

    max_active: float

    def __post_init__(self) -> None:
        _positive(self, "max_active")


@dataclass(frozen=True, slots=True)
class ResourcePool:
    """An account's pool of vCPU, memory and disk (Daytona's organization quota): every sandbox not yet ended
    holds its share, and a create that would overdraw any of the three is refused as quota, whatever the count.

    An optional section: a profile without it has no pool (vendors that count sandboxes use `[quota]`).
    """

    cpu: float = math.inf
    memory_gb: float = math.inf
    disk_gb: float = math.inf

    def __post_init__(self) -> None:
        _positive(self, "cpu", "memory_gb", "disk_gb")


@dataclass(frozen=True, slots=True)
class Pool:
    """Nodes with slots; autoscaling adds nodes after a lag while accepted sandboxes wait for a slot.

    `max_queue`: how many sandboxes may wait once the pool is at `max_nodes` before creates are
    rejected as CAPACITY ("Insufficient capacity"); inf = they just queue.
    """

    initial_nodes: int
    slots_per_node: float
    max_nodes: float
    scale_up_lag_s: float
    scale_down_idle_s: float
    max_queue: float
    initial_nodes_warm: bool = True  # initial nodes hold every image already (no pull)

    def __post_init__(self) -> None:
        _positive(self, "slots_per_node", "max_nodes")
        _non_negative(self, "initial_nodes", "scale_up_lag_s", "scale_down_idle_s", "max_queue")
        if self.initial_nodes > self.max_nodes:
            raise ValueError(f"initial_nodes ({self.initial_nodes}) exceeds max_nodes ({self.max_nodes})")
        if self.max_nodes == math.inf and self.initial_nodes == 0:
            raise ValueError("an unbounded pool needs at least one initial node")


@dataclass(frozen=True, slots=True)
class Image:
    """Cold image pulls on a node that has not pulled the image yet; one shared pull per node and image.

    An image of unknown size (no `stampede-image-mb` label, not in `catalogue`, `size_mb` 0), or a profile with
    neither bandwidth set, pulls in lognormal(`pull_median_s`, `pull_sigma`). Otherwise the pull moves the image's
    layers the node does not hold (`image_pulls.py`): each layer at most `node_bandwidth_mb_s` shared by the node's
    pulls and `registry_bandwidth_mb_s` shared by the account's, kept on the node (at most `cache_mb`, least
    recently used layers evicted first). `catalogue`: entries "PATTERN: layer=MB, layer=MB, {image}=MB", the
    fnmatch PATTERN naming images that share the layers listed (`{image}` is the image's own layer).
    """

    pull_median_s: float
    pull_sigma: float
    pull_failure_prob: float
    size_mb: float = 0.0
    node_bandwidth_mb_s: float = math.inf
    registry_bandwidth_mb_s: float = math.inf
    cache_mb: float = math.inf
    catalogue: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _non_negative(self, "pull_median_s", "pull_sigma", "size_mb")
        _positive(self, "node_bandwidth_mb_s", "registry_bandwidth_mb_s", "cache_mb")
        _probability(self, "pull_failure_prob")
        parse_catalogue(self.catalogue)


OWN_LAYER = "{image}"
"""In a catalogue entry, the image's own layer (named after the image): what no other image shares."""


def parse_catalogue(entries: tuple[str, ...]) -> tuple[tuple[str, tuple[tuple[str, float], ...]], ...]:
    """`[image] catalogue` entries "PATTERN: layer=MB, ..." as (pattern, ((layer, MB), ...)); ValueError names the
    entry that is not so (a layer twice, a size that is not a number >= 0, no pattern)."""
    parsed = []
    for entry in entries:
        pattern, colon, rest = entry.partition(":")
        layers: list[tuple[str, float]] = []
        for part in rest.split(","):
            name, eq, size = part.partition("=")
            try:
                mb = float(size)
            except ValueError:
                mb = math.nan
            if not eq or not name.strip() or not mb >= 0 or math.isinf(mb):
                raise ValueError(f"catalogue entry {entry!r}: expected 'PATTERN: layer=MB, ...' with MB >= 0")
            layers.append((name.strip(), mb))
        names = [name for name, _ in layers]
        if not colon or not pattern.strip() or len(set(names)) != len(names):
            raise ValueError(f"catalogue entry {entry!r}: expected 'PATTERN: layer=MB, ...', each layer once")
        parsed.append((pattern.strip(), tuple(layers)))
    return tuple(parsed)


@dataclass(frozen=True, slots=True)
class Boot:
    """Boot time ~ lognormal(median_s, sigma) x max(1, n / knee) ** exponent + min(load_delay_s x (n - 1), load_delay_max_s).

    n counts the account's sandboxes in PROVISIONING when this boot starts (itself included). Each other starting
    sandbox adds `load_delay_s`, up to `load_delay_max_s` (why every rollout of a burst of 100 is a few hundred
    ms slower than one alone, in the public figures, while the tail is not stretched); past the knee the
    pipeline collapses (the power law that turns a wide burst into "Runtime did not start" errors).
    """

    median_s: float
    sigma: float
    congestion_knee: float
    congestion_exponent: float
    load_delay_s: float = 0.0
    load_delay_max_s: float = 0.0

    def __post_init__(self) -> None:
        _non_negative(self, "median_s", "sigma", "congestion_exponent", "load_delay_s", "load_delay_max_s")
        _positive(self, "congestion_knee")


@dataclass(frozen=True, slots=True)
class Startup:
    """A sandbox not RUNNING within `deadline_s` of acceptance ends ERROR / PROVISIONING_TIMEOUT."""

    deadline_s: float
    timeout_message: str = "Runtime did not start within {deadline_s:.0f}s"

    def __post_init__(self) -> None:
        _positive(self, "deadline_s")
        try:
            self.timeout_message.format(deadline_s=1.0)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"timeout_message is not a valid template: {exc}") from None


@dataclass(frozen=True, slots=True)
class Account:
    """Account-level mechanisms the public record names (uni-agent PR #47, SkyRL#1194) without giving figures.

    An optional section; without it none applies. `teardown_s`: a terminated sandbox keeps counting against the
    concurrency quota this long (slow to die). `max_starting`: the start pipeline boots at most this many at
    once, the rest wait their turn in PENDING. `start_per_s` / `start_burst`: a token bucket on boot starts
    (queued, never refused: a throughput, unlike `[create_rate]`). `admit_per_s`: the control plane lets accepted
    creates in one after another at this rate (admission = max(arrival, previous admission + 1 / rate)), each
    waiting in PENDING, in its TTI, for its turn: a vendor's API takes a burst's creates over a finite time, so 960
    at once start later than 100 (fitted from a burst's acceptance times, harness/fitting/admission.py, which
    plays it as an intake ahead of the bucket's decision when it predicts a burst; against a `--local` vendor the
    fitted rate is the trial machine's serving loop, not the vendor's).
    """

    teardown_s: float = 0.0
    max_starting: float = math.inf
    start_per_s: float = math.inf
    start_burst: float = math.inf
    admit_per_s: float = math.inf

    def __post_init__(self) -> None:
        _non_negative(self, "teardown_s")
        _positive(self, "max_starting", "start_per_s", "start_burst", "admit_per_s")


@dataclass(frozen=True, slots=True)
class Errors:
    """Injected failures: per create call, per sandbox (crash before ready) and per exec; and, for the steps RL
    rollouts take, per file moved, per snapshot and per start from a snapshot or fork source.

    `upload_error_prob` / `download_error_prob`: a file the vendor fails part-way (its server error, after half the
    file's time over the profile's bandwidth; `transfers.py`). `snapshot_error_prob`: a snapshot the vendor fails
    (its server error; nothing is kept). `fork_error_prob`: a create from a snapshot or a fork of a sandbox that the
    vendor fails to restore (its server error on that create; `simulator.py`). All default to 0, so a profile
    without them behaves as before they existed.
    """

    create_transient_prob: float
    boot_crash_prob: float
    exec_error_prob: float
    exec_death_prob: float
    exec_oom_prob: float
    upload_error_prob: float = 0.0
    download_error_prob: float = 0.0
    snapshot_error_prob: float = 0.0
    fork_error_prob: float = 0.0

    def __post_init__(self) -> None:
        _probability(
            self,
            "create_transient_prob",
            "boot_crash_prob",
            "exec_error_prob",
            "exec_death_prob",
            "exec_oom_prob",
            "upload_error_prob",
            "download_error_prob",
            "snapshot_error_prob",
            "fork_error_prob",
        )


@dataclass(frozen=True, slots=True)
class Exec:
    """Per-command overhead (gateway, process start) ~ lognormal, added to the command's own duration."""

    overhead_median_s: float
    overhead_sigma: float
    default_cwd: str = "/"

    def __post_init__(self) -> None:
        _non_negative(self, "overhead_median_s", "overhead_sigma")


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-sandbox request limits; asking for more is an INVALID request."""

    max_cpu: float
    max_memory_mb: float
    max_lifetime_s: float

    def __post_init__(self) -> None:
        _positive(self, "max_cpu", "max_memory_mb", "max_lifetime_s")


COMMAND_MODES = ("modelled", "real")


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What a sandbox holds beyond its lifecycle: how its commands run and what pause, resume, snapshot and fork
    cost (vendor seconds, each a lognormal draw of median x exp(sigma z) keyed like every other draw).

    `commands`: "modelled" (the sandbox shell in-process: a load test wants no processes) or "real" (a real shell
    in the sandbox's own file tree, `isolated_shell.py`). A pause takes `pause_median_s + pause_per_gib_s x memory
    GiB` at the median (E2B documents a pause time that grows with RAM); a snapshot `snapshot_median_s +
    snapshot_per_gib_s x GiB of its files`, a fork's boot `fork_median_s + fork_per_gib_s x GiB of the source's
    files`. `exec_overhead_s`: a fixed hold on every command's answer (OpenSandbox's execd held each 1 s), beside
    `[exec]`'s drawn overhead. Transfers (`transfers.py`): a file moves at `upload_mb_s` / `download_mb_s` a
    sandbox, all of the account's at most `account_transfer_mb_s` together; a file over `max_file_mib`, or more than
    `max_concurrent_transfers` at once in one sandbox, is refused. A profile without the section gets these
    defaults, each with an "assumption:" source.
    """

    commands: str = "modelled"
    pause_median_s: float = 1.0
    pause_per_gib_s: float = 0.0
    resume_median_s: float = 1.0
    snapshot_median_s: float = 1.0
    snapshot_per_gib_s: float = 0.0
    fork_median_s: float = 1.0
    fork_per_gib_s: float = 0.0
    sigma: float = 0.3
    exec_overhead_s: float = 0.0
    upload_mb_s: float = math.inf
    download_mb_s: float = math.inf
    account_transfer_mb_s: float = math.inf
    max_file_mib: float = math.inf
    max_concurrent_transfers: float = math.inf

    def __post_init__(self) -> None:
        if self.commands not in COMMAND_MODES:
            raise ValueError(f"commands must be one of {', '.join(COMMAND_MODES)}, got {self.commands!r}")
        timed = (
            "pause_median_s",
            "pause_per_gib_s",
            "resume_median_s",
            "snapshot_median_s",
            "snapshot_per_gib_s",
            "fork_median_s",
            "fork_per_gib_s",
            "exec_overhead_s",
        )
        _non_negative(self, *timed, "sigma")
        for name in timed:
            if math.isinf(getattr(self, name)):
                raise ValueError(f"{name} must be finite, got inf")
        _positive(self, "upload_mb_s", "download_mb_s", "account_transfer_mb_s", "max_file_mib")
        _positive(self, "max_concurrent_transfers")


_SECTIONS: dict[str, type] = {
    "create_rate": CreateRate,
    "quota": Quota,
    "pool": Pool,
    "image": Image,
    "boot": Boot,
    "startup": Startup,
    "errors": Errors,
    "exec": Exec,
    "limits": Limits,
}
_OPTIONAL_SECTIONS: dict[str, type] = {
    "resource_pool": ResourcePool,
    "faults": TransportFaults,
    "account": Account,
    "vcpu_rate": VcpuRate,
    "serving": Serving,
}
"""Sections a profile may leave out (None on the Profile: the behaviour is not modelled)."""
_DEFAULTED_SECTIONS: dict[str, type] = {"sandbox": SandboxSpec}
"""Sections a profile may leave out and still has (their defaults, each number sourced as an assumption)."""
DEFAULTED_SOURCE = "assumption: the profile has no [{section}] section; the simulator's default"
FIELD_DEFAULTED_SOURCE = "assumption: the profile does not set {field}; the simulator's default (the mechanism is off)"
FIELD_DEFAULTED_LABEL = "assumed: the simulator's default ({value:g}), which leaves the mechanism as before it existed"
_ALL_SECTIONS: dict[str, type] = {**_SECTIONS, **_OPTIONAL_SECTIONS, **_DEFAULTED_SECTIONS}


@dataclass(frozen=True, slots=True)
class Profile:
    """One simulated vendor's behaviour. `sources` maps dotted field names to their provenance."""

    name: str
    description: str
    default_time_scale: float
    create_rate: CreateRate
    quota: Quota
    pool: Pool
    image: Image
    boot: Boot
    startup: Startup
    errors: Errors
    exec: Exec
    limits: Limits
    resource_pool: ResourcePool | None = None
    faults: TransportFaults | None = None
    account: Account | None = None
    vcpu_rate: VcpuRate | None = None  # vCPUs allocated per window (Vercel Sandbox): vcpu_rate.py
    serving: Serving | None = None  # the API server's one queue, every request's turn: serving_queue.py
    sandbox: SandboxSpec = field(default_factory=SandboxSpec)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    path: str | None = field(default=None, compare=False)
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)  # dotted field -> "<kind>: <why>"

    def numeric_fields(self) -> dict[str, float]:
        """Every numeric setting by dotted name (what a source must accompany)."""
        out: dict[str, float] = {"default_time_scale": self.default_time_scale}
        for section in _ALL_SECTIONS:
            obj = getattr(self, section)
            if obj is None:
                continue
            for f in dataclasses.fields(obj):
                value = getattr(obj, f.name)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[f"{section}.{f.name}"] = value
        return out

    def as_dict(self) -> dict[str, Any]:
        """Plain values (for run.json and the stub's /_stampede/stats), infinities as the string "inf"."""

        def plain(v: Any) -> Any:
            return "inf" if isinstance(v, float) and math.isinf(v) else v

        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "default_time_scale": self.default_time_scale,
        }
        for section in _ALL_SECTIONS:
            obj = getattr(self, section)
            if obj is not None:
                out[section] = {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return out

    def account_wide_limits(self) -> list[str]:
        """The limits this profile applies to the whole account (what a vendor sharded over processes would apply
        per shard instead): an empty list when it has none."""
        pool = self.pool.max_nodes * self.pool.slots_per_node
        finite = [
            ("quota.max_active", self.quota.max_active),
            ("create_rate.per_s", self.create_rate.per_s),
            ("pool.max_nodes x slots_per_node", pool),
            ("boot.congestion_knee", self.boot.congestion_knee),
        ]
        limits = [name for name, value in finite if value != math.inf]
        if self.boot.load_delay_s > 0:
            limits.append("boot.load_delay_s")
        if self.resource_pool is not None:
            limits.append("resource_pool")
        if self.vcpu_rate is not None:
            limits.append("vcpu_rate")
        if self.account is not None and not math.isinf(self.account.admit_per_s):
            limits.append("account.admit_per_s")
        return limits

    def with_overrides(self, overrides: Mapping[str, Any]) -> Profile:
        """A copy with single values replaced by dotted key, e.g. `{"quota.max_active": 100}`.

        String values are parsed by the field's type, so `--set quota.max_active=100` works from a CLI.
        """
        profile = self
        sources = dict(self.sources)
        labels = dict(self.labels)
        for key, raw in overrides.items():
            section, dot, name = key.partition(".")
            if not dot:
                if key == "default_time_scale":
                    value = _coerce(raw, float, key, parse_strings=True)
                    if not value > 0 or math.isinf(value):
                        raise ProfileError(f"override {key}: must be a positive finite number, got {raw!r}")
                    profile = dataclasses.replace(profile, default_time_scale=value)
                elif key == "name":
                    profile = dataclasses.replace(profile, name=str(raw))
                elif key == "description":
                    profile = dataclasses.replace(profile, description=str(raw))
                else:
                    raise ProfileError(f"unknown profile key {key!r} (use section.field, e.g. quota.max_active)")
                sources[key] = OVERRIDE_SOURCE
                labels[key] = OVERRIDE_LABEL
                continue
            cls = _ALL_SECTIONS.get(section)
            if cls is None:
                raise ProfileError(
                    f"unknown profile section {section!r} in {key!r} (sections: {', '.join(_ALL_SECTIONS)})"
                )
            hints = typing.get_type_hints(cls)
            if name not in hints:
                known = ", ".join(f.name for f in dataclasses.fields(cls))
                raise ProfileError(f"unknown profile key {key!r} (fields of [{section}]: {known})")
            value = _coerce(raw, hints[name], key, parse_strings=True)
            current = getattr(profile, section)
            try:
                new_section = dataclasses.replace(cls() if current is None else current, **{name: value})
            except ValueError as exc:
                raise ProfileError(f"override {key}: {exc}") from None
            profile = dataclasses.replace(profile, **{section: new_section})
            sources[key] = OVERRIDE_SOURCE
            labels[key] = OVERRIDE_LABEL
        return dataclasses.replace(profile, sources=sources, labels=labels)


def _coerce(raw: Any, typ: Any, key: str, *, parse_strings: bool = False) -> Any:
    """Check (or, for CLI strings, parse) one value against a field type; one-line ProfileError if wrong."""
    if typ is bool:
        if isinstance(raw, bool):
            return raw
        if parse_strings and isinstance(raw, str) and raw.lower() in ("true", "false", "1", "0", "yes", "no"):
            return raw.lower() in ("true", "1", "yes")
        raise ProfileError(f"{key}: expected true or false, got {raw!r}")
    if typ is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if parse_strings and isinstance(raw, str):
            try:
                return int(raw)
            except ValueError:
                pass
        raise ProfileError(f"{key}: expected an integer, got {raw!r}")
    if typ is float:
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            value = float(raw)
        elif parse_strings and isinstance(raw, str):
            try:
                value = float(raw)
            except ValueError:
                raise ProfileError(f"{key}: expected a number, got {raw!r}") from None
        else:
            raise ProfileError(f"{key}: expected a number, got {raw!r}")
        if math.isnan(value):
            raise ProfileError(f"{key}: expected a number, got nan")
        return value
    if typ is str:
        if isinstance(raw, str):
            return raw
        raise ProfileError(f"{key}: expected a string, got {raw!r}")
    if typ == tuple[str, ...]:
        if parse_strings and isinstance(raw, str):  # a CLI override: entries separated by ";"
            return tuple(part.strip() for part in raw.split(";") if part.strip())
        if isinstance(raw, (list, tuple)) and all(isinstance(item, str) for item in raw):
            return tuple(raw)
        raise ProfileError(f"{key}: expected a list of strings, got {raw!r}")
    raise ProfileError(f"{key}: unsupported field type {typ!r}")  # pragma: no cover - programming error


def _label(raw: Any, key: str) -> str:
    """A provenance label, checked: "<kind>: <why>" with a known kind and a reason."""
    if not isinstance(raw, str) or not label_kind(raw):
        raise ProfileError(f'{key} must be "<kind>: <why>" with kind one of {", ".join(LABEL_KINDS)}, got {raw!r}')
    return raw


def _build_section(
    cls: type, table: Any, section: str, sources: dict[str, str], where: str, labels: dict[str, str] | None = None
) -> Any:
    if not isinstance(table, dict):
        raise ProfileError(f"{where}: [{section}] must be a table")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, raw in table.items():
        if key.endswith(SOURCE_SUFFIX) and key[: -len(SOURCE_SUFFIX)] in fields:
            if not isinstance(raw, str):
                raise ProfileError(f"{where}: {section}.{key} must be a string")
            sources[f"{section}.{key[: -len(SOURCE_SUFFIX)]}"] = raw
            continue
        if key.endswith(LABEL_SUFFIX) and key[: -len(LABEL_SUFFIX)] in fields:
            label = _label(raw, f"{where}: {section}.{key}")
            if labels is not None:
                labels[f"{section}.{key[: -len(LABEL_SUFFIX)]}"] = label
            continue
        if key not in fields:
            raise ProfileError(f"{where}: unknown field {section}.{key} (fields of [{section}]: {', '.join(fields)})")
        kwargs[key] = _coerce(raw, hints[key], f"{where}: {section}.{key}")
    for name, f in fields.items():
        no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if name not in kwargs and no_default:
            raise ProfileError(f"{where}: missing field {section}.{name}")
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ProfileError(f"{where}: [{section}] {exc}") from None


def parse_profile(data: Mapping[str, Any], *, where: str = "profile", path: str | None = None) -> Profile:
    """Build a Profile from parsed TOML; every problem is one ProfileError line naming the field."""
    sources: dict[str, str] = {}
    labels: dict[str, str] = {}
    top_known = {"name", "description", "default_time_scale"}
    top_known |= {"default_time_scale" + SOURCE_SUFFIX, "default_time_scale" + LABEL_SUFFIX}
    for key in data:
        if key not in _ALL_SECTIONS and key not in top_known:
            raise ProfileError(f"{where}: unknown top-level key {key!r} (sections: {', '.join(_ALL_SECTIONS)})")
    for key in ("name", "description", "default_time_scale"):
        if key not in data:
            raise ProfileError(f"{where}: missing field {key}")
    name = _coerce(data["name"], str, f"{where}: name")
    description = _coerce(data["description"], str, f"{where}: description")
    time_scale = _coerce(data["default_time_scale"], float, f"{where}: default_time_scale")
    if not time_scale > 0 or math.isinf(time_scale):
        raise ProfileError(f"{where}: default_time_scale must be a positive finite number")
    ts_source = data.get("default_time_scale" + SOURCE_SUFFIX)
    if ts_source is not None:
        sources["default_time_scale"] = _coerce(ts_source, str, f"{where}: default_time_scale_source")
    if "default_time_scale" + LABEL_SUFFIX in data:
        labels["default_time_scale"] = _label(
            data["default_time_scale" + LABEL_SUFFIX], f"{where}: default_time_scale_label"
        )
    sections: dict[str, Any] = {}
    for section, cls in _SECTIONS.items():
        if section not in data:
            raise ProfileError(f"{where}: missing section [{section}]")
        sections[section] = _build_section(cls, data[section], section, sources, where, labels)
    for section, cls in _OPTIONAL_SECTIONS.items():
        if section in data:
            sections[section] = _build_section(cls, data[section], section, sources, where, labels)
    for section, obj in sections.items():  # a number the profile leaves out is the simulator's default, said so
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.name not in data[section] and isinstance(value, (int, float)) and not isinstance(value, bool):
                sources.setdefault(f"{section}.{f.name}", FIELD_DEFAULTED_SOURCE.format(field=f"{section}.{f.name}"))
                labels.setdefault(f"{section}.{f.name}", FIELD_DEFAULTED_LABEL.format(value=value))
    for section, cls in _DEFAULTED_SECTIONS.items():
        sections[section] = _build_section(cls, data.get(section, {}), section, sources, where, labels)
        for f in dataclasses.fields(cls):
            value = getattr(sections[section], f.name)
            if not isinstance(value, (int, float)):
                continue
            if section in data:  # the section is there, this number is not
                sources.setdefault(f"{section}.{f.name}", FIELD_DEFAULTED_SOURCE.format(field=f"{section}.{f.name}"))
                labels.setdefault(f"{section}.{f.name}", FIELD_DEFAULTED_LABEL.format(value=value))
            sources.setdefault(f"{section}.{f.name}", DEFAULTED_SOURCE.format(section=section))
            labels.setdefault(f"{section}.{f.name}", DEFAULTED_LABEL.format(section=section))
    return Profile(
        name=name,
        description=description,
        default_time_scale=time_scale,
        sources=sources,
        labels=labels,
        path=path,
        **sections,
    )


def profile_names() -> list[str]:
    """The built-in profiles (files in providers/sim/core/profiles/)."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.toml"))


def load_profile(name_or_path: str | Path) -> Profile:
    """A built-in profile by name (`modal-like`) or a profile file by path (`./my-vendor.toml`)."""
    text = str(name_or_path)
    builtin = PROFILES_DIR / f"{text}.toml"
    looks_like_path = isinstance(name_or_path, Path) or "/" in text or text.endswith(".toml")
    if not looks_like_path:
        if not builtin.is_file():
            raise ProfileError(
                f"unknown profile {text!r} (built-in: {', '.join(profile_names())}; or give a path to a .toml file)"
            )
        path = builtin
    else:
        path = Path(text).expanduser()
        if not path.is_file():
            raise ProfileError(f"profile file not found: {text}")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: invalid TOML: {exc}") from None
    return parse_profile(data, where=str(path) if looks_like_path else text, path=str(path))
