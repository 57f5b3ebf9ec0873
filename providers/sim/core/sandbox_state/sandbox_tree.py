"""Each simulated sandbox's own file tree, on the host, and the snapshots taken of it.

A sandbox that holds state is what RL tool calls need (files written by one call, read by the next; a fork
that copies them). The tree is a host folder that plays the sandbox's `/`: the writable part (`/home/user`,
`/tmp`, `/etc`, ...) is the folder's own; the system folders (`/usr`, `/bin`, `/lib`, ...) are the host's,
read-only, so `python3`, `ls` and a real shell exist inside without an image to build. The real shell
(`isolated_shell.py`) mounts the same layout, so what a vendor's files API writes, a command reads.

Trees are made on first use (a load test that never touches a file costs nothing) and removed when their
sandbox is forgotten; snapshots are copies kept until their owner (`SandboxTrees`) closes.

Path rules the vendors' files APIs share: a sandbox path is absolute or relative to the user's home; `..` never
leaves the sandbox's `/`; a symlink inside the tree is followed inside the tree (an absolute target names the
sandbox's `/`, not the host's).
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

HOST_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
"""Mounted read-only from the host: where they are symlinks on the host (merged /usr), they are in the tree too."""
MAX_SYMLINKS = 40  # as Linux's own limit for one lookup (ELOOP)


class SandboxPathError(OSError):
    """A sandbox path that cannot be used (ELOOP, a write under a read-only system folder)."""


@dataclass(frozen=True, slots=True)
class SandboxUser:
    """Who commands run as, and where they start: `user` in `/home/user` on E2B, `daytona` in `/home/daytona` on
    Daytona, `root` in `/root` elsewhere."""

    name: str = "user"
    uid: int = 1000
    home: str = "/home/user"

    @staticmethod
    def root() -> SandboxUser:
        return SandboxUser("root", 0, "/root")


class SandboxTree:
    """One sandbox's `/` on the host. `host_path` maps a sandbox path to the host file that plays it."""

    def __init__(self, root: Path, user: SandboxUser) -> None:
        self.root = root
        self.user = user

    def sandbox_path(self, path: str, *, cwd: str | None = None) -> str:
        """`path` made absolute (relative to `cwd`, by default the user's home) and normalised; `..` stops at `/`."""
        base = cwd or self.user.home
        joined = path if path.startswith("/") else posixpath.join(base, path)
        parts: list[str] = []
        for part in joined.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if parts:
                    parts.pop()
                continue
            parts.append(part)
        return "/" + "/".join(parts)

    def host_path(self, path: str, *, cwd: str | None = None, follow_last: bool = True) -> Path:
        """The host file behind a sandbox path, symlinks followed inside the tree (the last one only when
        `follow_last`: `remove` and `rename` act on a link, not its target). Raises SandboxPathError on a loop."""
        pending = [p for p in self.sandbox_path(path, cwd=cwd).split("/") if p]
        done: list[str] = []
        hops = 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                if done:
                    done.pop()
                continue
            candidate = self._host("/" + "/".join([*done, part]))
            is_last = not pending
            if (follow_last or not is_last) and candidate.is_symlink():
                hops += 1
                if hops > MAX_SYMLINKS:
                    raise SandboxPathError(40, "Too many levels of symbolic links", path)
                target = os.readlink(candidate)
                if target.startswith("/"):
                    done = []
                pending = [p for p in target.split("/") if p and p != "."] + pending
                continue
            done.append(part)
        return self._host("/" + "/".join(done))

    def writable(self, path: str, *, cwd: str | None = None) -> Path:
        """`host_path` for a write: a path under a system folder (the host's, mounted read-only) is refused."""
        absolute = self.sandbox_path(path, cwd=cwd)
        if _under_system_dir(absolute):
            raise SandboxPathError(30, "Read-only file system", absolute)
        return self.host_path(path, cwd=cwd, follow_last=False)

    def _host(self, absolute: str) -> Path:
        if _under_system_dir(absolute):
            return Path(absolute)  # the host's own, read-only in the sandbox
        return self.root / absolute.lstrip("/")


def _under_system_dir(absolute: str) -> bool:
    return any(absolute == d or absolute.startswith(d + "/") for d in HOST_SYSTEM_DIRS)


