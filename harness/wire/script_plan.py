"""A rollout plan written as a script of steps (`stampede run --plan swe-task|grpo-fork|tool-latency|PATH.toml`).

Today's rollout (create -> commands -> terminate) is not where RL teams lose their time: a multi-GB image pulled,
a repository of thousands of files uploaded, tens of tool calls with the model thinking between them, a diff
downloaded, G copies forked from one prepared sandbox (issue 30). A plan file says that shape in TOML, sizes and
counts as distributions (harness.wire.durations syntax), so a user writes their own task's shape:

    [plan]
    name = "my-task"

    [[step]]
    kind = "create"             # image, image_size_mb, image_variants (one image per task, drawn by each rollout)
    [[step]]
    kind = "upload"             # files, file_size (bytes), dest, mode = "tar" | "files", concurrency; or path
    [[step]]
    kind = "exec"               # command, repeat, think, stream, command_s, timeout_s
    [[step]]
    kind = "fork"               # copies: the steps before run once (the prepared sandbox), the steps after in each
    [[step]]
    kind = "download"           # path

Parsed and checked here on the Locust side (one UsageError line naming the file, the step and the key), sent to the
engine as plain data inside the RolloutPlan, run by harness.engine.script_rollout.
"""

from __future__ import annotations

import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.wire.durations import Distribution
from providers.base import Capability

PLANS_DIR = Path(__file__).resolve().parents[2] / "scenarios" / "plans"
"""The shipped plans, by name (`--plan swe-task` is `scenarios/plans/swe-task.toml`)."""

MAX_COPIES = 1024
MAX_IMAGE_VARIANTS = 100_000
MAX_REPEAT_MEAN = 100_000

_COMMON = {"kind", "name"}
KEYS: dict[str, frozenset[str]] = {
    "create": frozenset({"image", "image_size_mb", "image_variants"}),
    "fork": frozenset({"copies"}),
    "upload": frozenset({"files", "file_size", "dest", "path", "mode", "concurrency"}),
    "exec": frozenset({"command", "repeat", "think", "stream", "command_s", "timeout_s"}),
    "background": frozenset({"command", "poll_s", "wait", "timeout_s"}),
    "download": frozenset({"path"}),
    "snapshot": frozenset(),
    "terminate": frozenset(),
}
"""Each step kind and the keys it takes (besides `kind` and `name`)."""

COMMAND_S_MARK = "STAMPEDE_COMMAND_S="
"""A command may print `STAMPEDE_COMMAND_S=<seconds>` (its own run time measured in the sandbox): the step's
command_s, so the per-call overhead is the answer's time beyond it. Without it, the step's `command_s` (nominal)."""


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a plan. Only the keys of its kind mean anything (KEYS); the rest keep their defaults."""

    kind: str
    name: str
    image: str | None = None
    image_size_mb: float | None = None
    image_variants: int = 1  # create: a rollout draws one of this many images (`variant_image`), SWE-bench's one a task
    copies: int = 0
    files: str = "const:1"  # a distribution: how many files an upload writes
    file_size: str = "const:0"  # a distribution, bytes per file
    dest: str = ""  # upload: the folder the files go to (mode files) or the archive's folder (mode tar)
    path: str | None = None  # upload: exactly one file at this path; download: the file to take out
    mode: str = "tar"  # upload: one tar archive, or `files` (one upload_file per file)
    concurrency: int = 4  # upload mode files: calls in flight (Daytona's S3 path uploads 4 at a time)
    command: tuple[str, ...] = ()
    repeat: str = "const:1"  # exec: calls, a distribution rounded to a whole number
    think: str = "const:0"  # exec: the model generating before each call (vendor seconds)
    stream: bool = False  # exec: through exec_stream, recording the time to the first byte
    command_s: float | None = None  # exec: the command's own nominal time, vendor seconds (`sleep 0.05`: 0.05)
    timeout_s: float | None = None  # exec: the call's deadline (default the plan's exec timeout); background: the wait
    poll_s: float = 0.5  # background: between polls of process_exit (vendor seconds)
    wait: bool = True  # background: poll until it exits (else started and left running)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["command"] = list(self.command)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        values = dict(data)
        values["command"] = tuple(str(word) for word in values.get("command") or ())
        return cls(**values)


@dataclass(frozen=True, slots=True)
class ScriptPlan:
    """A whole plan: its name, where it came from, its steps (the fork step splits prepared from copies)."""

    name: str
    source: str
    steps: tuple[Step, ...]

    @property
    def fork_index(self) -> int | None:
        return next((i for i, step in enumerate(self.steps) if step.kind == "fork"), None)

    def required(self) -> dict[Capability, Step]:
        """What the provider must offer for this plan (Capability -> the first step that needs it)."""
        needed: dict[Capability, Step] = {}
        for step in self.steps:
            wants: list[Capability] = []
            if step.kind == "upload":
                wants = [Capability.UPLOAD]
            elif step.kind == "download":
                wants = [Capability.DOWNLOAD]
            elif step.kind == "snapshot":
                wants = [Capability.SNAPSHOT]
            elif step.kind == "fork":
                wants = [Capability.SNAPSHOT, Capability.FORK]
            elif step.kind == "background":
                wants = [Capability.BACKGROUND]
            elif step.kind == "exec" and step.stream:
                wants = [Capability.EXEC_STREAM]
            for capability in wants:
                needed.setdefault(capability, step)
        return needed

    def check_capabilities(self, provider: str, offered: frozenset[Capability] | set[Capability]) -> None:
        """UsageError (one line) when the provider lacks a step this plan takes: said before any load."""
        missing = [capability for capability in self.required() if capability not in offered]
        if missing:
            said = ", ".join(sorted(str(capability) for capability in offered)) or "none"
            lacks = ", ".join(f"no {capability}" for capability in missing)
            raise UsageError(f"provider {provider} cannot run plan {self.name}: {lacks} (offered: {said})")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "steps": [step.to_dict() for step in self.steps]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScriptPlan:
        return cls(str(data["name"]), str(data.get("source", "")), tuple(Step.from_dict(s) for s in data["steps"]))


def resolve_plan(name_or_path: str) -> Path:
    """A shipped plan's name (`swe-task`) or a path to a TOML file."""
    text = str(name_or_path)
    if text.endswith(".toml") or "/" in text:
        path = Path(text)
        if not path.is_file():
            raise UsageError(f"plan file {text} not found")
        return path
    shipped = PLANS_DIR / f"{text}.toml"
    if not shipped.is_file():
        names = ", ".join(sorted(p.stem for p in PLANS_DIR.glob("*.toml"))) or "none"
        raise UsageError(f"unknown plan {text!r} (shipped: {names}; or give a .toml path)")
    return shipped


