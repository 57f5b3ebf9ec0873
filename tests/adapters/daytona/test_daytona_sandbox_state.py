"""Daytona's own SDK (daytona 0.226.1) against daytona-local with real commands: a sandbox that holds state.

What the SDK documents, checked the way a user's script sees it: `sandbox.fs` on the sandbox's own files (what a
command writes, `download_file` reads, and the other way round), sessions that keep `cd`, exports, variables and
functions between commands (sync, and async with streamed logs and stdin), `code_run` in python3, the home and
work dir of `daytona`, the setters (labels, auto-stop/archive/delete), stop/start keeping the disk, snapshots
taken of a sandbox and sandboxes created from them, `fork`, `get` after delete (404), and calls the local plane
does not model answering a plain DaytonaError (501), never "not found". Needs bubblewrap (CI installs it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from daytona import (
    AsyncDaytona,
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaError,
    DaytonaNotFoundError,
    FileDownloadRequest,
    FileUpload,
    ListSandboxesQuery,
    PtySize,
    SessionExecuteRequest,
)

from providers.sim.core.execution.isolated_shell import IsolatedShell
from providers.sim.daytona.server import DaytonaSettings, RunningDaytona, start_daytona

TOKEN = "state-token"
HOME = "/home/daytona"

pytestmark = pytest.mark.skipif(not IsolatedShell.available(), reason="real commands need bubblewrap")


@pytest.fixture(autouse=True)
def sdk_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID", "DAYTONA_SERVER_URL", "DAYTONA_OTEL_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DAYTONA_API_KEY", TOKEN)
    monkeypatch.setenv("DAYTONA_TARGET", "us")


Open = Callable[[], Awaitable[tuple[RunningDaytona, AsyncDaytona]]]


@pytest.fixture
async def open_front(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Open]:
    """`await open_front()` -> a local Daytona running real commands and an AsyncDaytona on it."""
    opened: list[tuple[RunningDaytona, AsyncDaytona]] = []

    async def open_() -> tuple[RunningDaytona, AsyncDaytona]:
        settings = DaytonaSettings(seed=5, token=TOKEN, time_scale=0.2, overrides=(("sandbox.commands", "real"),))
        front = await start_daytona(settings)
        monkeypatch.setenv("DAYTONA_API_URL", front.api_url)
        client = AsyncDaytona()
        opened.append((front, client))
        return front, client

    yield open_
    for front, client in opened:
        await client.close()
        await front.close()


def params(**extra: Any) -> CreateSandboxFromSnapshotParams:
    return CreateSandboxFromSnapshotParams(language="python", **extra)


async def test_files_are_the_files_commands_see(open_front: Open) -> None:
    _, daytona = await open_front()
    sandbox = await daytona.create(params(), timeout=30)
    fs = sandbox.fs
    assert await sandbox.get_user_home_dir() == HOME and await sandbox.get_work_dir() == HOME

    await fs.create_folder("work/deep", "755")
    await fs.upload_file(b"hello world\nsecond line\n", "work/hello.txt")  # relative: in the work dir
    await fs.upload_files([FileUpload(b"one", "work/a.txt"), FileUpload(bytes(range(256)), f"{HOME}/work/deep/b.bin")])
    seen = await sandbox.process.exec("cat hello.txt a.txt; id -un; pwd", cwd=f"{HOME}/work")
    assert seen.result == f"hello world\nsecond line\nonedaytona\n{HOME}/work\n"
    await sandbox.process.exec("printf 'from a command' > made.txt && chmod 600 made.txt", cwd=HOME)
    assert await fs.download_file("made.txt") == b"from a command"
    assert await fs.download_file("work/deep/b.bin") == bytes(range(256))

    names = {f.name: f for f in await fs.list_files("work")}
    assert set(names) == {"deep", "hello.txt", "a.txt"} and names["deep"].is_dir and not names["a.txt"].is_dir
    info = await fs.get_file_info(f"{HOME}/made.txt")
    assert (info.size, info.permissions, info.owner) == (14, "0600", "daytona")
    matches = await fs.find_files("work", "second")
    assert [(m.file, m.line, m.content) for m in matches] == [(f"{HOME}/work/hello.txt", 2, "second line")]
    assert (await fs.search_files("work", "*.bin")).files == [f"{HOME}/work/deep/b.bin"]
    replaced = await fs.replace_in_files(["work/hello.txt"], "world", "there")
    assert replaced[0].success and await fs.download_file("work/hello.txt") == b"hello there\nsecond line\n"
    await fs.set_file_permissions("work/a.txt", mode="755")
    assert (await sandbox.process.exec("stat -c %a work/a.txt")).result == "755\n"
    await fs.move_files("work/a.txt", "work/moved.txt")
    assert (await sandbox.process.exec("cat work/moved.txt; ls work")).result == "onedeep\nhello.txt\nmoved.txt\n"

    results = await fs.download_files([FileDownloadRequest("work/moved.txt"), FileDownloadRequest("work/missing")])
    assert results[0].result == b"one" and results[1].result is None and "not found" in (results[1].error or "")
    with pytest.raises(DaytonaError):
        await fs.upload_file(b"x", "/usr/bin/not-yours")  # the host's system folders are read-only
    assert (await sandbox.process.exec("ls /usr/bin/not-yours")).exit_code != 0
    await fs.delete_file("work", recursive=True)
    with pytest.raises(DaytonaNotFoundError):
        await fs.get_file_info("work")


def test_the_sync_client_moves_files_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sync SDK streams uploads and downloads with httpx (the async one with aiohttp): both are served."""

    async def serve_and_run() -> None:
        front = await start_daytona(
            DaytonaSettings(seed=5, token=TOKEN, time_scale=0.2, overrides=(("sandbox.commands", "real"),))
        )
        monkeypatch.setenv("DAYTONA_API_URL", front.api_url)
        try:
            await asyncio.to_thread(sync_calls)
        finally:
            await front.close()

    def sync_calls() -> None:
        daytona = Daytona()
        sandbox = daytona.create(params(), timeout=30)
        payload = b"streamed " * 10_000
        sandbox.fs.upload_file(payload, "big.bin")
        assert b"".join(sandbox.fs.download_file_stream("big.bin")) == payload
        local = tmp_path / "copy.bin"
        sandbox.fs.download_file("big.bin", str(local))
        assert local.read_bytes() == payload
        assert sandbox.process.exec("wc -c < big.bin").result.strip() == str(len(payload))
        daytona.delete(sandbox)
        if daytona._event_dispatcher is not None:  # the sync client has no close(): its event thread
            daytona._event_dispatcher.disconnect()

    asyncio.run(serve_and_run())


