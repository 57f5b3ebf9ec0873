"""The root filesystem of the `stampede:local` image, written as a tar for `docker import`.

Why not a Dockerfile: images cannot be pulled here (no registry), so there is no base image to build FROM. Like the
docker provider's busybox image (providers/vendors/docker/image.py), this one is assembled from what the machine
already has and imported into the daemon:

- the running Python (its binary, libpython and standard library, less the test suites and GUI kits), moved to
  /opt/python; CPython finds its prefix from the binary's place, and libpython is linked into the loader's default
  directory so the binary's absolute RUNPATH (a pyenv path) does not matter;
- every distribution stampede's own requirements pull in (their installed files, as their RECORD lists them), and
  stampede itself as a wheel built from the working tree's sources (`deploy/build-image` builds it);
- the shared libraries all of those link against, found with `ldd`, from the host's Debian packages (the tar's
  /etc/stampede-image lists which packages they came from, so the image can be traced to Debian's versions);
- Debian's static busybox as /bin/sh and the usual applets, for `kubectl exec` and a shell in a pod;
- a minimal /etc (passwd with root and uid 10001 `stampede`, group, nsswitch, os-release, CA certificates).

Every member has a fixed mtime and sorted order, so the same inputs give the same tar bytes.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import stat
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import BinaryIO

PYTHON_HOME = PurePosixPath("/opt/python")
LIB_DIR = PurePosixPath("/usr/lib/x86_64-linux-gnu")
_MTIME = 1_700_000_000
# Debian's merged /usr: these top-level directories are links into /usr, in the host and in the image alike
_MERGED = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
_STDLIB_SKIP = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "unittest/test"}
_LDD_LINE = re.compile(r"^\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)$")
_ETC = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nstampede:x:10001:10001:stampede:/stampede:/bin/sh\n",
    "etc/group": "root:x:0:\nstampede:x:10001:\n",
    "etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    "etc/os-release": 'NAME="stampede"\nID=stampede\nPRETTY_NAME="stampede on Debian libraries"\n',
}


class ImageError(Exception):
    """What stops the build; `main` prints it as one line."""


@dataclass
class Rootfs:
    """The members to write: target path to host source (a file) or to link target (a symlink)."""

    files: dict[PurePosixPath, Path] = field(default_factory=dict)
    links: dict[PurePosixPath, str] = field(default_factory=dict)
    texts: dict[PurePosixPath, bytes] = field(default_factory=dict)
    dirs: dict[PurePosixPath, int] = field(default_factory=dict)

    def add_tree(self, source: Path, target: PurePosixPath, skip: Iterable[str] = ()) -> None:
        skipped = set(skip)
        for path in sorted(source.rglob("*")):
            relative = path.relative_to(source).as_posix()
            if any(relative == s or relative.startswith(s + "/") for s in skipped):
                continue
            self.add_path(path, target / relative)

    def add_path(self, path: Path, target: PurePosixPath) -> None:
        if path.is_symlink():
            self.links[target] = os.readlink(path)
        elif path.is_file():
            self.files[target] = path


def canonical(path: PurePosixPath) -> PurePosixPath:
    """`path` with a merged top-level directory (/bin, /lib, ...) spelled as its /usr directory."""
    parts = path.parts
    if len(parts) > 2 and parts[0] == "/" and parts[1] in _MERGED:
        return PurePosixPath("/", _MERGED[parts[1]], *parts[2:])
    return path


def _distribution_closure(root: str) -> list[metadata.Distribution]:
    """The installed distributions `root` needs (its requirements without extras, recursively), `root` excluded."""
    from packaging.requirements import Requirement

    seen: dict[str, metadata.Distribution] = {}
    todo = [Requirement(r) for r in metadata.requires(root) or []]
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        key = re.sub(r"[-_.]+", "-", requirement.name).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError as exc:
            raise ImageError(f"{root} needs {requirement.name}, which is not installed") from exc
        seen[key] = dist
        todo.extend(Requirement(r) for r in dist.requires or [])
    return [seen[k] for k in sorted(seen)]


def _add_python(rootfs: Rootfs, prefix: Path) -> PurePosixPath:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    binary = prefix / "bin" / version
    if not binary.is_file():
        raise ImageError(f"no {binary}: the image copies the running Python, which must be a prefix install")
    rootfs.files[PYTHON_HOME / "bin" / version] = binary
    for alias in ("python3", "python"):
        rootfs.links[PYTHON_HOME / "bin" / alias] = version
    libpython = Path(sysconfig.get_config_var("LIBDIR") or prefix / "lib") / str(sysconfig.get_config_var("INSTSONAME"))
    if libpython.is_file():
        rootfs.files[PYTHON_HOME / "lib" / libpython.name] = libpython.resolve()
        rootfs.links[LIB_DIR / libpython.name] = str(PYTHON_HOME / "lib" / libpython.name)
    # _tkinter would bring Tcl/Tk and X11 (nine Debian packages) into an image that never opens a window
    tkinter = f"lib-dynload/_tkinter{sysconfig.get_config_var('EXT_SUFFIX')}"
    rootfs.add_tree(prefix / "lib" / version, PYTHON_HOME / "lib" / version, skip=_STDLIB_SKIP | {tkinter})
    return PYTHON_HOME / "lib" / version / "site-packages"


def _add_distributions(rootfs: Rootfs, site: PurePosixPath, dists: list[metadata.Distribution]) -> None:
    for dist in dists:
        base = Path(str(dist.locate_file("")))
        for entry in dist.files or []:
            source = Path(str(dist.locate_file(entry)))
            if ".." in entry.parts or entry.suffix == ".pyc" or not source.is_file():
                continue  # console scripts outside site-packages; byte code compiles again in the image
            rootfs.files[site / source.relative_to(base).as_posix()] = source


def _add_wheel(rootfs: Rootfs, site: PurePosixPath, wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if not info.is_dir():
                rootfs.texts[site / info.filename] = archive.read(info)


def _shared_libraries(rootfs: Rootfs) -> set[Path]:
    """The host libraries that the image's ELF files load (outside the image's own trees)."""
    elves = [p for t, p in rootfs.files.items() if t.suffix == ".so" or ".so." in t.name or t.parent.name == "bin"]
    found: set[Path] = set()
    for start in range(0, len(elves), 200):
        chunk = [str(p) for p in elves[start : start + 200]]
        done = subprocess.run(["ldd", *chunk], capture_output=True, text=True, check=False, timeout=120)
        for line in done.stdout.splitlines():
            match = _LDD_LINE.match(line)
            if match and not match.group(1).startswith(("/root/", "/opt/", "/home/", sys.prefix)):
                found.add(Path(match.group(1)))
    return found


def _add_libraries(rootfs: Rootfs, libraries: set[Path]) -> list[str]:
    """Each library at its path (and its real file behind a symlink); the Debian packages they belong to."""
    packages: set[str] = set()
    for path in sorted(libraries):
        real = path.resolve()
        target = canonical(PurePosixPath(str(path)))
        if target != PurePosixPath(str(real)):
            rootfs.links[target] = str(real)
        rootfs.files[PurePosixPath(str(real))] = real
        owner = subprocess.run(["dpkg", "-S", str(real)], capture_output=True, text=True, check=False, timeout=30)
        if owner.returncode != 0:  # usrmerge: dpkg may know the /lib spelling only
            alias = str(real).replace("/usr/lib/", "/lib/", 1)
            owner = subprocess.run(["dpkg", "-S", alias], capture_output=True, text=True, check=False, timeout=30)
        packages.update(p.split(":")[0] for p in owner.stdout.split(": ")[0].split(", ") if owner.returncode == 0)
    versions = []
    for package in sorted(packages):
        shown = subprocess.run(
            ["dpkg-query", "-W", "-f=${Package}=${Version}", package], capture_output=True, text=True, check=False
        )
        versions.append(shown.stdout.strip() or package)
    return versions


def _add_busybox(rootfs: Rootfs) -> None:
    busybox = Path("/bin/busybox")
    if not busybox.is_file():
        raise ImageError("/bin/busybox not found: the image's shell is Debian's busybox-static (apt-get install it)")
    home = PurePosixPath("/usr/bin/busybox")
    rootfs.files[home] = busybox
    listed = subprocess.run([str(busybox), "--list-full"], capture_output=True, text=True, check=False, timeout=30)
    for applet in listed.stdout.split():
        target = canonical(PurePosixPath("/") / applet)
        if target != home and target not in rootfs.files:
            rootfs.links[target] = str(home)


def build(prefix: Path, wheel: Path) -> tuple[Rootfs, list[str]]:
    """Everything the image holds, and the Debian packages its libraries came from."""
    rootfs = Rootfs()
    site = _add_python(rootfs, prefix)
    _add_distributions(rootfs, site, _distribution_closure("stampede"))
    _add_wheel(rootfs, site, wheel)
    packages = _add_libraries(rootfs, _shared_libraries(rootfs))
    _add_busybox(rootfs)
    script = f"#!{PYTHON_HOME}/bin/python3\nimport sys\nfrom harness.cli.main import main\nsys.exit(main())\n"
    rootfs.texts[PurePosixPath("/usr/local/bin/stampede")] = script.encode()
    for name, text in _ETC.items():
        rootfs.texts[PurePosixPath("/") / name] = text.encode()
    certificates = Path("/etc/ssl/certs/ca-certificates.crt")
    if certificates.is_file():
        rootfs.files[PurePosixPath(str(certificates))] = certificates
    listing = "".join(f"{p}\n" for p in packages)
    rootfs.texts[PurePosixPath("/etc/stampede-image")] = f"python {sys.version.split()[0]}\n{listing}".encode()
    rootfs.dirs.update({PurePosixPath("/tmp"): 0o1777, PurePosixPath("/results"): 0o777})
    rootfs.dirs[PurePosixPath("/stampede")] = 0o777
    return rootfs, packages


def _parents(paths: Iterable[PurePosixPath]) -> Iterator[PurePosixPath]:
    seen: set[PurePosixPath] = set()
    for path in paths:
        for parent in path.parents:
            if parent != PurePosixPath("/") and parent not in seen:
                seen.add(parent)
                yield parent


def write_tar(rootfs: Rootfs, out: BinaryIO) -> int:
    """The rootfs as an uncompressed tar stream; returns the bytes of file content written."""
    members = set(rootfs.files) | set(rootfs.links) | set(rootfs.texts)
    merged = {PurePosixPath("/", top) for top in _MERGED}
    if members & merged or any(canonical(m) != m for m in members):
        raise ImageError("a member is spelled under a merged directory (/bin, /lib, ...); spell it under /usr")
    written = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.GNU_FORMAT) as tar:

        def info(path: PurePosixPath, kind: bytes, mode: int) -> tarfile.TarInfo:
            entry = tarfile.TarInfo(str(path).lstrip("/"))
            entry.type, entry.mode, entry.mtime = kind, mode, _MTIME
            return entry

        dirs = set(_parents(members)) - set(rootfs.dirs)
        for path in sorted(dirs | set(rootfs.dirs)):
            tar.addfile(info(path, tarfile.DIRTYPE, rootfs.dirs.get(path, 0o755)))
        for top, into in sorted(_MERGED.items()):
            link = info(PurePosixPath("/", top), tarfile.SYMTYPE, 0o777)
            link.linkname = into
            tar.addfile(link)
        for path in sorted(members):
            if path in rootfs.links:
                entry = info(path, tarfile.SYMTYPE, 0o777)
                entry.linkname = rootfs.links[path]
                tar.addfile(entry)
            elif path in rootfs.texts:
                data = rootfs.texts[path]
                executable = path.parent.name == "bin"
                entry = info(path, tarfile.REGTYPE, 0o755 if executable else 0o644)
                entry.size = len(data)
                tar.addfile(entry, io.BytesIO(data))
                written += len(data)
            else:
                source = rootfs.files[path]
                mode = stat.S_IMODE(source.stat().st_mode) | 0o444
                entry = info(path, tarfile.REGTYPE, mode)
                entry.size = source.stat().st_size
                with source.open("rb") as handle:
                    tar.addfile(entry, handle)
                written += entry.size
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write the stampede image's rootfs as a tar on stdout")
    parser.add_argument("--wheel", required=True, type=Path, help="stampede's wheel, built from the working tree")
    parser.add_argument("--packages-out", type=Path, help="write the Debian packages the libraries came from here")
    args = parser.parse_args(argv)
    try:
        if not args.wheel.is_file():
            raise ImageError(f"no wheel at {args.wheel}")
        rootfs, packages = build(Path(sys.base_prefix), args.wheel)
        if args.packages_out:
            args.packages_out.write_text("".join(f"{p}\n" for p in packages))
        written = write_tar(rootfs, sys.stdout.buffer)
    except (ImageError, OSError, subprocess.SubprocessError) as exc:
        print(f"build-image: {exc}", file=sys.stderr)
        return 1
    files = len(rootfs.files) + len(rootfs.texts)
    print(f"rootfs: {files} files, {len(rootfs.links)} links, {written / 2**20:.0f} MiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
