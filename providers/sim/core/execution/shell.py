"""A tiny, honest shell for simulated sandboxes: commands produce what /bin/sh (dash) would print.

Load tests probe sandboxes with real commands (`echo ready`, `sh -c '...'`, `exit 3`, `sleep 2`); a stub
that answered every command with a constant would hide client bugs (stdout/stderr swapped, exit codes
dropped, timeouts never hit). This interpreter covers a small subset exactly and refuses the rest loudly:

- words and quoting ('...', "...", backslashes), `$NAME`, `${NAME}`, `$?`, `$0`..`$9`, `$#`, `NAME=value`
  assignments and prefixes, `export`;
- lists with `;`, newlines, `&&`, `||`; redirections `>&2`, `1>&2`, `2>&1`, `N>/dev/null`, `</dev/null`;
- `echo` (dash semantics under sh, bash semantics under `bash -c`), `printf`, `true`, `false`, `:`,
  `exit N`, `sleep N` (vendor seconds), `sh -c` / `bash -c`, `cat` (empty stdin, empty filesystem),
  `pwd`, `env`, `printenv`, and `memhog MB` (allocates; above the sandbox's memory it is OOM-killed).

An unknown command exits 127 with `sh: 1: NAME: not found`, as dash does. Syntax outside the subset
(pipes, backgrounding, command substitution, file redirections) exits 2 with a message that names the
simulator, so nobody mistakes it for vendor behaviour.

This module runs commands (expansion, field splitting, redirections, dispatch); the grammar is `shell_syntax.py`,
the commands themselves `shell_builtins.py`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from providers.sim.core.execution.shell_builtins import (
    BUILTINS,
    UNSUPPORTED_BUILTINS,
    ExitShell,
    Fds,
    OomKilled,
    Run,
    echo_gnu,
)
from providers.sim.core.execution.shell_syntax import (
    ASSIGN_RE,
    AndOr,
    Command,
    ShellSyntaxError,
    UnsupportedSyntax,
    Word,
    parse,
)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MAX_OUTPUT = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ShellResult:
    """What a command did. `duration_s` is vendor time spent (sleeps); `oom_at_s` is set when memhog
    exceeded the memory limit, at that offset into the command (the sandbox is then OOM-killed)."""

    exit_code: int
    stdout: str
    stderr: str
    duration_s: float = 0.0
    oom_at_s: float | None = None
    oom_mb: float | None = None


def run_shell(
    command: str,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str = "/",
    memory_mb: float = math.inf,
) -> ShellResult:
    """Run `command` as `sh -c command` would, without touching the host."""
    if _env_free(command):  # the common probe (`echo ready`): same answer whatever the environment
        return _run_env_free(command, cwd, memory_mb)
    return _run_uncached(command, env, cwd, memory_mb)


@functools.lru_cache(maxsize=4096)
def _run_env_free(command: str, cwd: str, memory_mb: float) -> ShellResult:
    return _run_uncached(command, None, cwd, memory_mb)


_ENV_READERS = frozenset(
    {
        "env",
        "printenv",
        "sh",
        "bash",
        "dash",
        "export",
        "/usr/bin/env",
        "/usr/bin/printenv",
        "/bin/sh",
        "/bin/bash",
    }
)


@functools.lru_cache(maxsize=4096)
def _env_free(command: str) -> bool:
    """True when the command's output cannot depend on environment variables."""
    program, problem = parse(command)
    if problem is not None:
        return True
    for node in program:
        for cmd in [node.first, *(c for _, c in node.rest)]:
            for word in [*cmd.words, *(r.target for r in cmd.redirects)]:
                for kind, text, _ in word.parts:
                    if kind == "var" or text in _ENV_READERS:
                        return False
    return True


def _run_uncached(command: str, env: Mapping[str, str] | None, cwd: str, memory_mb: float) -> ShellResult:
    run = Run(memory_mb=memory_mb)
    base_env = dict(env) if env is not None else {}
    try:
        code = _Interpreter(run, flavor="sh", argv0="sh", params=[], env=base_env, cwd=cwd).run_script(
            command, fds={1: "out", 2: "err"}
        )
    except OomKilled:
        code = 137  # SIGKILL from the OOM killer
    return ShellResult(
        exit_code=code,
        stdout="".join(run.out),
        stderr="".join(run.err),
        duration_s=run.t,
        oom_at_s=run.oom_at,
        oom_mb=run.oom_mb,
    )