def load_plan(name_or_path: str) -> ScriptPlan:
    """Read and check a plan: every mistake is one UsageError line naming the file, the step and the key."""
    path = resolve_plan(name_or_path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"plan {path}: cannot read it: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"plan {path}: not TOML: {exc}") from None
    return parse_plan(data, str(path), default_name=path.stem)


def parse_plan(data: Mapping[str, Any], source: str, default_name: str = "plan") -> ScriptPlan:
    """A plan from TOML data already read (`source` names it in errors)."""
    unknown = set(data) - {"plan", "step"}
    if unknown:
        raise UsageError(f"plan {source}: unknown table {sorted(unknown)[0]!r} (use [plan] and [[step]])")
    header = data.get("plan", {})
    if not isinstance(header, Mapping):
        raise UsageError(f"plan {source}: [plan] must be a table")
    extra = set(header) - {"name", "description"}
    if extra:
        raise UsageError(f"plan {source}: [plan] has an unknown key {sorted(extra)[0]!r} (name, description)")
    name = str(header.get("name") or default_name)
    raw_steps = data.get("step")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise UsageError(f'plan {source}: no steps (add [[step]] tables, the first one kind = "create")')
    steps = tuple(_parse_step(raw, i, source) for i, raw in enumerate(raw_steps))
    _check_order(steps, source)
    return ScriptPlan(name, source, steps)


def _parse_step(raw: Any, index: int, source: str) -> Step:
    if not isinstance(raw, Mapping):
        raise UsageError(f"plan {source}: step {index}: must be a table")
    kind = raw.get("kind")
    if kind not in KEYS:
        raise UsageError(f"plan {source}: step {index}: kind: {kind!r} is not one of {', '.join(KEYS)}")
    where = f"plan {source}: step {index} ({kind})"
    extra = set(raw) - _COMMON - KEYS[kind]
    if extra:
        allowed = ", ".join(sorted(KEYS[kind])) or "none besides kind and name"
        raise UsageError(f"{where}: unknown key {sorted(extra)[0]!r} (takes {allowed})")

    def problem(key: str, text: str) -> UsageError:
        return UsageError(f"{where}: {key}: {text}")

    def number(key: str, *, whole: bool = False, positive: bool = True) -> Any:
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or (whole and not isinstance(value, int)):
            raise problem(key, f"{value!r} is not a {'whole ' if whole else ''}number")
        if value < 0 or (positive and value == 0):
            raise problem(key, f"must be {'positive' if positive else 'non-negative'} (got {value!r})")
        return value

    def distribution(key: str) -> str:
        try:
            return str(Distribution.parse(str(raw[key])))
        except UsageError as exc:
            raise problem(key, str(exc)) from None

    def flag(key: str) -> bool:
        if not isinstance(raw[key], bool):
            raise problem(key, f"{raw[key]!r} is not true or false")
        return bool(raw[key])

    def text(key: str) -> str:
        if not isinstance(raw[key], str) or not raw[key]:
            raise problem(key, f"{raw[key]!r} is not a non-empty string")
        return str(raw[key])

    values: dict[str, Any] = {}
    for key in KEYS[kind] & set(raw):
        if key in ("image", "dest", "path", "mode"):
            values[key] = text(key)
        elif key in ("image_size_mb", "command_s", "timeout_s", "poll_s"):
            values[key] = float(number(key, positive=key != "command_s"))
        elif key in ("copies", "concurrency", "image_variants"):
            values[key] = int(number(key, whole=True))
        elif key in ("files", "file_size", "repeat", "think"):
            values[key] = distribution(key)
        elif key in ("stream", "wait"):
            values[key] = flag(key)
        elif key == "command":
            values[key] = _command(raw[key], problem)
    if kind == "upload":
        if values.get("mode", "tar") not in ("tar", "files"):
            raise problem("mode", f"{values['mode']!r} is not tar or files")
        if ("path" in values) == ("dest" in values):
            raise problem("dest", "give dest (a folder, with files and file_size) or path (one file), not both")
        if "path" in values and "files" in values:
            raise problem("files", "an upload to one path writes one file: drop files, or give dest")
    if kind in ("exec", "background") and not values.get("command"):
        raise problem("command", "missing (an argv list, or a string split like a shell would)")
    if kind == "download" and "path" not in values:
        raise problem("path", "missing (the file to download)")
    if kind == "create" and values.get("image_variants", 1) > 1 and "image" not in values:
        raise problem("image_variants", "needs image (the name each variant extends: IMAGE-0000, IMAGE-0001, ...)")
    if values.get("image_variants", 1) > MAX_IMAGE_VARIANTS:
        raise problem("image_variants", f"at most {MAX_IMAGE_VARIANTS}")
    if kind == "fork":
        if "copies" not in values:
            raise problem("copies", "missing (G: the copies of the prepared sandbox in each group)")
        if values["copies"] > MAX_COPIES:
            raise problem("copies", f"at most {MAX_COPIES}")
    if kind == "exec" and Distribution.parse(values.get("repeat", "const:1")).mean > MAX_REPEAT_MEAN:
        raise problem("repeat", f"a mean of at most {MAX_REPEAT_MEAN} calls")
    name = raw.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise problem("name", f"{name!r} is not a non-empty string")
    default = values["command"][0] if values.get("command") else kind
    return Step(kind=kind, name=str(name or default), **values)


def variant_image(image: str, which: int) -> str:
    """Variant `which` of an image: its repository name gains `-NNNN`, its tag kept (`swebench/task:v1` ->
    `swebench/task-0007:v1`), as SWE-bench names one image per task instance. A simulated vendor's catalogue pattern
    (`swebench/*`) still matches every variant, so they share its base layers and each pulls only its own."""
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return f"{image[:colon]}-{which:04d}{image[colon:]}"
    return f"{image}-{which:04d}"


def _command(value: Any, problem: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise problem("command", f"cannot split {value!r}: {exc}") from None
    elif isinstance(value, Sequence) and all(isinstance(word, str | int | float) for word in value):
        words = [str(word) for word in value]
    else:
        raise problem("command", f"{value!r} is not an argv list or a string")
    if not words:
        raise problem("command", "empty")
    return tuple(words)


def _check_order(steps: tuple[Step, ...], source: str) -> None:
    """Create first, once; at most one fork, after it; terminate only last."""
    for i, step in enumerate(steps):
        where = f"plan {source}: step {i} ({step.kind})"
        if i == 0 and step.kind != "create":
            raise UsageError(f"{where}: kind: the first step must be create (a fork starts from a prepared sandbox)")
        if i > 0 and step.kind == "create":
            raise UsageError(f"{where}: kind: a rollout creates one sandbox (its first step); use fork for copies")
        if step.kind == "terminate" and i != len(steps) - 1:
            raise UsageError(f"{where}: kind: terminate ends the rollout: it must be the last step")
        if step.kind == "fork" and any(s.kind == "fork" for s in steps[:i]):
            raise UsageError(f"{where}: kind: one fork per plan (the steps after it run in each copy)")
