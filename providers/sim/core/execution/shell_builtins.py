"""The simulated sandbox shell's commands: `echo`, `printf`, `exit`, `sleep`, `env`, `sh -c`, `memhog`, ...

Each builtin runs against `Shell` (what `shell.py`'s interpreter offers a command: output, diagnostics, variables,
dispatch and nested shells) and writes what dash, bash or coreutils would print. `Run` is the state one command
line shares with every shell nested in it: its vendor-time clock, its output and the sandbox's memory limit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Protocol

from providers.sim.core.execution.shell_syntax import ASSIGN_RE, NAME_RE

MAX_DEPTH = 16


class ExitShell(Exception):
    """`exit N`: unwinds the shell running it with that status."""

    def __init__(self, code: int) -> None:
        self.code = code


class OomKilled(Exception):
    """`memhog` past the sandbox's memory: the kernel kills the whole command line (exit 137)."""


@dataclass(slots=True)
class Run:
    """State shared by nested shells: the clock of the command, its output and the memory limit."""

    memory_mb: float
    t: float = 0.0
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    size: int = 0
    oom_at: float | None = None
    oom_mb: float | None = None


Fds = dict[int, str | None]  # fd -> "out" | "err" | None (/dev/null)


class Shell(Protocol):
    """What a builtin may use of the shell running it."""

    r: Run
    flavor: str
    argv0: str
    cwd: str
    status: int
    depth: int
    env: dict[str, str]
    vars: dict[str, str]

    def write(self, fds: Fds, fd: int, text: str) -> None: ...

    def error(self, fds: Fds, message: str) -> None: ...

    def dispatch(self, argv: list[str], env: dict[str, str], fds: Fds) -> int: ...

    def run_nested(
        self, script: str, fds: Fds, *, flavor: str, argv0: str, params: list[str], env: dict[str, str]
    ) -> int: ...


_DASH_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def _dash_unescape(text: str, *, octal_needs_zero: bool) -> tuple[str, bool]:
    """Backslash escapes as dash's echo/printf interpret them; returns (text, stop) where \\c stops output."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        d = text[i + 1]
        if d == "c":
            return "".join(out), True
        if d in _DASH_ESCAPES:
            out.append(_DASH_ESCAPES[d])
            i += 2
        elif (d == "0" and octal_needs_zero) or (d in "01234567" and not octal_needs_zero):
            j = i + 2 if octal_needs_zero else i + 1
            k = j
            while k < n and k < j + 3 and text[k] in "01234567":
                k += 1
            out.append(chr(int(text[j:k] or "0", 8) & 0xFF))
            i = k
        else:
            out.append("\\" + d)
            i += 2
    return "".join(out), False


def _echo(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    if sh.flavor == "bash":
        return echo_gnu(sh, argv, env, fds)
    args = argv[1:]
    newline = True
    if args and args[0] == "-n":
        newline = False
        args = args[1:]
    text, stop = _dash_unescape(" ".join(args), octal_needs_zero=True)
    sh.write(fds, 1, text if stop or not newline else text + "\n")
    return 0


def echo_gnu(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    """bash's builtin echo (and coreutils echo): -n, -e, -E options; no escapes by default."""
    args = argv[1:]
    newline, escapes = True, False
    while args and re.fullmatch(r"-[neE]+", args[0]):
        for flag in args[0][1:]:
            if flag == "n":
                newline = False
            elif flag == "e":
                escapes = True
            else:
                escapes = False
        args = args[1:]
    text = " ".join(args)
    if escapes:
        text, stop = _dash_unescape(text, octal_needs_zero=True)
        if stop:
            newline = False
    sh.write(fds, 1, text + "\n" if newline else text)
    return 0


_PRINTF_SPEC = re.compile(r"%([-+ #0]*)(\d*)(?:\.(\d*))?([sbdiouxXc%])")