class _Interpreter:
    def __init__(
        self,
        run: Run,
        *,
        flavor: str,
        argv0: str,
        params: list[str],
        env: dict[str, str],
        cwd: str,
        depth: int = 0,
    ) -> None:
        self.r = run
        self.flavor = flavor
        self.argv0 = argv0
        self.params = params
        self.env = env
        self.env["PWD"] = cwd  # dash and bash export PWD on start (an existing entry keeps its place)
        self.vars: dict[str, str] = {}
        self.overlay: dict[str, str] = {}  # assignments being expanded (`A=1 B=$A cmd`)
        self.cwd = cwd
        self.status = 0
        self.depth = depth
        self.line = 1

    # output
    def write(self, fds: Fds, fd: int, text: str) -> None:
        target = fds.get(fd, None)
        if target is None or not text:
            return
        room = _MAX_OUTPUT - self.r.size
        if room <= 0:
            return
        text = text[:room]
        self.r.size += len(text)
        (self.r.out if target == "out" else self.r.err).append(text)

    def error(self, fds: Fds, message: str) -> None:
        """A diagnostic the way the shell itself prints it (`sh: 1: ...`)."""
        if self.flavor == "bash":  # bash 5.2 run from sh -c, as the gateway runs commands
            self.write(fds, 2, f"{self.argv0}: line {self.line}: {message}\n")
        else:
            self.write(fds, 2, f"{self.argv0}: {self.line}: {message}\n")

    def run_script(self, src: str, fds: Fds) -> int:
        try:
            program, problem = parse(src)
            if isinstance(problem, ShellSyntaxError):
                self.error(fds, f"Syntax error: {problem}")
                return 2
            if problem is not None:
                self.write(fds, 2, f"{self.argv0}: stampede-sim: unsupported shell syntax: {problem}\n")
                return 2
            for node in program:
                self.run_and_or(node, fds)
            return self.status
        except ExitShell as exc:
            return exc.code

    def run_nested(
        self, script: str, fds: Fds, *, flavor: str, argv0: str, params: list[str], env: dict[str, str]
    ) -> int:
        """`sh -c SCRIPT`: a child shell sharing this command's clock, output and memory limit."""
        child = _Interpreter(
            self.r, flavor=flavor, argv0=argv0, params=params, env=env, cwd=self.cwd, depth=self.depth + 1
        )
        return child.run_script(script, fds)

    def run_and_or(self, node: AndOr, fds: Fds) -> None:
        self.status = self.run_command(node.first, fds)
        for op, cmd in node.rest:
            if (op == "&&") == (self.status == 0):
                self.status = self.run_command(cmd, fds)

    def lookup(self, name: str) -> str | None:
        if name == "?":
            return str(self.status)
        if name == "#":
            return str(len(self.params))
        if name.isdigit():
            k = int(name)
            if k == 0:
                return self.argv0
            return self.params[k - 1] if k <= len(self.params) else None
        if name in self.overlay:
            return self.overlay[name]
        if name in self.vars:
            return self.vars[name]
        return self.env.get(name)

    def expand(self, word: Word) -> list[str]:
        """Expansions and field splitting: unquoted expansions split on whitespace, quotes keep empties."""
        fields: list[str] = []
        cur: list[str] = []
        have = False  # the current field exists (something quoted or non-empty was added)
        for kind, text, quoted in word.parts:
            value = text if kind == "lit" else (self.lookup(text) or "")
            if kind == "lit" or quoted:
                cur.append(value)
                have = have or quoted or bool(value)
                continue
            pieces = value.split(None) if value.strip() else []
            if not pieces:
                if value and (cur or have):  # whitespace-only value ends the current field
                    fields.append("".join(cur))
                    cur, have = [], False
                continue
            if value[0].isspace() and (cur or have):
                fields.append("".join(cur))
                cur, have = [], False
            for k, piece in enumerate(pieces):
                if k > 0:
                    fields.append("".join(cur))
                    cur = []
                cur.append(piece)
                have = True
            if value[-1].isspace():
                fields.append("".join(cur))
                cur, have = [], False
        if cur or have:
            fields.append("".join(cur))
        return fields

    def apply_redirects(self, cmd: Command, fds: Fds) -> Fds | None:
        new = dict(fds)
        for red in cmd.redirects:
            fields = self.expand(red.target)
            target = fields[0] if len(fields) == 1 else None
            if target is None:
                self.error(fds, "ambiguous redirect")
                return None
            if red.op in (">&", "<&"):
                if target == "-" or target == "0":
                    new[red.fd] = None
                elif target in ("1", "2"):
                    new[red.fd] = new.get(int(target))
                else:
                    raise UnsupportedSyntax(f"redirection {red.op}{target}")
            elif target == "/dev/null":
                new[red.fd] = None
            elif red.op.startswith("<"):
                self.error(fds, f"cannot open {target}: No such file")
                return None
            else:
                raise UnsupportedSyntax(
                    f"redirection to a file ({red.op} {target}): the simulated sandbox has no filesystem"
                )
        return new

    def run_command(self, cmd: Command, fds: Fds) -> int:
        self.line = cmd.line
        try:
            redirected = self.apply_redirects(cmd, fds)
        except UnsupportedSyntax as exc:
            self.write(fds, 2, f"{self.argv0}: stampede-sim: unsupported shell syntax: {exc}\n")
            return 2
        if redirected is None:
            return 2
        fds = redirected
        words = cmd.words
        k = 0
        assign_words: list[tuple[str, Word]] = []
        while k < len(words):
            m = ASSIGN_RE.fullmatch(words[k].unquoted_literal() or _raw_prefix(words[k]))
            if m is None:
                break
            assign_words.append((m.group(1), _strip_assignment_name(words[k], len(m.group(1)) + 1)))
            k += 1
        # as dash does: command words do not see the prefix assignments, later assignments see earlier ones
        argv: list[str] = []
        for word in words[k:]:
            argv.extend(self.expand(word))
        overlay: dict[str, str] = {}
        self.overlay = overlay
        try:
            for name, value_word in assign_words:
                overlay[name] = " ".join(self.expand(value_word))
        finally:
            self.overlay = {}
        if not argv:
            for name, value in overlay.items():
                if name in self.env:
                    self.env[name] = value
                else:
                    self.vars[name] = value
            return 0
        env = self.env
        if overlay:
            env = dict(self.env)
            env.update(overlay)
        return self.dispatch(argv, env, fds)

    def dispatch(self, argv: list[str], env: dict[str, str], fds: Fds) -> int:
        name = argv[0]
        base = name.rsplit("/", 1)[-1] if name.startswith(("/bin/", "/usr/bin/", "/usr/local/bin/")) else name
        handler = BUILTINS.get(base)
        if handler is None:
            if base in UNSUPPORTED_BUILTINS:
                self.write(fds, 2, f"{self.argv0}: stampede-sim: unsupported command: {base}\n")
                return 2
            if self.flavor == "bash":
                self.error(fds, f"{name}: command not found")
            else:
                self.error(fds, f"{name}: not found")
            return 127
        if base == "echo" and name != base:
            return echo_gnu(self, argv, env, fds)
        return handler(self, argv, env, fds)


def _raw_prefix(word: Word) -> str:
    """The unquoted literal text before the first quote/expansion (to spot `NAME="quoted value"`)."""
    out = []
    for kind, text, quoted in word.parts:
        if kind != "lit" or quoted:
            break
        out.append(text)
    prefix = "".join(out)
    return prefix if "=" in prefix else ""


def _strip_assignment_name(word: Word, n: int) -> Word:
    parts: list[tuple[str, str, bool]] = []
    remaining = n
    for kind, text, _quoted in word.parts:
        if remaining > 0:
            cut = min(remaining, len(text))
            remaining -= cut
            text = text[cut:]
            if not text:
                continue
        parts.append((kind, text, True))  # no field splitting in assignments
    if not parts:
        parts = [("lit", "", True)]
    return Word(parts, word.line)
