"""E2B's own SDK (e2b 2.56.0) against e2b-local with real commands: a sandbox that holds state.

What the SDK documents, checked the way a user's script sees it (sync `Sandbox` in worker threads and async
`AsyncSandbox`): `files` on the sandbox's own tree as `user` in /home/user (what a command writes, `read` reads,
and the other way round; list with depth, info, exists, rename, remove, make_dir, metadata, gzip, a watch that
sees a command's write, signed download and upload URLs); `pause` then `connect` resuming with the files kept and
a paused sandbox listed as paused; lifecycle on_timeout="pause" (autoPause) pausing at the timeout, not ending;
snapshots taken, listed, started from and deleted; `fork` copying the files; simulated metrics; the list's template/started-after filters and its newest-first order; stdin and PTYs. Needs
bubblewrap (CI installs it).
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b import (
    AsyncSandbox,
    FilesystemEventType,
    FileType,
    NotFoundException,
    Sandbox,
    SandboxException,
    SandboxQuery,
    SandboxState,
)
from e2b.sandbox.commands.command_handle import PtySize

from providers.sim.core.execution.isolated_shell import IsolatedShell
from providers.sim.e2b.server import E2BSettings, RunningE2B, start_e2b

TOKEN = "e2b_state"
FLAVOURS = ("sync", "async")
HOME = "/home/user"

pytestmark = pytest.mark.skipif(not IsolatedShell.available(), reason="real commands need bubblewrap")


@pytest.fixture(autouse=True)
def sdk_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DOMAIN", "E2B_DEBUG", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(name, raising=False)


class Sdk:
    """One SDK flavour: `await sdk(fn, ...)` runs a sync call in a thread, an async one on the loop."""

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self.Sandbox: Any = AsyncSandbox if flavour == "async" else Sandbox

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.flavour == "async":
            return await fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def create(self, *args: Any, **kwargs: Any) -> Any:
        return await self(self.Sandbox.create, *args, **kwargs)

    async def listed(self, **kwargs: Any) -> list[Any]:
        pages = self.Sandbox.list(**kwargs)
        found: list[Any] = []
        while pages.has_next:
            found.extend(await self(pages.next_items))
        return found


Open = Callable[[str], Awaitable[tuple[RunningE2B, Sdk]]]


@pytest.fixture
async def open_e2b(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Open]:
    """`await open_e2b(flavour)` -> a local E2B running real commands and the SDK pointed at it."""
    opened: list[RunningE2B] = []

    async def open_(flavour: str) -> tuple[RunningE2B, Sdk]:
        overrides = (("sandbox.commands", "real"), ("exec.default_cwd", HOME))  # e2b-like, without its faults
        settings = E2BSettings(profile="ideal", seed=5, token=TOKEN, overrides=overrides)
        e2b = await start_e2b(settings)
        opened.append(e2b)
        for name, value in e2b.sdk_environment().items():
            monkeypatch.setenv(name, value)
        return e2b, Sdk(flavour)

    yield open_
    for e2b in opened:
        await e2b.close()


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_files_are_the_sandboxs_own_and_commands_see_them(flavour: str, open_e2b: Open) -> None:
    _, sdk = await open_e2b(flavour)
    sbx = await sdk.create()
    files = sbx.files
    info = await sdk(files.write, "notes/a.txt", "from the files API\n", metadata={"author": "me"})
    assert (info.path, info.type, info.metadata) == (f"{HOME}/notes/a.txt", FileType.FILE, {"author": "me"})
    shown = await sdk(sbx.commands.run, "cat notes/a.txt; id -un; pwd; echo made > notes/b.txt")
    assert shown.stdout == f"from the files API\nuser\n{HOME}\n"
    assert await sdk(files.read, "notes/b.txt") == "made\n"
    assert await sdk(files.read, f"{HOME}/notes/b.txt", format="bytes") == bytearray(b"made\n")

    await sdk(files.make_dir, "notes/deep/er")
    assert await sdk(files.make_dir, "notes/deep") is False  # it exists
    names = [(e.name, e.type) for e in await sdk(files.list, "notes")]
    assert names == [("a.txt", FileType.FILE), ("b.txt", FileType.FILE), ("deep", FileType.DIR)]
    deep = [e.path for e in await sdk(files.list, "notes", depth=3)]
    assert deep == [f"{HOME}/notes/{p}" for p in ("a.txt", "b.txt", "deep", "deep/er")]
    entry = await sdk(files.get_info, "notes/a.txt")
    assert (entry.size, entry.mode, entry.permissions, entry.owner, entry.group) == (
        19,
        0o644,
        "-rw-r--r--",
        "user",
        "user",
    )
    assert entry.metadata == {"author": "me"}

    moved = await sdk(files.rename, "notes/a.txt", "notes/deep/a.txt")
    assert (moved.path, moved.metadata) == (f"{HOME}/notes/deep/a.txt", {"author": "me"})
    assert await sdk(files.exists, "notes/a.txt") is False
    await sdk(files.remove, "notes/deep")
    assert await sdk(files.exists, "notes/deep/a.txt") is False
    with pytest.raises(NotFoundException):  # FileNotFoundException is one
        await sdk(files.read, "notes/deep/a.txt")
    await sdk(files.write, "zipped.txt", "gzip both ways", gzip=True)
    assert await sdk(files.read, "zipped.txt", gzip=True) == "gzip both ways"
    refused = await sdk(sbx.commands.run, "touch /usr/x 2>&1; echo $?")
    assert refused.stdout.strip().endswith("1")  # the host's system folders are read-only
    await sdk(sbx.kill)


async def test_a_watch_sees_a_commands_write(open_e2b: Open) -> None:
    _, sdk = await open_e2b("sync")
    sbx = await sdk.create()
    await sdk(sbx.files.make_dir, "watched")
    handle = await sdk(sbx.files.watch_dir, "watched", include_entry=True)
    await sdk(sbx.commands.run, "echo hi > watched/new.txt")
    events = await sdk(handle.get_new_events)
    kinds = {(e.name, e.type) for e in events}
    assert ("new.txt", FilesystemEventType.CREATE) in kinds and ("new.txt", FilesystemEventType.WRITE) in kinds
    created = next(e for e in events if e.type == FilesystemEventType.CREATE)
    assert created.entry is not None and created.entry.path == f"{HOME}/watched/new.txt"
    await sdk(handle.stop)
    await sdk(sbx.kill)


def _get(url: str) -> tuple[int, bytes]:
    """A plain GET with no header at all (the signature is the credential), as a browser or curl makes it."""
    try:
        with urllib.request.urlopen(url) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def test_signed_urls_download_and_upload_without_the_sdk(open_e2b: Open) -> None:
    _, sdk = await open_e2b("sync")
    sbx = await sdk.create()
    await sdk(sbx.files.write, "shared.txt", "signed")
    url = sbx.download_url("shared.txt", use_signature_expiration=60)
    assert await asyncio.to_thread(_get, url) == (200, b"signed")
    expired = sbx.download_url("shared.txt", use_signature_expiration=-60)
    assert await asyncio.to_thread(_get, expired) == (401, b'{"code": 401, "message": "signature is already expired"}')
    forged = url.replace("signature=v1_", "signature=v1_x")
    assert (await asyncio.to_thread(_get, forged))[0] == 401
    upload = sbx.upload_url("up/loaded.bin")
    payload = gzip.compress(b"x", mtime=0)  # binary bytes; mtime=0 so they are the same bytes on every call
    async with httpx.AsyncClient() as http:
        answer = await http.post(upload, files={"file": ("loaded.bin", payload)})
    assert answer.status_code == 200 and answer.json()[0]["path"] == f"{HOME}/up/loaded.bin"
    assert await sdk(sbx.files.read, "up/loaded.bin", format="bytes") == bytearray(payload)
    await sdk(sbx.kill)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_pause_then_connect_resumes_with_the_files_kept(flavour: str, open_e2b: Open) -> None:
    e2b, sdk = await open_e2b(flavour)
    sbx = await sdk.create(metadata={"case": "pause"})
    await sdk(sbx.files.write, "kept.txt", "still here")
    assert await sdk(sbx.pause) is True
    assert await sdk(sbx.is_running) is False
    assert await sdk(sdk.Sandbox.pause, sbx.sandbox_id) is False  # already paused: the API's 409
    (listed,) = await sdk.listed(query=SandboxQuery(metadata={"case": "pause"}, state=[SandboxState.PAUSED]))
    assert (listed.sandbox_id, listed.state) == (sbx.sandbox_id, SandboxState.PAUSED)
    assert await sdk.listed(query=SandboxQuery(metadata={"case": "pause"}, state=[SandboxState.RUNNING])) == []
    assert e2b.simulator.stats()["running"] == 0  # a paused sandbox holds no slot
    resumed = await sdk(sbx.connect)
    assert resumed.sandbox_id == sbx.sandbox_id and await sdk(resumed.is_running) is True
    assert await sdk(resumed.files.read, "kept.txt") == "still here"
    assert (await sdk(resumed.commands.run, "cat kept.txt")).stdout == "still here"
    await sdk(resumed.kill)


async def _left_running(sdk: Sdk, sbx: Any) -> Any:
    """The sandbox's state once it is no longer running (None: gone), polled for at most 30 s."""
    for _ in range(300):
        try:
            state = (await sdk(sbx.get_info)).state
        except NotFoundException:
            return None
        if state != SandboxState.RUNNING:
            return state
        await asyncio.sleep(0.1)
    raise AssertionError(f"{sbx.sandbox_id} still running 30 s after its timeout")


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_on_timeout_pause_pauses_at_the_timeout_and_connect_resumes_it(flavour: str, open_e2b: Open) -> None:
    e2b, sdk = await open_e2b(flavour)
    paused = await sdk.create(timeout=60, lifecycle={"on_timeout": "pause", "auto_resume": False})
    killed = await sdk.create(timeout=60)  # the default: killed at its timeout
    now = await sdk.create(timeout=60, lifecycle={"on_timeout": {"action": "pause", "keep_memory": False}})
    await sdk(paused.files.write, "kept.txt", "still here")
    await sdk(paused.set_timeout, 1)
    await sdk(killed.set_timeout, 1)
    await sdk(now.set_timeout, 0)  # the timeout is now
    assert await _left_running(sdk, paused) == SandboxState.PAUSED
    assert await _left_running(sdk, killed) is None
    assert await _left_running(sdk, now) == SandboxState.PAUSED
    assert await sdk(paused.is_running) is False
    assert e2b.simulator.stats()["running"] == 0  # paused sandboxes hold no slot
    resumed = await sdk(paused.connect)
    assert resumed.sandbox_id == paused.sandbox_id
    assert (await sdk(resumed.get_info)).state == SandboxState.RUNNING
    assert (await sdk(resumed.commands.run, "cat kept.txt")).stdout == "still here"
    with pytest.raises(SandboxException, match="autoResume"):  # waking on traffic is refused, not ignored
        await sdk.create(timeout=60, lifecycle={"on_timeout": "pause", "auto_resume": True})
    for sbx in (resumed, now):
        await sdk(sbx.kill)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_snapshots_are_started_from_listed_and_deleted(flavour: str, open_e2b: Open) -> None:
    _, sdk = await open_e2b(flavour)
    sbx = await sdk.create()
    await sdk(sbx.files.write, "app/config.json", '{"env": "test"}')
    snapshot = await sdk(sbx.create_snapshot, name="my-snap")
    assert snapshot.snapshot_id and snapshot.names == ["my-snap"]
    await sdk(sbx.files.write, "app/config.json", "changed after the snapshot")
    pages = sdk.Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id)
    assert [s.snapshot_id for s in await sdk(pages.next_items)] == [snapshot.snapshot_id]
    assert await sdk(sdk.Sandbox.list_snapshots(name="other").next_items) == []
    first, second = await sdk.create(snapshot.snapshot_id), await sdk.create("my-snap")
    assert await sdk(first.files.read, "app/config.json") == '{"env": "test"}'
    await sdk(first.files.write, "app/config.json", "first's own")
    assert await sdk(second.files.read, "app/config.json") == '{"env": "test"}'
    assert await sdk(sdk.Sandbox.delete_snapshot, snapshot.snapshot_id) is True
    assert await sdk(sdk.Sandbox.delete_snapshot, snapshot.snapshot_id) is False
    for each in (sbx, first, second):
        await sdk(each.kill)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_a_fork_copies_the_files_and_goes_its_own_way(flavour: str, open_e2b: Open) -> None:
    _, sdk = await open_e2b(flavour)
    sbx = await sdk.create()
    await sdk(sbx.files.write, "state.txt", "before the fork")
    forks = await sdk(sbx.fork, count=2)
    assert len(forks) == 2 and len({f.sandbox_id for f in forks} | {sbx.sandbox_id}) == 3
    for fork in forks:
        assert await sdk(fork.files.read, "state.txt") == "before the fork"
    await sdk(forks[0].files.write, "state.txt", "the fork's own")
    assert await sdk(sbx.files.read, "state.txt") == "before the fork"
    assert await sdk(forks[1].files.read, "state.txt") == "before the fork"
    for each in (sbx, *forks):
        await sdk(each.kill)


