"""The `prime` provider's options (`--provider-option K=V`; what each does: `provider.py`'s docstring): where the
SDK connects, as whom, and which SDK behaviours are kept; the pinned SDK release is checked here, before any call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import prime_sandboxes
from prime_sandboxes import Config

from providers.base import THROTTLE_MAX_WAIT_S, ProviderConfigError
from providers.options import (
    Option,
    choice,
    declare,
    declared_options,
    declared_values,
    flag,
    integer,
    number,
    parse_options,
    text,
)

PINNED_SDK = "0.5.1"
DEFAULT_IMAGE = "python:3.11-slim"


@dataclass(frozen=True, slots=True)
class PrimeOptions:
    """Where the SDK connects, as whom, and which SDK behaviours are kept; built from option strings.

    Each tunable field is declared as its option (`providers.options.declare`): its default here is the one."""

    api_key: str
    base_url: str | None = None  # None: the SDK's own (PRIME_API_BASE_URL, ~/.prime, the real API)
    team_id: str | None = declare(None, text)
    image: str = declare(DEFAULT_IMAGE, text)
    retry_429: bool = declare(False, flag)
    auth_cache: str = declare("memory", choice, "memory", "file")
    # the control plane's wire: `http1` (providers/http1_transport.py) or `httpx` (httpcore, the SDK's)
    api_transport: str = declare("http1", choice, "http1", "httpx")
    api_max_connections: int = declare(1000, integer, minimum=1)  # api_transport=httpx only
    api_keepalive: int = declare(20, integer, minimum=0)  # httpx's own; api_transport=httpx only
    gateway_max_connections: int = declare(1000, integer, minimum=1)  # the SDK's own
    preflight_timeout_s: float = declare(30.0, number, key="preflight_timeout", positive=True)
    # beside the SDK's wait, a direct `true` probe: SDK-observed vs probed readiness, side by side in the summary
    # (off by default: the probe's command is then the first the vendor sees, which the truth cross-check reads)
    readiness_probe: bool = declare(False, flag)
    # one control-plane request (the SDK configures 30 s but passes timeout=None, i.e. none): a hung answer fails
    # that call, classified, and holds up no other
    api_timeout_s: float = declare(30.0, number, key="api_timeout", positive=True)
    terminate_attempts: int = declare(4, integer, minimum=1)  # a delete the API did not confirm is asked again
    max_backoff_s: float = declare(THROTTLE_MAX_WAIT_S, number, positive=True)  # most a Retry-After holds the rest

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> PrimeOptions:
        values = parse_options("prime", options, PRIME_OPTIONS)
        installed = prime_sandboxes.__version__
        if installed != PINNED_SDK and values["check_sdk"]:
            raise ProviderConfigError(
                f"prime provider: checked against prime-sandboxes=={PINNED_SDK}, found {installed}; "
                f"pip install prime-sandboxes=={PINNED_SDK} (or check_sdk=0 to try this one)"
            )
        base_url = (values["base_url"] or "").strip().rstrip("/").removesuffix("/api/v1") or None
        if base_url is not None:
            if not base_url.startswith(("http://", "https://")):
                raise ProviderConfigError(f"prime provider: base_url must be http(s)://host:port (got {base_url!r})")
            api_key = values["api_key"] or values["token"] or ""
            if not api_key:
                raise ProviderConfigError(
                    "prime provider: base_url needs a token (--token, STAMPEDE_TOKEN or api_key=...)"
                )
        else:
            api_key = values["api_key"] or _sdk_config().api_key or ""
            if not api_key:
                raise ProviderConfigError(
                    "prime provider: no API key; set PRIME_API_KEY (a key with the sandbox scope), "
                    "run `prime login`, or use --local for the embedded stub"
                )
        return cls(api_key=api_key, base_url=base_url, **declared_values(cls, values))


PRIME_OPTIONS: dict[str, Option] = {
    "base_url": text(),  # --base-url / --local; none: the SDK's own configuration
    "token": text(),  # the key for base_url (--token, STAMPEDE_TOKEN)
    "api_key": text(),
    "check_sdk": flag(True),
    **declared_options(PrimeOptions),
}
"""The prime provider's options (`--provider-option K=V`, the module's docstring): any other key is refused."""


def _sdk_config() -> Config:
    try:
        return Config()
    except ValueError as exc:  # a bad PRIME_CONTEXT
        raise ProviderConfigError(f"prime provider: the Prime SDK's configuration is unusable: {exc}") from None
