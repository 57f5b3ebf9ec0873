"""The web UI's form in one Locust process (a local runner or a master): offered with stampede's settings, and
read back, typed, as each test starts.

The form's users and ramp-up start at the scenario's peak and spawn rate (`-u`, `-r`: the shape still sets the
user count stage by stage; an open model hides both), with stampede's settings as text (`harness.locust.web_form`).
Each test started from it re-parses what it posted: the one legitimate re-parse of Locust's options after `init`. What
the posted settings do to the embedded vendor is the session's to decide.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import flask

from harness.locust.settings import RunSettings
from harness.locust.shapes import StampedeShape
from harness.locust.web_form import WebGuard, as_form_text, typed


class WebFormReset:
    """The form's settings for each test, from what the command line said and what the form posted."""

    def __init__(self, command_line: RunSettings) -> None:
        self.command_line = command_line  # a web form's blank users field keeps the command line's -u
        self.guard: WebGuard | None = None  # with a web UI: its login, and where its form may send credentials
        self.offered: tuple[int, float] | None = None  # the users and ramp-up the form started with (the shape's)

    def offer(self, environment: Any, shape: StampedeShape | None, on_stop: Callable[[], None]) -> None:
        """With a web UI: guard it, hide Locust's user fields, show stampede's settings; `on_stop` at its Stop."""
        web_ui = getattr(environment, "web_ui", None)
        if web_ui is None:
            return
        self.guard, warning = WebGuard.install(web_ui, environment.parsed_options)  # UsageError: not served
        if warning:
            print(f"stampede: {warning}", file=sys.stderr, flush=True)
        _no_host_banner(web_ui)  # a stampede scenario's endpoint is --base-url (or its own vendor), not a host
        if shape is None:
            return
        options = environment.parsed_options
        self.offered = shape.form_values(self.command_line)
        if self.offered is None:  # an open model: no users or ramp-up to ask for
            # This instance only (Locust declares it a class variable): headless `-u`/`-r` read as before.
            vars(shape)["use_common_options"] = False
        elif options is not None:  # the form starts with the scenario's peak and spawn rate, not 0
            options.num_users = options.num_users or self.offered[0]
            options.spawn_rate = options.spawn_rate or self.offered[1]
        if options is not None:
            as_form_text(options)

        def note_stop() -> None:
            if flask.request.path == "/stop":
                on_stop()

        web_ui.app.before_request(note_stop)

    def posted(self, options: Any, vendor_endpoint: tuple[str, str] | None) -> RunSettings:
        """The settings the test about to start runs with. UsageError: a bad value (the test is refused).

        `vendor_endpoint` is the embedded vendor's address and token: the form posting them back is not a user's
        --base-url or --token.
        """
        form = typed(options)
        if vendor_endpoint is not None:
            if form.base_url == vendor_endpoint[0]:
                form.base_url = None
            if form.token == vendor_endpoint[1]:
                form.token = None
        posted = RunSettings.from_options(form)
        if self.guard is not None:  # the command line's credentials never follow a new endpoint
            posted = self.guard.settings_for_test(self.command_line, posted)
        offered_users, offered_rate = self.offered or (None, None)
        return dataclasses.replace(  # a field left at what the form offered (or blank) is not the user's setting
            posted,
            users=self.command_line.users if posted.users in (None, 0, offered_users) else posted.users,
            spawn_rate=self.command_line.spawn_rate
            if posted.spawn_rate in (None, 0, offered_rate)
            else posted.spawn_rate,
        )


def _no_host_banner(web_ui: Any) -> None:
    """Locust's form warns that no User class has a host attribute; stampede's users never use one."""
    original = web_ui.update_template_args

    def update_template_args() -> None:
        original()
        web_ui.template_args.update(missing_host_warning=False, override_host_warning=False)

    web_ui.update_template_args = update_template_args