async def test_metrics_are_served_and_bounded_by_the_asked_range(open_e2b: Open) -> None:
    _, sdk = await open_e2b("sync")
    before = datetime.datetime.now(datetime.UTC)
    sbx = await sdk.create()
    await sdk(sbx.files.write, "weight.bin", b"x" * 4096)
    (metric,) = await sdk(sbx.get_metrics)
    assert metric.cpu_count == 2 and metric.mem_total == 512 * 1024 * 1024
    assert metric.disk_used >= 4096 and metric.disk_total > metric.disk_used
    assert abs(metric.timestamp.timestamp() - before.timestamp()) < 5
    past = before - datetime.timedelta(hours=1)
    assert await sdk(sbx.get_metrics, start=past, end=past + datetime.timedelta(minutes=30)) == []
    await sdk(sbx.kill)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_the_list_filters_by_template_and_start_and_sorts_newest_first(flavour: str, open_e2b: Open) -> None:
    _, sdk = await open_e2b(flavour)
    older = await sdk.create(metadata={"case": "list"})
    time.sleep(0.01)
    newer = await sdk.create(metadata={"case": "list"})
    query = SandboxQuery(metadata={"case": "list"})
    assert [s.sandbox_id for s in await sdk.listed(query=query)] == [newer.sandbox_id, older.sandbox_id]
    ascending = await sdk.listed(query=query, order="asc")
    assert [s.sandbox_id for s in ascending] == [older.sandbox_id, newer.sandbox_id]
    assert await sdk.listed(query=SandboxQuery(metadata={"case": "list"}, template="other")) == []
    assert len(await sdk.listed(query=SandboxQuery(metadata={"case": "list"}, template="base"))) == 2
    started = (await sdk(newer.get_info)).started_at
    after = await sdk.listed(query=SandboxQuery(metadata={"case": "list"}, started_after=started))
    assert [s.sandbox_id for s in after] == [newer.sandbox_id]
    later = SandboxQuery(metadata={"case": "list"}, started_after=started + datetime.timedelta(seconds=1))
    assert await sdk.listed(query=later) == []
    for each in (older, newer):
        await sdk(each.kill)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_stdin_reaches_a_background_command(flavour: str, open_e2b: Open) -> None:
    _, sdk = await open_e2b(flavour)
    sbx = await sdk.create()
    cmd = await sdk(sbx.commands.run, "cat", background=True, stdin=True)
    await sdk(sbx.commands.send_stdin, cmd.pid, "line one\n")
    await sdk(cmd.send_stdin, b"line two\n")
    await sdk(cmd.close_stdin)
    result = await sdk(cmd.wait)
    assert (result.exit_code, result.stdout) == (0, "line one\nline two\n")
    await sdk(sbx.kill)


async def test_a_pty_runs_a_shell_that_can_be_resized_and_rejoined(open_e2b: Open) -> None:
    _, sdk = await open_e2b("sync")
    sbx = await sdk.create()
    terminal = await sdk(sbx.pty.create, PtySize(rows=24, cols=80), envs={"ABC": "123"})
    await sdk(sbx.pty.resize, terminal.pid, PtySize(rows=40, cols=100))
    await sdk(terminal.disconnect)  # the shell runs on
    again = await sdk(sbx.pty.connect, terminal.pid)
    await sdk(sbx.pty.send_stdin, terminal.pid, b"echo $ABC; stty size; exit\n")
    output: list[bytes] = []
    result = await sdk(again.wait, on_pty=output.append)
    text = b"".join(output).decode()
    assert result.exit_code == 0 and "123" in text and "40 100" in text
    await sdk(sbx.kill)
