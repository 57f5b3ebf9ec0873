"""Files in and out of a docker sandbox, and a snapshot of one: the archive API, exec streams and commit.

The daemon's archive API (`put_archive` / `get_archive`, what `docker cp` uses) works on the container's own
layer: the daemon refuses a `put` on a read-only root filesystem (the provider's hardened default) and a tmpfs
(the provider's `scratch`, /tmp) is invisible to it (a `put` lands under the mount, a `get` reads what lies
beneath). So a path under a tmpfs, or any write on a read-only root, goes through the command's own streams
instead: `cat > path` fed on stdin, `cat path` read from stdout, as the sandbox's user. The rest uses the archive
API, as root (Docker's `docker cp` semantics).

A snapshot is `commit`: an image of the container's own layer, which a later create starts from. A tmpfs is
never in it, and with a read-only root nothing else can be written, so `read_only=true` has no snapshot.
"""

from __future__ import annotations

import asyncio
import io
import posixpath
import secrets
import tarfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

import aiodocker
import aiohttp
from aiodocker.containers import DockerContainer
from aiodocker.exceptions import DockerError

from providers.base import FailureKind, Phase, ProviderError
from providers.vendors.docker.commands import collect_output, exec_exit_code
from providers.vendors.docker.errors import docker_error_kind, short_error

SNAPSHOT_REPOSITORY = "stampede-snapshot"
_MISSING = (b"No such file or directory", b"can't open")
_WRITE = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'


def sandbox_path(path: str) -> str:
    """The absolute, normalised path (docker's archive API takes absolute ones only)."""
    if not path.startswith("/"):
        raise ProviderError(FailureKind.INVALID_REQUEST, f"docker sandboxes take absolute file paths (got {path!r})")
    return posixpath.normpath(path)


@asynccontextmanager
async def file_errors(verb: str, path: str, timeout_s: float) -> AsyncIterator[None]:
    """A file step, bounded, its failures on the taxonomy; a missing file stays `FileNotFoundError` (the contract's
    answer)."""
    try:
        async with asyncio.timeout(timeout_s):
            yield
    except (FileNotFoundError, ProviderError):
        raise
    except TimeoutError:
        raise ProviderError(FailureKind.EXEC_TIMEOUT, f"{verb} {path}: the daemon did not finish in time") from None
    except DockerError as exc:
        raise ProviderError(docker_error_kind(exc, Phase.EXEC), f"{verb} {path}: {short_error(exc)}") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise ProviderError(FailureKind.TRANSPORT, f"{verb} {path}: {short_error(exc)}") from None


def via_exec(path: str, *, read_only: bool, write: bool, tmpfs: Sequence[str]) -> bool:
    """Whether this path's bytes must travel on a command's streams rather than the archive API."""
    under_tmpfs = any(path == mount or path.startswith(mount.rstrip("/") + "/") for mount in tmpfs)
    return under_tmpfs or (write and read_only)


def tree_tar(files: Mapping[str, bytes]) -> bytes:
    """One tar of many files, at their absolute paths (leading folders are made by whoever extracts it)."""
    tar = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=tar, mode="w") as archive:
        for path, data in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, now
            archive.addfile(info, io.BytesIO(data))
    return tar.getvalue()


async def write_file(container: DockerContainer, path: str, data: bytes, *, streams: bool) -> None:
    """Write `data` at `path`, making its parent folders."""
    if not streams:
        await container.put_archive("/", tree_tar({path: data}))
        return
    await _feed(container, ["sh", "-c", _WRITE, "sh", path], data, f"writing {path}")


async def write_tree(container: DockerContainer, files: Mapping[str, bytes], *, streams: bool) -> None:
    """Write many files in one call: one tar, to the archive API or on a command's stdin (`tar -x`, the sandbox's
    own user), rather than a call per file."""
    if not files:
        return
    if not streams:
        await container.put_archive("/", tree_tar(files))
        return
    await _feed(container, ["tar", "-x", "-f", "-", "-C", "/"], tree_tar(files), f"writing {len(files)} files")


async def _feed(container: DockerContainer, argv: list[str], data: bytes, what: str) -> None:
    """Run `argv` with `data` on its stdin (then its end); a non-zero exit is the command's refusal."""
    execution = await container.exec(argv, stdin=True, stdout=True, stderr=True)
    stderr = bytearray()
    async with execution.start(detach=False) as stream:
        await stream.write_in(data)
        connection = stream._resp.connection if stream._resp is not None else None
        if connection is not None and connection.transport is not None:
            connection.transport.write_eof()  # `cat` sees the end of its input; the answer still comes back
        while (message := await stream.read_out()) is not None:
            if message.stream == 2:
                stderr.extend(message.data)
    if await exec_exit_code(execution) != 0:
        said = bytes(stderr).decode("utf-8", "replace").strip()
        raise ProviderError(FailureKind.INVALID_REQUEST, f"{what} in the sandbox failed: {said}")


async def read_file(container: DockerContainer, path: str, *, streams: bool) -> bytes:
    """The bytes at `path`; FileNotFoundError (the daemon's answer as its cause) when there is no such file."""
    if not streams:
        try:
            archive = await container.get_archive(path)
        except DockerError as exc:
            if exc.status == 404:
                raise FileNotFoundError(f"no such file in the sandbox: {path}") from exc
            raise
        with archive:
            member = archive.next()
            if member is None or not member.isfile():
                raise ProviderError(FailureKind.INVALID_REQUEST, f"not a regular file in the sandbox: {path}")
            extracted = archive.extractfile(member)
            assert extracted is not None
            return extracted.read()
    execution = await container.exec(["cat", "--", path], stdout=True, stderr=True)
    stdout, stderr = await collect_output(execution)
    if await exec_exit_code(execution) != 0:
        said = stderr.decode("utf-8", "replace").strip()
        if any(hint in stderr for hint in _MISSING):
            raise FileNotFoundError(f"no such file in the sandbox: {path}") from OSError(said)
        raise ProviderError(FailureKind.INVALID_REQUEST, f"reading {path} in the sandbox failed: {said}")
    return stdout


async def remove_snapshots(docker: aiodocker.Docker, labels: Sequence[str]) -> int:
    """Remove the snapshot images matching every label filter (`key=value` or `key`: a run's, an engine's); how
    many went. One still used by a container (being removed elsewhere) stays, for the next sweep."""
    filters = {"label": list(labels), "reference": [SNAPSHOT_REPOSITORY]}
    images = await docker.images.list(filters=filters)
    removed = 0
    for image in images:
        try:
            await docker.images.delete(str(image["Id"]), force=True)
            removed += 1
        except DockerError as exc:
            if exc.status == 404:
                continue
            if exc.status != 409:
                raise
    return removed


async def commit(container: DockerContainer, labels: Mapping[str, str]) -> str:
    """An image of the container's own layer (the container paused meanwhile); its `repository:tag`."""
    tag = f"{container.id[:12]}-{secrets.token_hex(4)}"
    await container.commit(
        repository=SNAPSHOT_REPOSITORY,
        tag=tag,
        message="stampede snapshot",
        config={"Labels": dict(labels)},
        pause=True,
    )
    return f"{SNAPSHOT_REPOSITORY}:{tag}"
