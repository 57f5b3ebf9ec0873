"""A tiny, honest shell for simulated sandboxes: commands produce what /bin/sh (dash) would print.

It stays one module (~1,070 lines): one interpreter whose lexer, parser, evaluator and builtins share its
state and error conventions; no piece is used without the others.

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
simulator, so nobody mistakes it for vendor behaviour. A hand-written lexer replaces `shlex` because shlex
cannot tell `echo a 1>&2` (a redirection) from `echo a 1 >&2` (an argument).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_OPERATOR_CHARS = ";&|<>()"
_TWO_CHAR_OPS = ("&&", "||", ";;", ">>", ">&", "<&", "<<", ">|", "<>")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
_MAX_OUTPUT = 4 * 1024 * 1024
_MAX_DEPTH = 16


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
    program, problem = _parse(command)
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
    run = _Run(memory_mb=memory_mb)
    base_env = dict(env) if env is not None else {}
    try:
        code = _Interpreter(run, flavor="sh", argv0="sh", params=[], env=base_env, cwd=cwd).run_script(
            command, fds={1: "out", 2: "err"}
        )
    except _OomKilled:
        code = 137  # SIGKILL from the OOM killer
    return ShellResult(
        exit_code=code,
        stdout="".join(run.out),
        stderr="".join(run.err),
        duration_s=run.t,
        oom_at_s=run.oom_at,
        oom_mb=run.oom_mb,
    )


# --- lexing -----------------------------------------------------------------------------------------


class _SyntaxError(Exception):
    """dash's `Syntax error: ...` (exit 2)."""


class _Unsupported(Exception):
    """Valid shell the simulator does not model."""


@dataclass(slots=True)
class _Word:
    parts: list[tuple[str, str, bool]]  # (kind 'lit'|'var', text, quoted)
    line: int

    def literal(self) -> str | None:
        """The word's text if it has no expansions."""
        if any(kind != "lit" for kind, _, _ in self.parts):
            return None
        return "".join(text for _, text, _ in self.parts)

    def unquoted_literal(self) -> str | None:
        parts = self.parts
        if len(parts) == 1:
            kind, text, quoted = parts[0]
            return None if kind != "lit" or quoted else text
        for kind, _, quoted in parts:
            if kind != "lit" or quoted:
                return None
        return "".join([text for _, text, _ in parts])


@dataclass(slots=True)
class _Op:
    op: str
    line: int


@dataclass(slots=True)
class _IoNumber:
    fd: int
    line: int


_Token = _Word | _Op | _IoNumber


