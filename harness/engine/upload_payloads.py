"""The bytes a plan's upload step sends: files cut from one block of random bytes, or one tar archive of them.

Kept apart from the rollout that sends them (harness.engine.script_rollout): making payloads is pure computation,
run off the loop for big trees, and shares nothing with the rollout's timing and failure rules.
"""

from __future__ import annotations

import io
import random
import tarfile

NOISE_BYTES = 1 << 24
"""The random block every file is a slice of."""
_noise: bytes | None = None


def _noise_block() -> bytes:
    """16 MiB of random bytes made once per engine: every upload's files are slices of it, so they do not compress
    (a vendor that compresses would otherwise move less than the plan says) and cost no random draws per byte."""
    global _noise
    if _noise is None:
        _noise = random.Random(0x5EED).randbytes(NOISE_BYTES)
    return _noise


def materialise(paths: list[str], sizes: list[int], offsets: list[int], archive: str | None) -> list[tuple[str, bytes]]:
    """The upload's calls: each file (path, bytes), or one tar archive of them all at `archive`."""
    noise = _noise_block()
    files = []
    for path, size, offset in zip(paths, sizes, offsets, strict=True):
        data = noise[offset : offset + size]
        while len(data) < size:  # past the block's end (or bigger than it): wrap around
            data += noise[: size - len(data)]
        files.append((path, data))
    return [(archive, _tar(files))] if archive is not None else files


def _tar(files: list[tuple[str, bytes]]) -> bytes:
    """The files as one uncompressed ustar archive, their paths relative (it unpacks where it is put). Headers are
    written directly (tarfile spends ~80 µs a file: a 3,000-file repository's quarter second per rollout)."""
    if any(len(path.lstrip("/").encode()) >= 100 for path, _ in files):  # a long name: tarfile's extensions
        return _tarfile(files)
    parts = []
    for path, data in files:
        header = bytearray(512)
        name = path.lstrip("/").encode()
        header[0 : len(name)] = name
        header[100:108] = b"0000644\x00"
        header[108:116] = header[116:124] = b"0000000\x00"
        header[124:136] = b"%011o\x00" % len(data)
        header[136:148] = b"00000000000\x00"
        header[148:156] = b" " * 8
        header[156:157] = b"0"
        header[257:265] = b"ustar\x0000"
        header[148:156] = b"%06o\x00 " % sum(header)
        parts += [bytes(header), data, bytes(-len(data) % 512)]
    parts.append(bytes(1024))
    return b"".join(parts)


def _tarfile(files: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path, data in files:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
