"""Every `--help` states each option's default and the environment variable it reads; `--version` answers."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from foundation.cli_help import ENV_ATTRIBUTE
from harness.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]


def _subcommand_parsers(parser: argparse.ArgumentParser, path: str = "stampede"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _subcommand_parsers(child, f"{path} {name}")


def _serve_parsers():
    from providers.sim.daytona.serve import build_parser as daytona
    from providers.sim.e2b.serve import build_parser as e2b
    from providers.sim.modal.serve import build_parser as modal
    from providers.sim.prime.serve import build_parser as prime

    for name, build in (
        ("stub serve", prime),
        ("modal-local serve", modal),
        ("e2b-local serve", e2b),
        ("daytona-local serve", daytona),
    ):
        yield f"stampede {name}", build()


def _all_parsers():
    yield from _subcommand_parsers(build_parser())
    yield from _serve_parsers()


def _help_of(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    return formatter._expand_help(action) if action.help else ""


def _states_a_default(action: argparse.Action) -> bool:
    default = action.default
    if action.help is argparse.SUPPRESS:
        return False  # a hidden option has no help to state it in
    if default is None or default is argparse.SUPPRESS or isinstance(default, bool) or action.nargs == 0:
        return False
    return bool(action.option_strings) and default not in ([], ())


_PARSERS = list(_all_parsers())


@pytest.mark.parametrize("command, parser", _PARSERS, ids=[command for command, _ in _PARSERS])
def test_every_option_with_a_default_says_it(command: str, parser: argparse.ArgumentParser) -> None:
    missing = [
        action.option_strings[0]
        for action in parser._actions
        if _states_a_default(action) and "default" not in _help_of(parser, action).lower()
    ]
    assert not missing, f"{command}: options whose --help hides their default: {missing}"


def test_every_option_that_reads_an_environment_variable_names_it() -> None:
    run = next(parser for command, parser in _subcommand_parsers(build_parser()) if command == "stampede run")
    with_env = [action for action in run._actions if getattr(action, ENV_ATTRIBUTE, None)]
    assert len(with_env) >= 20, "stampede's settings each read a STAMPEDE_* variable"
    for action in with_env:
        text = _help_of(run, action)
        assert f"[env {getattr(action, ENV_ATTRIBUTE)}]" in text, action.option_strings
    rendered = run.format_help()
    assert "[env STAMPEDE_PROVIDER]" in rendered and "[env STAMPEDE_STAGES]" in rendered


def test_an_environment_variable_sets_the_default_the_help_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAMPEDE_SEED", "41")
    run = next(parser for command, parser in _subcommand_parsers(build_parser()) if command == "stampede run")
    seed = next(action for action in run._actions if "--seed" in action.option_strings)
    assert "(default: 41) [env STAMPEDE_SEED]" in _help_of(run, seed)


def test_version_prints_the_package_version() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "--version"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"stampede {declared}"


def test_provider_profile_and_local_help_list_every_registered_name_and_spawn_rate_its_default() -> None:
    """The lists in `stampede run --help` come from the registries, so a new vendor or profile cannot be missing."""
    from providers import LOCAL_VENDORS, PROVIDERS
    from providers.sim.core.profile import profile_names

    text = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "10000"},
        cwd=ROOT,
    ).stdout
    helps: dict[str, str] = {}  # each option's names -> its whole help, continuation lines joined
    for line in text.splitlines():
        if line.startswith("  -"):
            name = line.split("  ")[1].strip()
            helps[name] = line
        elif helps and line.startswith("   "):
            helps[name] += " " + line.strip()
    provider = next(line for name, line in helps.items() if name.startswith("--provider PROVIDER"))
    local = next(line for name, line in helps.items() if name.startswith("--local"))
    profile = next(line for name, line in helps.items() if name.startswith("--profile SIM_PROFILE"))
    spawn_rate = next(line for name, line in helps.items() if name.startswith("-r SPAWN_RATE"))
    assert all(name in provider for name in PROVIDERS), provider
    assert all(name in local for name in LOCAL_VENDORS), local
    assert all(name in profile for name in profile_names()), profile
    assert "default: 100" in spawn_rate and "[env STAMPEDE_SPAWN_RATE]" in spawn_rate, spawn_rate
