"""The simulated sandbox shell's grammar: a lexer and parser for the subset of sh that `shell.py` runs.

A hand-written lexer replaces `shlex` because shlex cannot tell `echo a 1>&2` (a redirection) from `echo a 1 >&2`
(an argument). `parse` turns a command string into and-or lists of simple commands once per distinct string, or
names the syntax error (dash's wording) or the valid shell the simulator does not model.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

_OPERATOR_CHARS = ";&|<>()"
_TWO_CHAR_OPS = ("&&", "||", ";;", ">>", ">&", "<&", "<<", ">|", "<>")
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGN_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)


# --- lexing -----------------------------------------------------------------------------------------


class ShellSyntaxError(Exception):
    """dash's `Syntax error: ...` (exit 2)."""


class UnsupportedSyntax(Exception):
    """Valid shell the simulator does not model."""


@dataclass(slots=True)
class Word:
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
class Op:
    op: str
    line: int


@dataclass(slots=True)
class IoNumber:
    fd: int
    line: int


Token = Word | Op | IoNumber


def lex(src: str) -> list[Token]:
    tokens: list[Token] = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c in " \t":
            i += 1
        elif c == "\n":
            tokens.append(Op("\n", line))
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
                tokens.append(Op(two, line))
                i += 2
            else:
                tokens.append(Op(c, line))
                i += 1
        else:
            word, i, line = _lex_word(src, i, line)
            lit = word.unquoted_literal()
            if lit is not None and lit.isdigit() and i < n and src[i] in "<>":
                tokens.append(IoNumber(int(lit), word.line))
            else:
                tokens.append(word)
    return tokens


def _lex_word(src: str, i: int, line: int) -> tuple[Word, int, int]:
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
                raise ShellSyntaxError("Unterminated quoted string")
            parts.append(("lit", src[i + 1 : j], True))
            line += src.count("\n", i, j)
            i = j + 1
        elif c == '"':
            i += 1
            buf: list[str] = []
            while True:
                if i >= n:
                    raise ShellSyntaxError("Unterminated quoted string")
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
                    raise UnsupportedSyntax("command substitution (`...`)")
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
            raise UnsupportedSyntax("command substitution (`...`)")
        else:
            j = i
            while j < n and src[j] not in " \t\n'\"\\$`" and src[j] not in _OPERATOR_CHARS:
                j += 1
            parts.append(("lit", src[i:j], False))
            i = j
    return Word(parts, start_line), i, line


def _lex_dollar(src: str, i: int) -> tuple[str | None, int]:
    """Parse an expansion at src[i] == '$'; return (name, next index) or (None, i + 1) for a plain '$'."""
    n = len(src)
    if i + 1 >= n:
        return None, i + 1
    c = src[i + 1]
    if c == "{":
        j = src.find("}", i + 2)
        if j < 0:
            raise ShellSyntaxError("Missing '}'")
        name = src[i + 2 : j]
        if not (NAME_RE.fullmatch(name) or name.isdigit() or name in ("?", "#")):
            raise UnsupportedSyntax(f"parameter expansion ${{{name}}}")
        return name, j + 1
    if c == "(":
        raise UnsupportedSyntax("command substitution $(...)")
    if c in "?#$!@*-" or c.isdigit():
        if c in "$!@*-":
            raise UnsupportedSyntax(f"special parameter ${c}")
        return c, i + 2
    m = NAME_RE.match(src, i + 1)
    if m:
        return m.group(0), m.end()
    return None, i + 1


# --- parsing ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Redirect:
    fd: int
    op: str
    target: Word


@dataclass(slots=True)
class Command:
    words: list[Word]
    redirects: list[Redirect]
    line: int


@dataclass(slots=True)
class AndOr:
    first: Command
    rest: list[tuple[str, Command]] = field(default_factory=list)


def _describe(tok: Token | None) -> str:
    if tok is None:
        return "end of file"
    if isinstance(tok, Op):
        return "newline" if tok.op == "\n" else f'"{tok.op}"'
    return "word"


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.toks = tokens
        self.i = 0

    def peek(self) -> Token | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def parse(self) -> list[AndOr]:
        lists: list[AndOr] = []
        while True:
            tok = self.peek()
            while isinstance(tok, Op) and tok.op == "\n":
                self.i += 1
                tok = self.peek()
            if tok is None:
                return lists
            lists.append(self.and_or())
            tok = self.peek()
            if tok is None:
                return lists
            assert isinstance(tok, Op)
            if tok.op in (";", "\n"):
                self.i += 1
            elif tok.op == "&":
                raise UnsupportedSyntax("background jobs (&)")
            else:
                raise ShellSyntaxError(f"{_describe(tok)} unexpected")

    def and_or(self) -> AndOr:
        node = AndOr(self.command())
        while True:
            tok = self.peek()
            if isinstance(tok, Op) and tok.op in ("&&", "||"):
                self.i += 1
                while isinstance(self.peek(), Op) and self.peek().op == "\n":  # type: ignore[union-attr]
                    self.i += 1
                node.rest.append((tok.op, self.command()))
            else:
                return node

    def command(self) -> Command:
        words: list[Word] = []
        redirects: list[Redirect] = []
        first = self.peek()
        line = first.line if first is not None else 1
        while True:
            tok = self.peek()
            if isinstance(tok, Word):
                words.append(tok)
                self.i += 1
            elif isinstance(tok, IoNumber) or (
                isinstance(tok, Op) and tok.op in (">", ">>", ">&", "<", "<&", ">|", "<>", "<<")
            ):
                fd = None
                if isinstance(tok, IoNumber):
                    fd = tok.fd
                    self.i += 1
                    tok = self.peek()
                if not isinstance(tok, Op):
                    raise ShellSyntaxError(f"{_describe(tok)} unexpected")
                op = tok.op
                if op == "<<":
                    raise UnsupportedSyntax("here-documents (<<)")
                self.i += 1
                target = self.peek()
                if not isinstance(target, Word):
                    raise ShellSyntaxError(f"{_describe(target)} unexpected (expecting word)")
                self.i += 1
                if fd is None:
                    fd = 0 if op.startswith("<") else 1
                redirects.append(Redirect(fd, op, target))
            else:
                if not words and not redirects:
                    if isinstance(tok, Op) and tok.op == "|":
                        raise ShellSyntaxError(f"{_describe(tok)} unexpected")
                    if isinstance(tok, Op) and tok.op in ("(", ")"):
                        raise UnsupportedSyntax("subshells ( ... )")
                    raise ShellSyntaxError(f"{_describe(tok)} unexpected")
                if isinstance(tok, Op) and tok.op == "|":
                    raise UnsupportedSyntax("pipes (|)")
                if isinstance(tok, Op) and tok.op in ("(", ")"):
                    raise UnsupportedSyntax("subshells and functions ( ... )")
                return Command(words, redirects, line)


@functools.lru_cache(maxsize=4096)
def parse(src: str) -> tuple[list[AndOr], Exception | None]:
    """Parse once per distinct command string (load tests repeat the same probes); trees are read-only."""
    try:
        return _Parser(lex(src)).parse(), None
    except (ShellSyntaxError, UnsupportedSyntax) as exc:
        return [], exc