async def test_a_session_keeps_its_shell_state(open_front: Open) -> None:
    _, daytona = await open_front()
    sandbox = await daytona.create(params(), timeout=30)
    process = sandbox.process
    await process.create_session("s")

    async def run(command: str) -> Any:
        return await process.execute_session_command("s", SessionExecuteRequest(command=command))

    await run("mkdir -p /tmp/place && cd /tmp/place")
    await run('export GREETING=hi; plain=kept; shout() { echo "$1!"; }')
    step = await run('pwd; echo "$GREETING $plain"; shout hey; echo oops >&2; exit 3')
    assert (step.stdout, step.stderr, step.exit_code) == ("/tmp/place\nhi kept\nhey!\n", "oops\n", 3)
    assert (await run("pwd")).stdout == "/tmp/place\n"  # an exit ends the command, not the session

    await process.create_session("other")  # sessions are apart
    other = await process.execute_session_command("other", SessionExecuteRequest(command='pwd; echo "[$GREETING]"'))
    assert other.stdout == f"{HOME}\n[]\n"

    started = await process.execute_session_command(
        "s", SessionExecuteRequest(command='read line; echo "got $line"; echo done >&2', run_async=True)
    )
    await process.send_session_command_input("s", started.cmd_id, "typed\n")
    out: list[str] = []
    err: list[str] = []
    await asyncio.wait_for(process.get_session_command_logs_async("s", started.cmd_id, out.append, err.append), 30)
    assert ("".join(out), "".join(err)) == ("got typed\n", "done\n")
    logs = await process.get_session_command_logs("s", started.cmd_id)
    assert (logs.stdout, logs.stderr) == ("got typed\n", "done\n")
    assert (await process.get_session_command("s", started.cmd_id)).exit_code == 0

    await process.delete_session("s")
    assert [s.session_id for s in await process.list_sessions()] == ["other"]


async def test_code_run_runs_python3(open_front: Open) -> None:
    _, daytona = await open_front()
    sandbox = await daytona.create(params(), timeout=30)
    ran = await sandbox.process.code_run("import sys\nprint(sum(range(5)), sys.version_info[0])\nsys.exit(2)")
    assert (ran.exit_code, ran.result) == (2, "10 3\n")
    assert (await sandbox.process.code_run("def broken(")).exit_code != 0


async def test_setters_and_get_after_delete(open_front: Open) -> None:
    _, daytona = await open_front()
    sandbox = await daytona.create(params(labels={"team": "a"}), timeout=30)
    assert await sandbox.set_labels({"team": "b", "run": "7"}) == {"team": "b", "run": "7"}
    assert [s.id async for s in daytona.list(ListSandboxesQuery(labels={"run": "7"}))] == [sandbox.id]
    assert [s.id async for s in daytona.list(ListSandboxesQuery(labels={"team": "a"}))] == []
    await sandbox.set_autostop_interval(30)
    await sandbox.set_auto_archive_interval(60)
    await sandbox.set_auto_delete_interval(120)
    fetched = await daytona.get(sandbox.id)
    assert (fetched.auto_stop_interval, fetched.auto_archive_interval, fetched.auto_delete_interval) == (30, 60, 120)
    assert fetched.labels == {"team": "b", "run": "7"}

    with pytest.raises(DaytonaError) as unmodelled:  # the sandbox is alive: a 501, not "not found"
        await sandbox.git.clone("https://example.invalid/repo.git", "repo")
    assert not isinstance(unmodelled.value, DaytonaNotFoundError) and "not modelled" in str(unmodelled.value)
    with pytest.raises(DaytonaError) as volumes:
        await daytona.volume.list()
    assert not isinstance(volumes.value, DaytonaNotFoundError)

    await daytona.delete(sandbox)
    with pytest.raises(DaytonaNotFoundError):
        await daytona.get(sandbox.id)


