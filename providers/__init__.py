"""Sandbox vendors behind one contract (`providers.base`), looked up by name.

Adapters are imported lazily so that a user without, say, the `modal` SDK can still run the others, and so
that no adapter ever imports another.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from providers.base import Provider, ProviderConfigError

PROVIDERS: dict[str, str] = {
    "stub": "providers.vendors.stub.provider:StubProvider",
    "prime": "providers.vendors.prime.provider:PrimeProvider",
    "docker": "providers.vendors.docker.provider:DockerProvider",
    "modal": "providers.vendors.modal.provider:ModalProvider",
    "e2b": "providers.vendors.e2b:E2BProvider",
    "daytona": "providers.vendors.daytona.provider:DaytonaProvider",
    "agent-sandbox": "providers.vendors.agent_sandbox:AgentSandboxProvider",
    "runloop": "providers.vendors.runloop:RunloopProvider",
    "vercel": "providers.vendors.vercel:VercelProvider",
    "coreweave": "providers.vendors.coreweave:CoreWeaveProvider",
}
"""Provider name -> `module:class`. The `stub` provider is the embedded default."""

LOCAL_VENDORS: dict[str, str] = {
    "stub": "providers.sim.prime.serve",
    "prime": "providers.sim.prime.serve",
    "modal": "providers.sim.modal.serve",
    "e2b": "providers.sim.e2b.serve",
    "daytona": "providers.sim.daytona.serve",
    "agent-sandbox": "providers.sim.agent_sandbox.serve",
    "runloop": "providers.sim.runloop.serve",
    "vercel": "providers.sim.vercel.serve",
    "coreweave": "providers.sim.coreweave.serve",
}
"""Provider name -> the module serving its simulated vendor (`--local`), wire-compatible with the real one."""

SIM_PROFILES_DIR = Path(__file__).with_name("sim") / "core" / "profiles"
"""The simulated vendors' built-in profiles (`providers.sim.core.profile` loads them); read here by path, since the
registry imports no simulator, so `--help` lists what is there."""


def sim_profile_names() -> list[str]:
    """The built-in profiles a --local run (or the embedded stub) can simulate, by name."""
    return sorted(p.stem for p in SIM_PROFILES_DIR.glob("*.toml"))


SDK_EXTRAS: dict[str, str] = {
    "prime": "prime",
    "modal": "modal",
    "e2b": "e2b",
    "daytona": "daytona",
    "vercel": "vercel",
    "runloop": "runloop",
    "coreweave": "coreweave",
    "agent-sandbox": "agent-sandbox",
}
"""Provider name -> the pip extra (pyproject.toml) installing its SDK, which its adapter and, for `modal` (the SDK's
`modal_proto`), its simulated vendor import. `stub` and `docker` need none: `pip install stampede` runs them."""


def sdk_extra(name: str) -> str | None:
    """The extra that installs what a provider needs, by its name, its adapter's module or its simulated vendor's
    module; None for `stub`, `docker` and a user's own provider."""
    for provider, extra in SDK_EXTRAS.items():
        if name in (provider, PROVIDERS[provider].partition(":")[0], LOCAL_VENDORS.get(provider)):
            return extra
    return None


def missing_sdk_message(name: str, missing: str | None, subject: str | None = None) -> str:
    """One line for `subject` (by default provider `name`) that could not import `missing`: what to install."""
    subject = subject or f"provider {name!r}"
    missing = (missing or "").partition(".")[0] or None  # the package to install, not its submodule
    extra = sdk_extra(name)
    if extra is None:
        return f"{subject} needs the package {missing!r}: pip install it"
    return (
        f"{subject} needs the {extra} SDK, not installed here (no module {missing!r}): pip install 'stampede[{extra}]'"
    )


def provider_names() -> list[str]:
    return sorted(PROVIDERS)


def provider_class(name: str) -> type[Provider]:
    """The adapter class for `name` (a built-in name, or `package.module:Class` for a user's own vendor)."""
    if name in PROVIDERS:
        target = PROVIDERS[name]
    elif ":" in name:
        target = name
    else:
        raise ProviderConfigError(
            f"unknown provider {name!r} (choose from: {', '.join(provider_names())}, or module:Class)"
        )
    module_name, _, class_name = target.partition(":")
    if name not in PROVIDERS and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # a user's own provider module, as Locust finds locustfiles
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise ProviderConfigError(f"provider {name!r} is not available in this version") from None
        raise ProviderConfigError(missing_sdk_message(name, exc.name)) from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise ProviderConfigError(f"{target} is not a providers.base.Provider subclass")
    return cls


def create_provider(name: str, options: Mapping[str, Any]) -> Provider:
    """Build an adapter from plain options (they travel as JSON to the engine process)."""
    return provider_class(name).from_options(options)
