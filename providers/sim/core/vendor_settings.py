"""What every simulated vendor runs with, whichever API it speaks: a profile (and overrides), speed, address, token."""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from typing import Any

from providers.sim.core.profile import Profile, load_profile


def random_token() -> str:
    return "stampede-" + secrets.token_urlsafe(18)


@dataclass(frozen=True)
class VendorSettings:
    profile: Profile | str = "prime-like"
    seed: int = 0
    time_scale: float | None = None  # None: the profile's default_time_scale
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port
    token: str = field(default_factory=random_token)
    overrides: tuple[tuple[str, Any], ...] = ()

    def resolved_profile(self) -> Profile:
        profile = self.profile if isinstance(self.profile, Profile) else load_profile(self.profile)
        return profile.with_overrides(dict(self.overrides)) if self.overrides else profile

    def resolved_time_scale(self, profile: Profile) -> float:
        scale = profile.default_time_scale if self.time_scale is None else float(self.time_scale)
        if not scale > 0 or math.isinf(scale):
            raise ValueError(f"time scale must be a positive finite number, got {scale!r}")
        return scale
