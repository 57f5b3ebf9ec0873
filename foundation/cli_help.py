"""Help text that states every option's default and environment variable, for every command stampede ships.

The `stampede` command and the vendors' standalone `serve` commands (which live under providers/ and import no
harness) share this one formatter, so a default is never stated in one `--help` and missing from another, and a
help string that already names its default is left alone.
"""

from __future__ import annotations

import argparse
import re

ENV_ATTRIBUTE = "stampede_env_var"
"""Set on an argparse action (`set_env_var`) when the option also reads an environment variable."""

_STATES_DEFAULT = re.compile(r"\bdefault\b|%\(default\)", re.IGNORECASE)


def set_env_var(action: argparse.Action, name: str) -> argparse.Action:
    """Record that `action` also reads environment variable `name`, for the help line."""
    setattr(action, ENV_ATTRIBUTE, name)
    return action


def _shown_default(action: argparse.Action) -> str | None:
    default = action.default
    if default is None or default is argparse.SUPPRESS or isinstance(default, bool):
        return None
    if not action.option_strings or action.nargs == 0:
        return None
    if isinstance(default, (list, tuple)) and not default:
        return None
    if isinstance(default, (list, tuple)):
        return ",".join(str(item) for item in default)
    return str(default)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends `(default: X)` unless the help already says its default, and `[env NAME]` where one is read."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if text is argparse.SUPPRESS:
            return text
        default = _shown_default(action)
        if default is not None and not _STATES_DEFAULT.search(text):
            text += f" (default: {default.replace('%', '%%')})"
        env_var = getattr(action, ENV_ATTRIBUTE, None)
        if env_var and env_var not in text:
            text += f" [env {env_var}]"
        return text


__all__ = ["ENV_ATTRIBUTE", "DefaultsHelpFormatter", "set_env_var"]
