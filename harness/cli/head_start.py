"""`stampede run`'s head start: gevent's patching first, then the engine and the embedded vendor started before the
rest of Locust's import, so the three interpreters import their worlds at once (bench/bench_startup.py).

The head start reads a few options from the command line and the environment (provider, endpoint, profile, seed,
time scale, profile overrides, users, workers), never the whole parse: what the run later starts
(`EngineClient.spawn`, `EmbeddedVendor.start`) takes a process only if it was started as exactly what it would
start, command line and environment (`harness.locust.early_processes`); whatever no one took is killed once the
run's services are up, or on the way out. A wrong guess costs CPU, never a different run.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from foundation.phase_marks import mark
from harness.locust.setting_values import DEFAULT_PROVIDER, DEFAULT_SCENARIO, default_profile, paces_bursts

LOCAL_WORKER = "local"  # the engine's worker name in a run of one process (harness.locust.services.process_role)


def patch_interpreter() -> bool:
    """What `import locust` does first, gevent's monkey-patching, with the installed packages' entry points read
    once a group rather than once a patched module (gevent asks 25 times: 0.1 s of 0.16 s here). False when Locust
    is told not to patch (LOCUST_SKIP_MONKEY_PATCH): then nothing may start before it either."""
    if os.getenv("LOCUST_SKIP_MONKEY_PATCH"):
        return False
    from importlib import metadata

    from gevent import monkey

    original = metadata.entry_points
    read: dict[tuple[tuple[str, Any], ...], Any] = {}

    def entry_points(**params: Any) -> Any:
        key = tuple(sorted(params.items()))
        if key not in read:
            read[key] = original(**params)
        return read[key]

    metadata.entry_points = entry_points  # type: ignore[assignment]
    try:
        monkey.patch_all()
    finally:
        metadata.entry_points = original
    return True


class _Unread(Exception):
    """The command line is not one the head start reads (help, a malformed value): it starts nothing."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Unread(message)


@dataclass(frozen=True, slots=True)
class Guess:
    """What `stampede run ARGV` most likely starts: an engine preloading `provider`, and the vendor module (None:
    no embedded vendor, or one of several shards) with its profile, seed, time scale and overrides."""

    provider: str
    engine: bool
    vendor_module: str | None
    profile: str
    seed: int
    time_scale: float | None
    overrides: dict[str, str]
    burst_pacing: bool  # the vendor plays a burst's sending 1:1 (harness.locust.setting_values.paces_bursts)

    @classmethod
    def of(cls, argv: Sequence[str], env: Mapping[str, str]) -> Guess | None:
        """The guess for `stampede run ARGV` under `env`, or None when it is not one to guess (help, a worker)."""
        if any(arg in ("-h", "--help") for arg in argv):
            return None
        parser = _Parser(add_help=False, allow_abbrev=False)
        parser.add_argument("--provider", default=env.get("STAMPEDE_PROVIDER") or DEFAULT_PROVIDER)
        parser.add_argument("--base-url", default=env.get("STAMPEDE_BASE_URL"))
        parser.add_argument(
            "--local", "--modal-local", "--prime-local", action="store_true", default=bool(env.get("STAMPEDE_LOCAL"))
        )
        parser.add_argument("--profile", "--sim-profile", dest="profile", default=env.get("STAMPEDE_PROFILE"))
        parser.add_argument(
            "--profile-set",
            action="append",
            default=[env["STAMPEDE_PROFILE_SET"]] if "STAMPEDE_PROFILE_SET" in env else None,
        )
        parser.add_argument("--time-scale", default=env.get("STAMPEDE_TIME_SCALE"))
        parser.add_argument("--scenario", default=DEFAULT_SCENARIO)
        parser.add_argument("--seed", default=env.get("STAMPEDE_SEED") or "0")
        parser.add_argument("-u", "--users", default=None)
        parser.add_argument("--workers", default="auto")
        parser.add_argument("--master", action="store_true")
        parser.add_argument("--worker", action="store_true")
        try:
            args, _ = parser.parse_known_args(list(argv))
            seed = int(args.seed)
            users = int(args.users) if args.users is not None else None
            time_scale = float(args.time_scale) if args.time_scale is not None else None
        except (_Unread, ValueError):
            return None
        workers = str(args.workers).strip().lower()
        if args.worker or args.master or workers not in ("auto", "0"):
            return None  # a master runs no engine; a worker's engine is named after its master's index
        if time_scale is not None and not (math.isfinite(time_scale) and time_scale > 0):
            return None
        overrides: dict[str, str] = {}
        for item in args.profile_set or []:
            key, sep, value = str(item).partition("=")
            if not sep or not key.strip():
                return None
            overrides[key.strip()] = value.strip()
        from foundation.open_files import processes_for_open_files
        from harness.cli.capacity import engines_needed

        provider = str(args.provider)
        embedded = not args.base_url and (provider == "stub" or args.local)
        one_shard = provider != "stub" or processes_for_open_files(users or 10_000) == 1
        module = None
        if embedded and one_shard:
            from providers import LOCAL_VENDORS

            module = LOCAL_VENDORS.get(provider)
        return cls(
            provider=provider,
            engine=workers == "0" or not engines_needed(users),
            vendor_module=module,
            profile=str(args.profile or default_profile(provider)),
            seed=seed,
            time_scale=time_scale,
            overrides=overrides,
            burst_pacing=paces_bursts(args.scenario),
        )


def begin(argv: Sequence[str]) -> None:
    """Start what `stampede run ARGV` will most likely ask for; each waits in `harness.locust.early_processes`."""
    guess = Guess.of(argv, os.environ)
    if guess is None:
        return
    from harness.locust import early_processes
    from harness.locust.engine_client import engine_env, engine_key, launch_engine
    from harness.locust.vendor_process import launch_vendor, new_token, vendor_argv, vendor_env

    if guess.engine:
        env = engine_env()
        socket_dir, socket_path, process = launch_engine(LOCAL_WORKER, guess.provider, env)
        early_processes.keep(
            engine_key(LOCAL_WORKER, guess.provider, env),
            early_processes.Early(
                process,
                {"socket_dir": socket_dir, "socket_path": socket_path},
                lambda: shutil.rmtree(socket_dir, ignore_errors=True),
            ),
        )
    if guess.vendor_module is not None:
        argv_ = vendor_argv(
            guess.vendor_module,
            guess.profile,
            seed=guess.seed,
            time_scale=guess.time_scale,
            overrides=guess.overrides,
        )
        env = vendor_env(guess.burst_pacing)
        token = new_token()
        early_processes.keep(
            early_processes.key_of("vendor", argv_, env),
            early_processes.Early(launch_vendor(argv_, env, token), {"token": token}),
        )
    mark("command: head start begun")


def end() -> None:
    """Kill whatever the head start started that no one took (the run is refused, or it guessed wrong)."""
    from harness.locust import early_processes

    early_processes.discard()
