"""The simulator's shell against the real /bin/sh (dash): same stdout, stderr and exit code."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from providers.sim.core.execution.shell import run_shell

ENV = {"FOO": "bar", "HOME": "/root", "PATH": "/usr/local/bin:/usr/bin:/bin"}

TABLE = [
    "echo hello",
    "echo -n hello",
    "echo -n -n x",
    "echo a b   c",
    "echo \"a  b\" 'c  d'",
    "echo 'a\\nb'",
    'echo "x\\c" y',
    "echo '\\0101\\tz'",
    "printf '%s|%d\\n' a 1 b 2",
    "printf 'no newline'",
    "printf '%5s|%-4d|%03d|%%\\n' ab 7 5",
    "printf '%s\\n'",
    "printf",
    "printf '%d\\n' abc",
    "true",
    "false",
    ":",
    "exit 3",
    "exit 300",
    "exit abc",
    "exit -1",
    "nope",
    "nope arg; echo after $?",
    "true && echo yes || echo no",
    "false && echo yes || echo no",
    "false || echo $? && echo b",
    "echo out; echo err >&2; echo err2 1>&2",
    "echo hidden >/dev/null; echo shown",
    "echo x 2>/dev/null",
    "echo a 1 >&2",
    "echo c 2>&1",
    "nope 2>/dev/null; echo $?",
    "nope 2>&1",
    "sh -c 'exit 7'; echo $?",
    "sh -c 'echo inner; nope2'",
    "sh -c 'echo $0 $1 $#' name one",
    "sh -c",
    "bash -c 'echo from bash; echo -e \"a\\tb\"'",
    "bash -c nope",
    "FOO=baz; echo $FOO",
    "echo $FOO ${FOO} \"$FOO\" '$FOO'",
    "X='a   b'; echo $X; echo \"$X\"",
    "X=' lead'; echo [$X]",
    'EMPTY=; echo a $EMPTY b "$EMPTY" c',
    "env",
    "FOO=inline env",
    "printenv FOO",
    "printenv NOPE; echo $?",
    "printenv",
    "pwd",
    "cat; echo $?",
    "cat /nonexistent; echo $?",
    "sleep 0.01 && echo slept",
    "sleep x; echo $?",
    "sleep; echo $?",
    'echo "unterminated',
    "echo 'unterminated",
    "echo a &&",
    "; echo x",
    "echo a; exit 4; echo b",
    "echo one\necho two",
    "echo one\nnope3",
    "echo \\$HOME 'single $FOO' \"double \\$FOO\"",
    "export BAR=1; printenv BAR",
    "echo $?",
    "echo $UNSET_VAR.",
    "echo a\\\nb",
    "echo # a comment",
    "  echo   spaced   ",
    "export BAR=1; env",
    "export ZED=1 ALPHA=2 MID=3; env",
    "A=1 B=2 env",
    "env Z=1 A=2",
    "env A=1 printenv A",
    "X=1 Y=$X; echo $Y",
    'X=1 Y=$X printenv Y; echo "[$X]"; A=5; A=6 B=$A printenv B; echo $A',
    'X=1 echo "[$X]"',
    'FOO="a b" printenv FOO',
    "printf '%x %o %X\\n' 255 8 255",
    "printf '%c%b\\n' xyz 'a\\tb'",
    "echo 'it''s'",
    "echo a;;echo b",
    "nope 2>&1 >/dev/null",
    "echo >&2 lead",
    "env nope",
    "exit",
    "false; exit",
]


@pytest.mark.skipif(shutil.which("sh") is None or shutil.which("bash") is None, reason="needs sh and bash")
@pytest.mark.parametrize("command", TABLE)
def test_matches_bin_sh(command: str) -> None:
    real = subprocess.run(
        ["sh", "-c", command],
        env=ENV,
        cwd="/",
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=10,
        executable="/bin/sh",
        check=False,
    )
    ours = run_shell(command, env=dict(ENV), cwd="/")
    assert (ours.exit_code, ours.stdout, ours.stderr) == (real.returncode, real.stdout, real.stderr)


def test_sleep_takes_vendor_time_and_exit_stops() -> None:
    result = run_shell("sleep 1.5; sleep 2m; exit 2; sleep 100")
    assert result.duration_s == pytest.approx(121.5)
    assert result.exit_code == 2


def test_memhog_under_and_over_the_limit() -> None:
    ok = run_shell("memhog 512 && echo fine", memory_mb=1024)
    assert (ok.exit_code, ok.stdout, ok.oom_at_s) == (0, "fine\n", None)
    killed = run_shell("echo before; sleep 3; memhog 2048; echo after", memory_mb=1024)
    assert killed.exit_code == 137
    assert killed.stdout == "before\n"
    assert killed.oom_at_s == pytest.approx(3.0)
    assert killed.oom_mb == 2048


@pytest.mark.parametrize(
    "command, fragment",
    [
        ("echo a | cat", "pipes"),
        ("sleep 1 &", "background"),
        ("echo $(date)", "command substitution"),
        ("echo x > /tmp/f", "filesystem"),
        ("cd /tmp", "unsupported command: cd"),
    ],
)
def test_unsupported_syntax_is_loud(command: str, fragment: str) -> None:
    result = run_shell(command)
    assert result.exit_code == 2
    assert "stampede-sim" in result.stderr and fragment in result.stderr