class SandboxTrees:
    """The trees of one simulator's sandboxes and their snapshots, under one temporary folder it removes."""

    def __init__(self, base: Path | None = None) -> None:
        owned = base is None
        self.base = Path(tempfile.mkdtemp(prefix="stampede-sandboxes-")) if base is None else base
        (self.base / "sandboxes").mkdir(parents=True, exist_ok=True)
        (self.base / "snapshots").mkdir(parents=True, exist_ok=True)
        self._trees: dict[str, SandboxTree] = {}
        # A folder of our own goes when we are dropped or the process exits, even if nobody called close:
        # a simulator a test or a script forgot to close left its trees in /tmp, ten a CI run.
        self._removal = weakref.finalize(self, shutil.rmtree, self.base, True) if owned else None

    def __contains__(self, sandbox_id: str) -> bool:
        return sandbox_id in self._trees

    def __len__(self) -> int:
        return len(self._trees)

    def get(self, sandbox_id: str, user: SandboxUser) -> SandboxTree:
        """The sandbox's tree, laid out on first use (home, tmp, etc with the user's passwd line)."""
        tree = self._trees.get(sandbox_id)
        if tree is None:
            root = self.base / "sandboxes" / _safe_name(sandbox_id)
            if not root.exists():
                _lay_out(root, user)
            tree = self._trees[sandbox_id] = SandboxTree(root, user)
        return tree

    def copy(self, source_id: str, new_id: str, user: SandboxUser) -> SandboxTree:
        """A fork: the new sandbox starts with a copy of the source's tree (or a fresh one if it had none)."""
        root = self.base / "sandboxes" / _safe_name(new_id)
        source = self._trees.get(source_id)
        if source is not None:
            shutil.copytree(source.root, root, symlinks=True)
        return self.get(new_id, user)

    def save(self, sandbox_id: str, snapshot_id: str, user: SandboxUser) -> Path:
        """Copy the sandbox's tree as a snapshot (kept until `close`, or `drop_snapshot`)."""
        target = self.base / "snapshots" / _safe_name(snapshot_id)
        shutil.copytree(self.get(sandbox_id, user).root, target, symlinks=True)
        return target

    def restore(self, snapshot_id: str, new_id: str, user: SandboxUser) -> SandboxTree:
        """A sandbox created from a snapshot starts with a copy of it."""
        source = self.base / "snapshots" / _safe_name(snapshot_id)
        root = self.base / "sandboxes" / _safe_name(new_id)
        if not source.is_dir():
            raise KeyError(snapshot_id)
        shutil.copytree(source, root, symlinks=True)
        return self.get(new_id, user)

    def has_snapshot(self, snapshot_id: str) -> bool:
        return (self.base / "snapshots" / _safe_name(snapshot_id)).is_dir()

    def drop_snapshot(self, snapshot_id: str) -> None:
        shutil.rmtree(self.base / "snapshots" / _safe_name(snapshot_id), ignore_errors=True)

    def remove(self, sandbox_id: str) -> None:
        """Forget a sandbox's tree (its files go with it; snapshots stay)."""
        tree = self._trees.pop(sandbox_id, None)
        root = tree.root if tree is not None else self.base / "sandboxes" / _safe_name(sandbox_id)
        shutil.rmtree(root, ignore_errors=True)

    def close(self) -> None:
        self._trees.clear()
        if self._removal is not None:
            self._removal()  # removes the folder, once
        else:
            shutil.rmtree(self.base / "sandboxes", ignore_errors=True)
            shutil.rmtree(self.base / "snapshots", ignore_errors=True)


def _safe_name(sandbox_id: str) -> str:
    """A folder name for an id the vendor made (ids are ours, but a name must never climb out of `base`)."""
    name = sandbox_id.replace("/", "_").replace("\x00", "_")
    return "_" + name if name in ("", ".", "..") else name


def _lay_out(root: Path, user: SandboxUser) -> None:
    """The writable part of a fresh sandbox: the folders a login expects, mount points for the system ones."""
    for folder in ("etc", "tmp", "root", "home", "var/tmp", "run", "proc", "dev", "opt", "mnt", "srv"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for system in HOST_SYSTEM_DIRS:
        host = Path(system)
        if host.is_symlink():
            (root / system.lstrip("/")).symlink_to(os.readlink(host))
        elif host.is_dir():
            (root / system.lstrip("/")).mkdir(exist_ok=True)
    os.chmod(root / "tmp", stat.S_IRWXU | stat.S_IRWXG | stat.S_IRWXO | stat.S_ISVTX)
    home = root / user.home.lstrip("/")
    home.mkdir(parents=True, exist_ok=True)
    passwd = "root:x:0:0:root:/root:/bin/sh\n"
    group = "root:x:0:\n"
    if user.uid != 0:
        passwd += f"{user.name}:x:{user.uid}:{user.uid}:{user.name}:{user.home}:/bin/bash\n"
        group += f"{user.name}:x:{user.uid}:\n"
    (root / "etc/passwd").write_text(passwd)
    (root / "etc/group").write_text(group)
    (root / "etc/hostname").write_text("sandbox\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
    for name in ("resolv.conf", "nsswitch.conf"):
        host_file = Path("/etc") / name
        if host_file.is_file():
            shutil.copyfile(host_file, root / "etc" / name)
