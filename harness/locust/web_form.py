"""Stampede's settings as Locust's web UI posts them: back to the types the command line gives.

The form posts every field as text. Locust stores a posted value converted with the type of the value it
replaces: text for an option that was None, `float(text)` for one that was a number, and a blank or mistyped
number there is an HTTP 500 before any of our code runs. So under the web UI stampede's number options are
kept as text (`as_form_text`), and each test reads a typed copy (`typed`): blank is the option's default, a
number field a number, a bad value one clear error (the test is refused; the form stays).

The form starts runs with this process's vendor credentials, so the UI is guarded (`WebGuard`): bound to loopback
unless `--web-host` says otherwise, another address only with credentials (ours, HTTP Basic from
STAMPEDE_WEB_CREDENTIALS, or Locust's --web-login); the page never carries the token; and a test whose form
names another provider or base URL runs only with a token that form posted itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import hmac
import ipaddress
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from harness.errors import UsageError
from harness.locust.settings import RunSettings, add_arguments
from harness.wire.redact import is_secret_option


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
    except (TypeError, ValueError, argparse.ArgumentTypeError):  # foundation.converters' range checks raise the last
        flag = action.option_strings[0] if action.option_strings else action.dest
        raise UsageError(f"{flag} takes a number (got {text!r} in the web form)") from None
    return value


# -- who may use the web UI, and where its form may send the run's credentials (issue 28, row 1) ------------------
LOOPBACK_WEB_HOST = "127.0.0.1"
WEB_CREDENTIALS_ENV = "STAMPEDE_WEB_CREDENTIALS"
WEB_HOST_HELP = (
    "Host to bind the web interface to. stampede's default: 127.0.0.1 (its form starts runs with this process's"
    f" vendor credentials); any other address needs {WEB_CREDENTIALS_ENV}=USER:PASSWORD or Locust's --web-login"
)


def bind_web_ui_to_loopback(parser: Any) -> None:
    """On Locust's parser: `--web-host` defaults to loopback instead of every interface."""
    parser.set_defaults(web_host=LOOPBACK_WEB_HOST)
    for action in parser._actions:
        if action.dest == "web_host":
            action.help = WEB_HOST_HELP


def is_loopback(host: str) -> bool:
    """Whether a bind address only takes connections from this machine ("" and "*" are every interface)."""
    host = host.strip().strip("[]")
    if host in ("", "*"):
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def _credentials(environ: Mapping[str, str]) -> tuple[str, str] | None:
    text = environ.get(WEB_CREDENTIALS_ENV, "")
    if not text:
        return None
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise UsageError(f"{WEB_CREDENTIALS_ENV} takes USER:PASSWORD (both non-empty)")
    return user, password


@dataclass(slots=True)
class WebGuard:
    """What guards one Locust web UI: HTTP Basic credentials (ours, when given) on every request, the token
    kept out of the page, and the token (if any) the last `POST /swarm` brought with it."""

    credentials: tuple[str, str] | None = None
    posted_token: str | None = None

    @classmethod
    def install(cls, web_ui: Any, options: Any, environ: Mapping[str, str] | None = None) -> tuple[WebGuard, str]:
        """Guard `web_ui` before it starts serving; the warning to print ("" on loopback).

        A bind address other than loopback without credentials is refused (UsageError): its form would start
        runs, with this process's vendor credentials, for anyone who reaches the port.
        """
        environ = os.environ if environ is None else environ
        guard = cls(credentials=_credentials(environ))
        host = str(getattr(options, "web_host", "") or "")
        locust_login = bool(getattr(options, "web_login", False))
        shown = host if host not in ("", "*") else "0.0.0.0"
        warning = ""
        if not is_loopback(host):
            if guard.credentials is None and not locust_login:
                raise UsageError(
                    f"the web UI would listen on {shown} with no login, and its form starts runs with this process's"
                    f" vendor credentials: use --web-host {LOOPBACK_WEB_HOST}, or set {WEB_CREDENTIALS_ENV}=USER:PASSWORD"
                    " (HTTP Basic) or Locust's --web-login"
                )
            clear = not (getattr(options, "tls_cert", "") and getattr(options, "tls_key", ""))
            warning = (
                f"the web UI listens on {shown}, beyond this machine: whoever logs in starts runs with its vendor"
                " credentials" + ("; plain HTTP (--tls-cert/--tls-key for HTTPS)" if clear else "")
            )
        web_ui.app.before_request(guard._check_request)
        _keep_secrets_off_the_page(web_ui)
        return guard, warning

    def _check_request(self) -> Any:
        """Flask's before_request: ask for our credentials, and note the token a POST /swarm brings."""
        import flask

        request = flask.request
        if self.credentials is not None:
            auth = request.authorization
            user, password = self.credentials
            given = (auth.username or "", auth.password or "") if auth is not None else ("", "")
            if not (
                hmac.compare_digest(given[0].encode(), user.encode())
                and hmac.compare_digest(given[1].encode(), password.encode())
            ):
                return flask.Response(
                    "stampede: log in\n", 401, {"WWW-Authenticate": 'Basic realm="stampede", charset="UTF-8"'}
                )
        if request.method == "POST" and request.path.rstrip("/").endswith("/swarm"):
            self.posted_token = request.form.get("token", "").strip() or None
        return None

    def settings_for_test(self, command_line: RunSettings, posted: RunSettings) -> RunSettings:
        """The settings a test started from the form runs with: what it posted, with credentials that never
        follow a new endpoint. A provider or base URL other than the command line's runs only with a token the
        form posted itself (secret provider options stay behind); otherwise the command line's token is kept
        unless the form posted one. UsageError: the test is refused."""
        moved = (posted.provider, posted.base_url) != (command_line.provider, command_line.base_url)
        token = self.posted_token
        if moved and not posted.embedded_vendor:
            if token is None:
                raise UsageError(
                    f"the form changed the provider or base URL (to {posted.provider} at {posted.base_url or 'its default'}),"
                    " but not the token: refused, the command line's credentials stay with its endpoint; give the"
                    " token for the new one in the form"
                )
            options = {k: v for k, v in command_line.provider_options.items() if not is_secret_option(k)}
            return dataclasses.replace(posted, token=token, provider_options=options)
        return dataclasses.replace(
            posted,
            token=token or (None if moved else command_line.token),
            provider_options=command_line.provider_options,  # not in the form; no stale vendor options
        )


def _keep_secrets_off_the_page(web_ui: Any) -> None:
    """Locust fills a secret field of the form with the value the command line gave (in the page's source):
    blanked, so opening the page does not hand out the token. A blank token field keeps the command line's."""
    original = web_ui.update_template_args

    def update_template_args() -> None:
        original()
        for option in (web_ui.template_args.get("extra_options") or {}).values():
            if isinstance(option, dict) and option.get("is_secret"):
                option["default_value"] = None

    web_ui.update_template_args = update_template_args
