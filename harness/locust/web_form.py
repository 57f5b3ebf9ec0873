"""Stampede's settings as Locust's web UI posts them: back to the types the command line gives.

The form posts every field as text. Locust stores a posted value converted with the type of the value it
replaces: text for an option that was None, `float(text)` for one that was a number, and a blank or mistyped
number there is an HTTP 500 before any of our code runs. So under the web UI stampede's number options are
kept as text (`as_form_text`), and each test reads a typed copy (`typed`): blank is the option's default, a
number field a number, a bad value one clear error (the test is refused; the form stays).
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


def as_form_text(options: Any) -> None:
    """In place: stampede's number options as text, so whatever the form posts for them Locust stores."""
    for dest in _actions():
        value = getattr(options, dest, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            setattr(options, dest, repr(value) if isinstance(value, float) else str(value))


def typed(options: Any) -> argparse.Namespace:
    """A copy of Locust's options with stampede's as the command line would give them (see the module doc)."""
    copy = argparse.Namespace(**vars(options))
    coerce_form_values(copy)
    return copy


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