async def test_stop_keeps_the_disk_until_start(open_front: Open) -> None:
    _, daytona = await open_front()
    sandbox = await daytona.create(params(), timeout=30)
    await sandbox.process.exec("echo kept > note.txt")
    await sandbox.stop(timeout=30)
    assert sandbox.state == "stopped"
    await sandbox.archive()
    await sandbox.refresh_data()
    assert sandbox.state == "archived"
    await sandbox.start(timeout=30)
    assert sandbox.state == "started"
    assert (await sandbox.process.exec("cat note.txt")).result == "kept\n"


async def test_snapshots_and_forks_copy_the_files(open_front: Open) -> None:
    _, daytona = await open_front()
    source = await daytona.create(params(), timeout=30)
    await source.fs.upload_file(b"v1", "state.txt")
    await source.create_snapshot("with-state", timeout=30)
    await source.fs.upload_file(b"v2", "state.txt")  # after the snapshot: not in it

    snapshot = await daytona.snapshot.get("with-state")
    assert (snapshot.name, snapshot.source_sandbox_id) == ("with-state", source.id)
    listed = await daytona.snapshot.list()
    assert "with-state" in [s.name for s in listed.items] and listed.total >= 2  # and the default snapshot
    restored = await daytona.create(CreateSandboxFromSnapshotParams(snapshot="with-state"), timeout=30)
    assert await restored.fs.download_file("state.txt") == b"v1"

    forked = await source.fork(name="the-fork", timeout=30)
    assert forked.id != source.id and forked.name == "the-fork" and forked.state == "started"
    assert await forked.fs.download_file("state.txt") == b"v2"
    await forked.fs.upload_file(b"fork only", "state.txt")
    assert await source.fs.download_file("state.txt") == b"v2"

    await daytona.snapshot.delete(snapshot)
    with pytest.raises(DaytonaNotFoundError):
        await daytona.snapshot.get("with-state")


async def test_a_terminal_outlives_its_client(open_front: Open) -> None:
    """A PTY session: created and attached, left, listed, resized, attached again, typed into, exited."""
    _, daytona = await open_front()
    sandbox = await daytona.create(params(), timeout=30)
    process = sandbox.process
    handle = await process.create_pty_session(id="term", on_data=lambda _: None, pty_size=PtySize(rows=24, cols=80))
    await handle.disconnect()
    assert [(s.id, s.active) for s in await process.list_pty_sessions()] == [("term", True)]
    resized = await process.resize_pty_session("term", PtySize(rows=30, cols=100))
    assert (resized.rows, resized.cols) == (30, 100)

    seen: list[bytes] = []
    handle = await process.connect_pty_session("term", on_data=seen.append)
    await handle.send_input("stty size; echo made-$((6 * 7)) > typed.txt; exit 5\n")
    result = await asyncio.wait_for(handle.wait(), 30)
    assert result.exit_code == 5
    assert b"30 100" in b"".join(seen)  # the resize reached the terminal
    assert await sandbox.fs.download_file("typed.txt") == b"made-42\n"
    assert not (await process.get_pty_session_info("term")).active
    await process.kill_pty_session("term")
    assert await process.list_pty_sessions() == []


async def test_quick_commands_at_once_keep_their_exit_codes(open_front: Open) -> None:
    """Twenty `exit N` at once: a command that ends before its spawn returns still reports its own code."""
    _, daytona = await open_front()
    sandbox = await daytona.create(params(), timeout=30)
    results = await asyncio.gather(*(sandbox.process.exec(f"exit {n}") for n in range(20)))
    assert [r.exit_code for r in results] == list(range(20))


async def test_the_code_interpreter_keeps_each_contexts_state(open_front: Open) -> None:
    _, daytona = await open_front()
    sandbox = await daytona.create(params(), timeout=30)
    interpreter = sandbox.code_interpreter
    await interpreter.run_code("counter = 41")
    result = await interpreter.run_code(
        "import sys\ncounter += 1\nprint(counter)\nsys.stderr.write('note')\ncounter * 2"
    )
    assert (result.stdout, result.stderr, result.error) == ("42\n84\n", "note", None)

    context = await interpreter.create_context()
    assert [c.id for c in await interpreter.list_contexts()] == [context.id]
    isolated = await interpreter.run_code("print(counter)", context=context)  # another context: its own globals
    assert isolated.error is not None and isolated.error.name == "NameError"
    failed = await interpreter.run_code("raise ValueError('boom')", context=context)
    assert failed.error is not None and (failed.error.name, failed.error.value) == ("ValueError", "boom")
    with pytest.raises(DaytonaError):  # past its timeout the cell is interrupted; the context lives on
        await interpreter.run_code("while True: pass", context=context, timeout=1)
    assert (await interpreter.run_code("print('alive')", context=context)).stdout == "alive\n"
    await interpreter.delete_context(context)
    assert await interpreter.list_contexts() == []
