"""Stampede's settings as Locust's web UI posts them: back to the types the command line gives.

The form posts every field as text, and Locust keeps text for an option whose value was None (and converts
with the current value's type otherwise), so a blank `--hold` arrives as "" and a typed one as "20". Before
a test starts from the web UI, `coerce_form_values` turns each of stampede's options back into what argparse
would have made of it: blank is the option's default, a number field a number, a bad value one clear error.
"""

from __future__ import annotations

import argparse
from functools import cache
from typing import Any

from harness.errors import UsageError
from harness.locust.settings import add_arguments


@cache
def _actions() -> dict[str, argparse.Action]:
    """Stampede's own options by destination, as `stampede run` declares them (same names, types, defaults)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser, locust=False)
    return {action.dest: action for action in parser._actions if action.dest != "help"}


def coerce_form_values(options: Any) -> None:
    """In place: every stampede option the form left as text gets its declared type (blank: its default)."""
    for dest, action in _actions().items():
        value = getattr(options, dest, None)
        if not isinstance(value, str):
            continue
        setattr(options, dest, _coerce(action, value))


def _coerce(action: argparse.Action, text: str) -> Any:
    if not text.strip():
        default = action.default  # a STAMPEDE_* variable gives it as text, converted like a typed value
        return _coerce(action, default) if isinstance(default, str) and default.strip() else default
    if action.nargs == 0:  # a switch: the form posts "true" / "false"
        return text.strip().lower() in ("true", "1", "on", "yes")
    if action.type is None or action.type is str:
        return [text] if isinstance(action, argparse._AppendAction) else text
    try:
        value = action.type(text.strip())  # type: ignore[misc,operator]
    except (TypeError, ValueError):
        flag = action.option_strings[0] if action.option_strings else action.dest
        raise UsageError(f"{flag} takes a number (got {text!r} in the web form)") from None
    return value