def _printf(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    if len(argv) < 2:
        sh.error(fds, "printf: usage: printf format [arg ...]")
        return 2
    fmt, args = argv[1], argv[2:]
    status = 0
    out: list[str] = []
    pos = 0

    def next_arg() -> str | None:
        nonlocal pos
        if pos < len(args):
            pos += 1
            return args[pos - 1]
        return None

    def number(text: str | None) -> int:
        nonlocal status
        if text is None or text == "":
            return 0
        t = text.strip()
        if len(t) >= 2 and t[0] in "'\"":
            return ord(t[1])
        try:
            return int(t, 0) if t.lower().startswith(("0x", "-0x")) else int(t)
        except ValueError:
            m = re.match(r"[-+]?\d+", t)
            sh.error(fds, f"printf: {text}: {'expected numeric value' if not m else 'not completely converted'}")
            status = 1
            return int(m.group(0)) if m else 0

    while True:
        consumed_before = pos
        i = 0
        stop = False
        while i < len(fmt):
            m = _PRINTF_SPEC.match(fmt, i) if fmt[i] == "%" else None
            if fmt[i] == "%" and m is None:
                sh.error(fds, f"printf: %{fmt[i + 1 : i + 2]}: invalid directive")
                sh.write(fds, 1, "".join(out))
                return 1
            if m is None:
                j = fmt.find("%", i)
                j = len(fmt) if j < 0 else j
                text, stop = _dash_unescape(fmt[i:j], octal_needs_zero=False)
                out.append(text)
                i = j
                if stop:
                    break
                continue
            flags, width, prec, conv = m.group(1), m.group(2), m.group(3), m.group(4)
            i = m.end()
            if conv == "%":
                out.append("%")
                continue
            width_n = min(int(width), 100_000) if width else 0
            if conv in "sb":
                value = next_arg() or ""
                if conv == "b":
                    value, stop = _dash_unescape(value, octal_needs_zero=True)
                if prec is not None:
                    value = value[: int(prec or 0)]
            elif conv == "c":
                value = (next_arg() or "")[:1]
            else:
                n_val = number(next_arg())
                py = {"i": "d", "u": "d"}.get(conv, conv)
                spec = flags.replace("#", "#" if conv in "oxX" else "")
                value = format(n_val, f"{spec}{py}") if spec.strip("-") else format(n_val, py)
                if prec:
                    digits = value.lstrip("-+ ")
                    sign = value[: len(value) - len(digits)]
                    value = sign + digits.zfill(int(prec))
            if width_n and len(value) < width_n:
                if "-" in flags:
                    value = value.ljust(width_n)
                elif "0" in flags and conv not in "sbc":
                    sign = value[0] if value[:1] in "+- " else ""
                    value = sign + value[len(sign) :].rjust(width_n - len(sign), "0")
                else:
                    value = value.rjust(width_n)
            out.append(value)
            if stop:
                break
        if stop or pos >= len(args) or pos == consumed_before:
            break
    sh.write(fds, 1, "".join(out))
    return status


def _true(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    return 0


def _false(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    return 1


def _exit(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    if len(argv) < 2:
        raise ExitShell(sh.status)
    arg = argv[1]
    if not arg.isdigit():
        sh.error(fds, f"exit: Illegal number: {arg}")
        raise ExitShell(2)
    raise ExitShell(int(arg) % 256)


_SLEEP_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _sleep(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    if len(argv) < 2:
        sh.write(fds, 2, "sleep: missing operand\nTry 'sleep --help' for more information.\n")
        return 1
    total = 0.0
    for arg in argv[1:]:
        m = re.fullmatch(r"(\d+\.?\d*|\.\d+|inf|infinity)([smhd]?)", arg, re.IGNORECASE)
        if not m:
            sh.write(fds, 2, f"sleep: invalid time interval '{arg}'\nTry 'sleep --help' for more information.\n")
            return 1
        total += float(m.group(1)) * _SLEEP_UNITS[m.group(2).lower()]
    sh.r.t += total
    return 0


def _cat(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    status = 0
    for arg in argv[1:]:
        if arg in ("-", "/dev/null"):
            continue
        sh.write(fds, 2, f"cat: {arg}: No such file or directory\n")
        status = 1
    return status


def _pwd(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    sh.write(fds, 1, sh.cwd + "\n")
    return 0


def _dash_bucket(name: str) -> int:
    """dash keeps variables in a 39-bucket hash table (var.c hashvar) and builds a child's environment
    by walking it, so `env` under sh lists variables in bucket order, insertion order within a bucket."""
    data = name.encode()
    value = data[0] << 4 if data else 0
    for byte in data:
        value += byte
    return value % 39


def _environ(sh: Shell, env: dict[str, str]) -> list[tuple[str, str]]:
    items = list(env.items())
    if sh.flavor == "sh":
        items.sort(key=lambda kv: _dash_bucket(kv[0]))
    return items


def _env(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    args = argv[1:]
    if not args:
        sh.write(fds, 1, "".join(f"{k}={v}\n" for k, v in _environ(sh, env)))
        return 0
    new_env = dict(_environ(sh, env))  # coreutils env appends new variables after the inherited ones
    while args and ASSIGN_RE.fullmatch(args[0]):
        key, _, value = args[0].partition("=")
        new_env[key] = value
        args = args[1:]
    if not args:
        sh.write(fds, 1, "".join(f"{k}={v}\n" for k, v in new_env.items()))
        return 0
    if args[0].startswith("-"):
        sh.write(fds, 2, f"{sh.argv0}: stampede-sim: unsupported command: env {args[0]}\n")
        return 2
    if args[0] not in BUILTINS or args[0] in ("exit", "export", ":"):
        sh.write(fds, 2, f"env: '{args[0]}': No such file or directory\n")
        return 127
    return sh.dispatch(args, new_env, fds)


def _printenv(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    if len(argv) < 2:
        return _env(sh, argv[:1], env, fds)
    status = 0
    for name in argv[1:]:
        if name in env:
            sh.write(fds, 1, env[name] + "\n")
        else:
            status = 1
    return status


def _export(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    for arg in argv[1:]:
        name, eq, value = arg.partition("=")
        if not NAME_RE.fullmatch(name):
            sh.error(fds, f"export: {arg}: bad variable name")
            raise ExitShell(2)
        if eq:
            sh.vars.pop(name, None)
            sh.env[name] = value
        elif name in sh.vars:
            sh.env[name] = sh.vars.pop(name)
    return 0


def _memhog(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    """`memhog MB`: allocate MB mebibytes; beyond the sandbox's memory the kernel OOM-kills it."""
    if len(argv) != 2:
        sh.write(fds, 2, "memhog: usage: memhog MB\n")
        return 2
    try:
        mb = float(argv[1])
    except ValueError:
        mb = math.nan
    if not mb >= 0:
        sh.write(fds, 2, f"memhog: invalid size '{argv[1]}'\n")
        return 2
    if mb > sh.r.memory_mb:
        sh.r.oom_at = sh.r.t
        sh.r.oom_mb = mb
        raise OomKilled()
    return 0


def _subshell(sh: Shell, argv: list[str], env: dict[str, str], fds: Fds) -> int:
    """`sh -c SCRIPT [NAME [ARGS...]]` and `bash -c ...`: a nested shell sharing the command's clock."""
    flavor = "bash" if argv[0].endswith("bash") else "sh"
    args = argv[1:]
    if not args:
        return 0  # reads its (empty) stdin
    if args[0] != "-c":
        if args[0].startswith("-"):
            sh.write(fds, 2, f"{sh.argv0}: stampede-sim: unsupported command: {argv[0]} {args[0]}\n")
            return 2
        sh.write(
            fds,
            2,
            f"{flavor}: {args[0]}: No such file\n"
            if flavor == "sh"
            else f"{flavor}: {args[0]}: No such file or directory\n",
        )
        return 127 if flavor == "bash" else 2
    if len(args) < 2:
        if flavor == "sh":
            sh.write(fds, 2, "sh: 0: -c requires an argument\n")
        else:
            sh.write(fds, 2, "bash: -c: option requires an argument\n")
        return 2
    if sh.depth >= MAX_DEPTH:
        sh.write(fds, 2, f"{sh.argv0}: stampede-sim: nesting deeper than {MAX_DEPTH} shells\n")
        return 2
    argv0 = args[2] if len(args) > 2 else flavor
    return sh.run_nested(args[1], fds, flavor=flavor, argv0=argv0, params=args[3:], env=dict(env))


BUILTINS = {
    "echo": _echo,
    "printf": _printf,
    "true": _true,
    "false": _false,
    ":": _true,
    "exit": _exit,
    "sleep": _sleep,
    "cat": _cat,
    "pwd": _pwd,
    "env": _env,
    "printenv": _printenv,
    "export": _export,
    "memhog": _memhog,
    "sh": _subshell,
    "bash": _subshell,
    "dash": _subshell,
}

UNSUPPORTED_BUILTINS = frozenset(
    {
        "cd",
        "read",
        "source",
        ".",
        "eval",
        "exec",
        "trap",
        "wait",
        "set",
        "unset",
        "shift",
        "test",
        "[",
        "if",
        "then",
        "else",
        "fi",
        "for",
        "while",
        "until",
        "do",
        "done",
        "case",
        "esac",
        "local",
        "return",
        "function",
        "alias",
        "ulimit",
        "umask",
        "kill",
    }
)
