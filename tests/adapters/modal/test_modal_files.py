"""Modal's sandbox filesystem API and `snapshot_filesystem`, through the real `modal` SDK, against the local plane.

SDK 1.6 runs `Sandbox.filesystem` as an exec of Modal's filesystem tool on the command router; the local router
plays that tool on the simulated sandbox's own file tree, so what one call writes the next reads, a real command
(under bubblewrap, where it runs) sees it, a snapshot copies it, and no other sandbox sees it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import modal
import modal.exception as mexc
import pytest
from modal.types import FileWatchEventType

from providers.base import SandboxSpec
from providers.sim.core.execution.isolated_shell import IsolatedShell
from tests.support.local_modal import local_modal

BINARY = bytes(range(256)) * 3 + b"\x00\r\n\xff"
COMMANDS = "sandbox.commands=" + ("real" if IsolatedShell.available() else "modelled")


def spec(rollout: str, image: str | None = None) -> SandboxSpec:
    return SandboxSpec(run_id="files", rollout_id=rollout, image=image)


async def test_bytes_round_trip_and_a_command_sees_them() -> None:
    async with local_modal(COMMANDS) as (_server, provider):
        ref = await provider.create(spec("r1"))
        await provider.wait_ready(ref, 30)
        big = os.urandom(1 << 20)
        await provider.upload_file(ref, "/data/deep/binary.bin", BINARY)
        await provider.upload_file(ref, "/data/big.bin", big)
        assert await provider.download_file(ref, "/data/deep/binary.bin") == BINARY
        assert await provider.download_file(ref, "/data/big.bin") == big
        await provider.upload_file(ref, "/data/big.bin", b"short")  # replaced, not appended
        assert await provider.download_file(ref, "/data/big.bin") == b"short"
        with pytest.raises(FileNotFoundError) as missing:
            await provider.download_file(ref, "/data/none.txt")
        assert isinstance(missing.value.__cause__, mexc.SandboxFilesystemNotFoundError)
        if IsolatedShell.available():
            seen = await provider.exec(ref, ["sh", "-c", "cat /data/big.bin; echo made > /data/made.txt"], 30)
            assert seen.stdout == "short"
            assert await provider.download_file(ref, "/data/made.txt") == b"made\n"


async def test_the_sdk_filesystem_namespace(tmp_path: Path) -> None:
    async with local_modal() as (_server, provider):
        ref = await provider.create(spec("r2"))
        await provider.wait_ready(ref, 30)
        fs: Any = ref.handle.filesystem
        await fs.make_directory.aio("/work/a/b")
        await fs.write_text.aio("hello\n", "/work/a/hello.txt")
        local = tmp_path / "in.bin"
        local.write_bytes(BINARY)
        await fs.copy_from_local.aio(local, "/work/a/b/in.bin")
        await fs.copy_to_local.aio("/work/a/b/in.bin", tmp_path / "out" / "back.bin")
        assert (tmp_path / "out" / "back.bin").read_bytes() == BINARY
        assert await fs.read_text.aio("/work/a/hello.txt") == "hello\n"
        listing = {entry.name: entry for entry in await fs.list_files.aio("/work/a")}
        assert sorted(listing) == ["b", "hello.txt"]
        assert listing["b"].is_dir() and listing["hello.txt"].size == 6
        assert (listing["hello.txt"].path, listing["hello.txt"].owner) == ("/work/a/hello.txt", "root")
        info = await fs.stat.aio("/work/a/b/in.bin")
        assert (info.is_file(), info.size, info.permissions) == (True, len(BINARY), "rw-r--r--")

        with pytest.raises(mexc.SandboxFilesystemNotFoundError):
            await fs.read_bytes.aio("/work/missing")
        with pytest.raises(mexc.SandboxFilesystemIsADirectoryError):
            await fs.read_bytes.aio("/work/a")
        with pytest.raises(mexc.SandboxFilesystemNotADirectoryError):
            await fs.list_files.aio("/work/a/hello.txt")
        with pytest.raises(mexc.SandboxFilesystemPathAlreadyExistsError):
            await fs.make_directory.aio("/work/a", create_parents=False)
        with pytest.raises(mexc.SandboxFilesystemDirectoryNotEmptyError):
            await fs.remove.aio("/work/a")
        with pytest.raises(mexc.SandboxFilesystemPermissionError):
            await fs.write_bytes.aio(b"x", "/usr/bin/planted")  # the host's system folders are read-only
        await fs.remove.aio("/work/a", recursive=True)
        assert await fs.list_files.aio("/work") == []


@pytest.mark.parametrize("backend", ["v2", "v1"])
async def test_snapshot_then_create_from_it_sees_the_files(backend: str) -> None:
    async with local_modal(sandbox_v2="1" if backend == "v2" else "0") as (_server, provider):
        ref = await provider.create(spec("origin"))
        await provider.wait_ready(ref, 30)
        await provider.upload_file(ref, "/state/kept.bin", BINARY)
        image_id = await provider.snapshot(ref)
        assert image_id.startswith("im-")
        await provider.upload_file(ref, "/state/kept.bin", b"changed after the snapshot")

        copy = await provider.create(spec("copy", image=image_id))  # an Image by id, as Image.from_id
        await provider.wait_ready(copy, 30)
        assert await provider.download_file(copy, "/state/kept.bin") == BINARY
        assert await provider.download_file(ref, "/state/kept.bin") == b"changed after the snapshot"

        # the SDK's own way: the Image object snapshot_filesystem returns, passed to Sandbox.create
        image = await ref.handle.snapshot_filesystem.aio()
        app = await provider.app()
        direct = await modal.Sandbox.create.aio(app=app, image=image, client=await provider.client())
        assert await direct.filesystem.read_bytes.aio("/state/kept.bin") == b"changed after the snapshot"
        await direct.terminate.aio()


async def test_sandboxes_do_not_share_files() -> None:
    async with local_modal() as (_server, provider):
        one, two = await provider.create(spec("a")), await provider.create(spec("b"))
        await provider.wait_ready(one, 30)
        await provider.wait_ready(two, 30)
        await provider.upload_file(one, "/tmp/mine.txt", b"one")
        with pytest.raises(FileNotFoundError):
            await provider.download_file(two, "/tmp/mine.txt")
        await provider.terminate(one)
        again = await modal.Sandbox.from_id.aio(one.sandbox_id, client=await provider.client())
        with pytest.raises(mexc.NotFoundError, match="unavailable"):  # an ended sandbox's files are gone with it
            await again.filesystem.read_bytes.aio("/tmp/mine.txt")


async def test_paths_never_leave_the_sandbox_and_special_files_are_refused() -> None:
    async with local_modal() as (server, provider):
        ref = await provider.create(spec("hostile"))
        await provider.wait_ready(ref, 30)
        fs: Any = ref.handle.filesystem
        root = server.registry.sim.tree(server.registry.by_id[ref.sandbox_id].sim.id).root
        await fs.write_bytes.aio(b"kept inside", "/../../../tmp/escape.txt")  # `..` stops at the sandbox's `/`
        assert (root / "tmp/escape.txt").read_bytes() == b"kept inside"
        (root / "tmp/link").symlink_to("/etc/hostname")  # an absolute target names the sandbox's own /etc
        assert await fs.read_text.aio("/tmp/link") == "sandbox\n"
        await fs.write_text.aio("through the link\n", "/tmp/link")
        assert (root / "etc/hostname").read_text() == "through the link\n"
        os.mkfifo(root / "tmp/pipe")
        with pytest.raises(mexc.SandboxFilesystemError, match="Not a regular file"):
            await fs.read_bytes.aio("/tmp/pipe")  # would block the router's loop if it were opened
        await fs.remove.aio("/tmp/link")  # the link goes, not its target
        assert (root / "etc/hostname").exists() and not (root / "tmp/link").exists()


async def test_watch_streams_changes_until_the_caller_stops() -> None:
    async with local_modal() as (_server, provider):
        ref = await provider.create(spec("watch"))
        await provider.wait_ready(ref, 30)
        fs: Any = ref.handle.filesystem
        await fs.make_directory.aio("/watched/sub")
        await fs.write_text.aio("old", "/watched/edited.txt")
        with pytest.raises(mexc.SandboxFilesystemNotFoundError):
            async for _event in fs.watch.aio("/nowhere", timeout=5):
                pass

        seen: list[tuple[str, str]] = []

        async def saw(kind: str, path: str) -> None:
            while (kind, path) not in seen:
                await asyncio.sleep(0.02)

        async def change() -> None:
            probes = 0
            while not seen:  # until the watch reports something, it may not have taken its first look
                await fs.write_text.aio("probe", f"/watched/probe-{probes}.txt")
                probes += 1
                await asyncio.sleep(0.05)
            # a look every 50 ms: a file made and removed between two looks would be no event at all
            await fs.write_text.aio("new", "/watched/created.txt")
            await saw("Create", "/watched/created.txt")
            await fs.write_text.aio("changed", "/watched/edited.txt")
            await fs.write_text.aio("deep", "/watched/sub/deep.txt")
            await saw("Create", "/watched/sub/deep.txt")
            await fs.remove.aio("/watched/created.txt")

        changer = asyncio.create_task(change())
        async for event in fs.watch.aio("/watched", recursive=True, timeout=60):
            seen.extend((event.type.value, path) for path in event.paths)
            if ("Remove", "/watched/created.txt") in seen:
                break  # the SDK closes the tool's stdin: the watch ends
        if ("Remove", "/watched/created.txt") not in seen:  # the watch ended on its own: it missed a change
            changer.cancel()
            pytest.fail(f"the watch ended without the removal; it saw {seen}")
        await changer
        assert ("Modify", "/watched/edited.txt") in seen

        only_creates = []
        async for event in fs.watch.aio("/watched", filter=[FileWatchEventType.Create], timeout=1):
            only_creates.append(event)  # nothing changes: the timeout (vendor seconds) ends it
        assert only_creates == []


async def test_the_legacy_snapshot_rpc_gives_the_same_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODAL_USE_LEGACY_FILESYSTEM_SNAPSHOT", "1")  # the SDK asks the control plane, V1 only
    async with local_modal(sandbox_v2="0") as (_server, provider):
        ref = await provider.create(spec("legacy"))
        await provider.wait_ready(ref, 30)
        await provider.upload_file(ref, "/kept.txt", b"legacy")
        copy = await provider.create(spec("copy", image=await provider.snapshot(ref)))
        await provider.wait_ready(copy, 30)
        assert await provider.download_file(copy, "/kept.txt") == b"legacy"