def _lex(src: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c in " \t":
            i += 1
        elif c == "\n":
            tokens.append(_Op("\n", line))
            line += 1
            i += 1
        elif c == "#":
            while i < n and src[i] != "\n":
                i += 1
        elif c == "\\" and i + 1 < n and src[i + 1] == "\n":
            i += 2
            line += 1
        elif c in _OPERATOR_CHARS:
            two = src[i : i + 2]
            if two in _TWO_CHAR_OPS:
                tokens.append(_Op(two, line))
                i += 2
            else:
                tokens.append(_Op(c, line))
                i += 1
        else:
            word, i, line = _lex_word(src, i, line)
            lit = word.unquoted_literal()
            if lit is not None and lit.isdigit() and i < n and src[i] in "<>":
                tokens.append(_IoNumber(int(lit), word.line))
            else:
                tokens.append(word)
    return tokens


def _lex_word(src: str, i: int, line: int) -> tuple[_Word, int, int]:
    n = len(src)
    parts: list[tuple[str, str, bool]] = []
    start_line = line
    while i < n:
        c = src[i]
        if c in " \t\n" or c in _OPERATOR_CHARS:
            break
        if c == "'":
            j = src.find("'", i + 1)
            if j < 0:
                raise _SyntaxError("Unterminated quoted string")
            parts.append(("lit", src[i + 1 : j], True))
            line += src.count("\n", i, j)
            i = j + 1
        elif c == '"':
            i += 1
            buf: list[str] = []
            while True:
                if i >= n:
                    raise _SyntaxError("Unterminated quoted string")
                d = src[i]
                if d == '"':
                    i += 1
                    break
                if d == "\\" and i + 1 < n and src[i + 1] in '$`"\\\n':
                    if src[i + 1] != "\n":
                        buf.append(src[i + 1])
                    else:
                        line += 1
                    i += 2
                elif d == "$":
                    var, i = _lex_dollar(src, i)
                    if var is None:
                        buf.append("$")
                    else:
                        parts.append(("lit", "".join(buf), True))
                        buf = []
                        parts.append(("var", var, True))
                elif d == "`":
                    raise _Unsupported("command substitution (`...`)")
                else:
                    if d == "\n":
                        line += 1
                    buf.append(d)
                    i += 1
            parts.append(("lit", "".join(buf), True))
        elif c == "\\":
            if i + 1 < n and src[i + 1] == "\n":  # line continuation
                i += 2
                line += 1
            elif i + 1 < n:
                parts.append(("lit", src[i + 1], True))
                i += 2
            else:
                parts.append(("lit", "\\", False))
                i += 1
        elif c == "$":
            var, i = _lex_dollar(src, i)
            parts.append(("lit", "$", False) if var is None else ("var", var, False))
        elif c == "`":
            raise _Unsupported("command substitution (`...`)")
        else:
            j = i
            while j < n and src[j] not in " \t\n'\"\\$`" and src[j] not in _OPERATOR_CHARS:
                j += 1
            parts.append(("lit", src[i:j], False))
            i = j
    return _Word(parts, start_line), i, line


def _lex_dollar(src: str, i: int) -> tuple[str | None, int]:
    """Parse an expansion at src[i] == '$'; return (name, next index) or (None, i + 1) for a plain '$'."""
    n = len(src)
    if i + 1 >= n:
        return None, i + 1
    c = src[i + 1]
    if c == "{":
        j = src.find("}", i + 2)
        if j < 0:
            raise _SyntaxError("Missing '}'")
        name = src[i + 2 : j]
        if not (_NAME_RE.fullmatch(name) or name.isdigit() or name in ("?", "#")):
            raise _Unsupported(f"parameter expansion ${{{name}}}")
        return name, j + 1
    if c == "(":
        raise _Unsupported("command substitution $(...)")
    if c in "?#$!@*-" or c.isdigit():
        if c in "$!@*-":
            raise _Unsupported(f"special parameter ${c}")
        return c, i + 2
    m = _NAME_RE.match(src, i + 1)
    if m:
        return m.group(0), m.end()
    return None, i + 1


# --- parsing ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Redirect:
    fd: int
    op: str
    target: _Word


@dataclass(slots=True)
class _Command:
    words: list[_Word]
    redirects: list[_Redirect]
    line: int


@dataclass(slots=True)
class _AndOr:
    first: _Command
    rest: list[tuple[str, _Command]] = field(default_factory=list)


def _describe(tok: _Token | None) -> str:
    if tok is None:
        return "end of file"
    if isinstance(tok, _Op):
        return "newline" if tok.op == "\n" else f'"{tok.op}"'
    return "word"


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.toks = tokens
        self.i = 0

    def peek(self) -> _Token | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def parse(self) -> list[_AndOr]:
        lists: list[_AndOr] = []
        while True:
            tok = self.peek()
            while isinstance(tok, _Op) and tok.op == "\n":
                self.i += 1
                tok = self.peek()
            if tok is None:
                return lists
            lists.append(self.and_or())
            tok = self.peek()
            if tok is None:
                return lists
            assert isinstance(tok, _Op)
            if tok.op in (";", "\n"):
                self.i += 1
            elif tok.op == "&":
                raise _Unsupported("background jobs (&)")
            else:
                raise _SyntaxError(f"{_describe(tok)} unexpected")

    def and_or(self) -> _AndOr:
        node = _AndOr(self.command())
        while True:
            tok = self.peek()
            if isinstance(tok, _Op) and tok.op in ("&&", "||"):
                self.i += 1
                while isinstance(self.peek(), _Op) and self.peek().op == "\n":  # type: ignore[union-attr]
                    self.i += 1
                node.rest.append((tok.op, self.command()))
            else:
                return node

    def command(self) -> _Command:
        words: list[_Word] = []
        redirects: list[_Redirect] = []
        first = self.peek()
        line = first.line if first is not None else 1
        while True:
            tok = self.peek()
            if isinstance(tok, _Word):
                words.append(tok)
                self.i += 1
            elif isinstance(tok, _IoNumber) or (
                isinstance(tok, _Op) and tok.op in (">", ">>", ">&", "<", "<&", ">|", "<>", "<<")
            ):
                fd = None
                if isinstance(tok, _IoNumber):
                    fd = tok.fd
                    self.i += 1
                    tok = self.peek()
                if not isinstance(tok, _Op):
                    raise _SyntaxError(f"{_describe(tok)} unexpected")
                op = tok.op
                if op == "<<":
                    raise _Unsupported("here-documents (<<)")
                self.i += 1
                target = self.peek()
                if not isinstance(target, _Word):
                    raise _SyntaxError(f"{_describe(target)} unexpected (expecting word)")
                self.i += 1
                if fd is None:
                    fd = 0 if op.startswith("<") else 1
                redirects.append(_Redirect(fd, op, target))
            else:
                if not words and not redirects:
                    if isinstance(tok, _Op) and tok.op == "|":
                        raise _SyntaxError(f"{_describe(tok)} unexpected")
                    if isinstance(tok, _Op) and tok.op in ("(", ")"):
                        raise _Unsupported("subshells ( ... )")
                    raise _SyntaxError(f"{_describe(tok)} unexpected")
                if isinstance(tok, _Op) and tok.op == "|":
                    raise _Unsupported("pipes (|)")
                if isinstance(tok, _Op) and tok.op in ("(", ")"):
                    raise _Unsupported("subshells and functions ( ... )")
                return _Command(words, redirects, line)


@functools.lru_cache(maxsize=4096)
def _parse(src: str) -> tuple[list[_AndOr], Exception | None]:
    """Parse once per distinct command string (load tests repeat the same probes); trees are read-only."""
    try:
        return _Parser(_lex(src)).parse(), None
    except (_SyntaxError, _Unsupported) as exc:
        return [], exc


# --- running ----------------------------------------------------------------------------------------


class _ExitShell(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


class _OomKilled(Exception):
    pass


@dataclass(slots=True)
class _Run:
    """State shared by nested shells: the clock of the command, its output and the memory limit."""

    memory_mb: float
    t: float = 0.0
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    size: int = 0
    oom_at: float | None = None
    oom_mb: float | None = None


_Fds = dict[int, str | None]  # fd -> "out" | "err" | None (/dev/null)


class _Interpreter:
    def __init__(
        self,
        run: _Run,
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
    def write(self, fds: _Fds, fd: int, text: str) -> None:
        target = fds.get(fd, None)
        if target is None or not text:
            return
        room = _MAX_OUTPUT - self.r.size
        if room <= 0:
            return
        text = text[:room]
        self.r.size += len(text)
        (self.r.out if target == "out" else self.r.err).append(text)

    def error(self, fds: _Fds, message: str) -> None:
        """A diagnostic the way the shell itself prints it (`sh: 1: ...`)."""
        if self.flavor == "bash":  # bash 5.2 run from sh -c, as the gateway runs commands
            self.write(fds, 2, f"{self.argv0}: line {self.line}: {message}\n")
        else:
            self.write(fds, 2, f"{self.argv0}: {self.line}: {message}\n")

    def run_script(self, src: str, fds: _Fds) -> int:
        try:
            program, problem = _parse(src)
            if isinstance(problem, _SyntaxError):
                self.error(fds, f"Syntax error: {problem}")
                return 2
            if problem is not None:
                self.write(fds, 2, f"{self.argv0}: stampede-sim: unsupported shell syntax: {problem}\n")
                return 2
            for node in program:
                self.run_and_or(node, fds)
            return self.status
        except _ExitShell as exc:
            return exc.code

    def run_and_or(self, node: _AndOr, fds: _Fds) -> None:
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

    def expand(self, word: _Word) -> list[str]:
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

    def apply_redirects(self, cmd: _Command, fds: _Fds) -> _Fds | None:
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
                    raise _Unsupported(f"redirection {red.op}{target}")
            elif target == "/dev/null":
                new[red.fd] = None
            elif red.op.startswith("<"):
                self.error(fds, f"cannot open {target}: No such file")
                return None
            else:
                raise _Unsupported(
                    f"redirection to a file ({red.op} {target}): the simulated sandbox has no filesystem"
                )
        return new

    def run_command(self, cmd: _Command, fds: _Fds) -> int:
        self.line = cmd.line
        try:
            redirected = self.apply_redirects(cmd, fds)
        except _Unsupported as exc:
            self.write(fds, 2, f"{self.argv0}: stampede-sim: unsupported shell syntax: {exc}\n")
            return 2
        if redirected is None:
            return 2
        fds = redirected
        words = cmd.words
        k = 0
        assign_words: list[tuple[str, _Word]] = []
        while k < len(words):
            m = _ASSIGN_RE.fullmatch(words[k].unquoted_literal() or _raw_prefix(words[k]))
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

    def dispatch(self, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
        name = argv[0]
        base = name.rsplit("/", 1)[-1] if name.startswith(("/bin/", "/usr/bin/", "/usr/local/bin/")) else name
        handler = _BUILTINS.get(base)
        if handler is None:
            if base in _UNSUPPORTED_BUILTINS:
                self.write(fds, 2, f"{self.argv0}: stampede-sim: unsupported command: {base}\n")
                return 2
            if self.flavor == "bash":
                self.error(fds, f"{name}: command not found")
            else:
                self.error(fds, f"{name}: not found")
            return 127
        if base == "echo" and name != base:
            return _echo_gnu(self, argv, env, fds)
        return handler(self, argv, env, fds)


def _raw_prefix(word: _Word) -> str:
    """The unquoted literal text before the first quote/expansion (to spot `NAME="quoted value"`)."""
    out = []
    for kind, text, quoted in word.parts:
        if kind != "lit" or quoted:
            break
        out.append(text)
    prefix = "".join(out)
    return prefix if "=" in prefix else ""


def _strip_assignment_name(word: _Word, n: int) -> _Word:
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
    return _Word(parts, word.line)


# --- commands ---------------------------------------------------------------------------------------

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


def _echo(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
    if sh.flavor == "bash":
        return _echo_gnu(sh, argv, env, fds)
    args = argv[1:]
    newline = True
    if args and args[0] == "-n":
        newline = False
        args = args[1:]
    text, stop = _dash_unescape(" ".join(args), octal_needs_zero=True)
    sh.write(fds, 1, text if stop or not newline else text + "\n")
    return 0


def _echo_gnu(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
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


def _printf(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
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


def _true(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
    return 0


def _false(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
    return 1


def _exit(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
    if len(argv) < 2:
        raise _ExitShell(sh.status)
    arg = argv[1]
    if not arg.isdigit():
        sh.error(fds, f"exit: Illegal number: {arg}")
        raise _ExitShell(2)
    raise _ExitShell(int(arg) % 256)


_SLEEP_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _sleep(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
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


def _cat(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
    status = 0
    for arg in argv[1:]:
        if arg in ("-", "/dev/null"):
            continue
        sh.write(fds, 2, f"cat: {arg}: No such file or directory\n")
        status = 1
    return status


def _pwd(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
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


def _environ(sh: _Interpreter, env: dict[str, str]) -> list[tuple[str, str]]:
    items = list(env.items())
    if sh.flavor == "sh":
        items.sort(key=lambda kv: _dash_bucket(kv[0]))
    return items


def _env(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
    args = argv[1:]
    if not args:
        sh.write(fds, 1, "".join(f"{k}={v}\n" for k, v in _environ(sh, env)))
        return 0
    new_env = dict(_environ(sh, env))  # coreutils env appends new variables after the inherited ones
    while args and _ASSIGN_RE.fullmatch(args[0]):
        key, _, value = args[0].partition("=")
        new_env[key] = value
        args = args[1:]
    if not args:
        sh.write(fds, 1, "".join(f"{k}={v}\n" for k, v in new_env.items()))
        return 0
    if args[0].startswith("-"):
        sh.write(fds, 2, f"{sh.argv0}: stampede-sim: unsupported command: env {args[0]}\n")
        return 2
    if args[0] not in _BUILTINS or args[0] in ("exit", "export", ":"):
        sh.write(fds, 2, f"env: '{args[0]}': No such file or directory\n")
        return 127
    return sh.dispatch(args, new_env, fds)


def _printenv(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
    if len(argv) < 2:
        return _env(sh, argv[:1], env, fds)
    status = 0
    for name in argv[1:]:
        if name in env:
            sh.write(fds, 1, env[name] + "\n")
        else:
            status = 1
    return status


def _export(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
    for arg in argv[1:]:
        name, eq, value = arg.partition("=")
        if not _NAME_RE.fullmatch(name):
            sh.error(fds, f"export: {arg}: bad variable name")
            raise _ExitShell(2)
        if eq:
            sh.vars.pop(name, None)
            sh.env[name] = value
        elif name in sh.vars:
            sh.env[name] = sh.vars.pop(name)
    return 0


def _memhog(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
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
        raise _OomKilled()
    return 0


def _subshell(sh: _Interpreter, argv: list[str], env: dict[str, str], fds: _Fds) -> int:
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
    if sh.depth >= _MAX_DEPTH:
        sh.write(fds, 2, f"{sh.argv0}: stampede-sim: nesting deeper than {_MAX_DEPTH} shells\n")
        return 2
    argv0 = args[2] if len(args) > 2 else flavor
    child = _Interpreter(
        sh.r, flavor=flavor, argv0=argv0, params=args[3:], env=dict(env), cwd=sh.cwd, depth=sh.depth + 1
    )
    return child.run_script(args[1], fds)


_BUILTINS = {
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

_UNSUPPORTED_BUILTINS = frozenset(
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
