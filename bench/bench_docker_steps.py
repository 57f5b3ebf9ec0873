"""The docker provider's rollout steps on this machine's daemon (issue 30, "Docker does it for real").

Each step through the provider, as the engine calls it, repeated and printed as median [min..max]:
- cold vs warm start of a sized image (`stampede-size:<mb>`): create -> ready -> first `true`; cold = the image absent,
  pulled (a `docker load` of the offline registry's archive) inside readiness, its `pull_s` shown apart;
- a file tree of small files in: one tar (`upload_files`) vs one call per file (the contract's default), through the
  archive API (`/work`, a writable root) and a command's stdin (`/tmp`, the scratch tmpfs);
- download of one small and one 1 MB file;
- snapshot (`commit`) of a prepared sandbox, and fork of N copies from it vs N fresh creates from the base image
  (with and without re-uploading the tree, which is what a fork saves);
- streamed exec's time to first byte vs the plain exec's total.

    python bench/bench_docker_steps.py                      # 200 MB image, 1,000 files, fork 4, 3 repeats
    python bench/bench_docker_steps.py --size-mb 500 --repeat 5 --registry ~/.cache/stampede/images

Needs a daemon (scripts/ensure-docker). Every container and image it makes is removed at the end (the archive too,
unless --registry names a folder to keep). Cold starts cost a load of the whole image; on a vfs daemon every
container also copies its image's layers, so keep sizes modest there.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import aiodocker
from aiodocker.exceptions import DockerError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from providers import create_provider
from providers.base import Provider, SandboxRef, SandboxSpec
from providers.vendors.docker.image import ensure_sized_archive
from providers.vendors.docker.provider import DockerProvider
from providers.vendors.docker.registry import SizedImage


def _figure(samples: list[float]) -> str:
    if not samples:
        return "-"
    med = statistics.median(samples)
    return f"{med * 1000:8.1f} ms  [{min(samples) * 1000:.1f}..{max(samples) * 1000:.1f}]  n={len(samples)}"


def _row(label: str, samples: list[float]) -> None:
    print(f"  {label:<52} {_figure(samples)}", flush=True)


async def _timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


class Bench:
    def __init__(self, provider: DockerProvider, run_id: str) -> None:
        self.provider, self.run_id, self.count = provider, run_id, 0

    def spec(self, **fields: object) -> SandboxSpec:
        self.count += 1
        return SandboxSpec(run_id=self.run_id, rollout_id=f"b{self.count}", **fields)  # type: ignore[arg-type]

    async def start(self, spec: SandboxSpec) -> tuple[SandboxRef, float, float | None]:
        """create -> ready -> `true`: the TTI, and the pull inside it (None: warm)."""
        started = time.perf_counter()
        ref = await self.provider.create(spec)
        seen = await self.provider.wait_ready(ref, 600)
        await self.provider.exec(ref, ["true"], 60)
        return ref, time.perf_counter() - started, seen.pull_s if seen else None


async def main(args: argparse.Namespace) -> None:
    registry = Path(args.registry) if args.registry else Path(tempfile.mkdtemp(prefix="stampede-bench-images-"))
    name = f"bench-{uuid.uuid4().hex[:6]}"  # its own bytes: never a leftover image of another run
    provider = create_provider("docker", {"read_only": False, "image_registry": str(registry)})
    assert isinstance(provider, DockerProvider)
    await provider.preflight()
    facts = await provider._daemon_facts()
    run_id = f"bench-steps-{uuid.uuid4().hex[:8]}"
    bench = Bench(provider, run_id)
    image = SizedImage.of(args.size_mb, name)
    docker = provider._client()
    print(
        f"docker {facts.version}, storage {facts.storage}, runtime {facts.runtime}, {facts.ncpu} cpus; "
        f"image {image.tag}, {args.files} files, fork {args.fork}, repeat {args.repeat}",
        flush=True,
    )
    try:
        started = time.perf_counter()
        await asyncio.to_thread(ensure_sized_archive, image, registry)
        print(f"  archive of {args.size_mb} MB written into the registry in {time.perf_counter() - started:.2f} s")

        print("start (create -> ready -> first command)")
        cold, pulls, warm = [], [], []
        for _ in range(args.repeat):
            await provider.cleanup(run_id)
            await _remove(docker, image.tag)
            provider._images.ok.discard(image.tag)  # the adapter remembers what it saw present
            _, tti, pull = await bench.start(bench.spec(image=name, image_size_mb=args.size_mb))
            cold.append(tti)
            pulls.append(pull or 0.0)
            for _ in range(2):
                _, tti, pull = await bench.start(bench.spec(image=name, image_size_mb=args.size_mb))
                assert pull is None
                warm.append(tti)
        _row(f"cold start, {args.size_mb} MB image absent (TTI)", cold)
        _row("  of which the pull (docker load, ReadyObservation.pull_s)", pulls)
        _row(f"warm start, {args.size_mb} MB image present (TTI)", warm)
        await provider.cleanup(run_id)

        print(f"files ({args.files} files of {args.file_bytes} bytes)")
        ref, _, _ = await bench.start(bench.spec(image=name, image_size_mb=args.size_mb))
        for root, route in (("/work/repo", "archive API"), ("/tmp/repo", "tar -x on stdin")):
            tree = {f"{root}/pkg{i % 20}/mod{i}.py": b"x" * args.file_bytes for i in range(args.files)}
            sample = dict(list(tree.items())[: args.per_file_sample])
            one_tar = [await _timed(partial(provider.upload_files, ref, tree)) for _ in range(args.repeat)]
            per_file = await _timed(partial(Provider.upload_files, provider, ref, sample))
            _row(f"upload tree, one tar ({route})", one_tar)
            _row(
                f"upload tree, a call per file ({route}; {len(sample)} timed, scaled)",
                [per_file * len(tree) / len(sample)],
            )
        await provider.upload_file(ref, "/work/big.bin", b"\x01" * (1 << 20))
        small = [await _timed(lambda: provider.download_file(ref, "/work/repo/pkg1/mod1.py")) for _ in range(10)]
        big = [await _timed(lambda: provider.download_file(ref, "/work/big.bin")) for _ in range(args.repeat)]
        tmp = [await _timed(lambda: provider.download_file(ref, "/tmp/repo/pkg1/mod1.py")) for _ in range(10)]
        _row("download one small file (archive API)", small)
        _row("download one small file (/tmp, cat on stdout)", tmp)
        _row("download 1 MB (archive API)", big)

        print(f"snapshot and fork (the prepared sandbox: {args.files} files + 1 MB on a {args.size_mb} MB image)")
        snapshots: list[str] = []
        snapshot_s: list[float] = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            snapshots.append(await provider.snapshot(ref))
            snapshot_s.append(time.perf_counter() - started)
        _row("snapshot (commit)", snapshot_s)
        tree = {f"/work/repo/pkg{i % 20}/mod{i}.py": b"x" * args.file_bytes for i in range(args.files)}
        forked, fresh, fresh_prepared = [], [], []
        for round_ in range(args.repeat):
            group = bench.spec()

            async def fork(snapshot: str = snapshots[round_], spec: SandboxSpec = group) -> None:
                refs = await provider.fork(snapshot, spec, args.fork)
                await asyncio.gather(*(provider.wait_ready(r, 120) for r in refs))
                await asyncio.gather(*(provider.exec(r, ["true"], 60) for r in refs))

            async def creates(prepare: bool) -> None:
                async def one() -> None:
                    made, _, _ = await bench.start(bench.spec(image=name, image_size_mb=args.size_mb))
                    if prepare:
                        await provider.upload_files(made, tree)

                await asyncio.gather(*(one() for _ in range(args.fork)))

            forked.append(await _timed(fork))
            fresh.append(await _timed(lambda: creates(False)))
            fresh_prepared.append(await _timed(lambda: creates(True)))
        _row(f"fork {args.fork} from the snapshot (all ready + `true`)", forked)
        _row(f"{args.fork} fresh creates of the base image (ready + `true`)", fresh)
        _row(f"{args.fork} fresh creates + the tree uploaded again", fresh_prepared)

        print("commands")
        plain = [await _timed(lambda: provider.exec(ref, ["echo", "hi"], 30)) for _ in range(args.calls)]
        streamed = [await provider.exec_stream(ref, ["echo", "hi"], 30) for _ in range(args.calls)]
        _row("exec `echo hi`, total", plain)
        _row("exec_stream `echo hi`, first byte", [s.first_byte_s or 0.0 for s in streamed])
        slow = [
            await provider.exec_stream(ref, ["sh", "-c", "echo start; sleep 1; echo end"], 30)
            for _ in range(args.repeat)
        ]
        _row("exec_stream `echo start; sleep 1; echo end`, first byte", [s.first_byte_s or 0.0 for s in slow])
        _row("  ... last byte", [s.last_byte_s or 0.0 for s in slow])
        slow_plain = [
            await _timed(lambda: provider.exec(ref, ["sh", "-c", "echo start; sleep 1; echo end"], 30))
            for _ in range(args.repeat)
        ]
        _row("exec of the same, total (what a non-streaming call waits)", slow_plain)
        handle_s = [await _timed(lambda: provider.start_process(ref, ["sleep", "0"])) for _ in range(args.repeat)]
        _row("start_process (detached exec)", handle_s)
    finally:
        await provider.cleanup(run_id)
        await _remove(docker, image.tag)
        await provider.aclose()
        if not args.registry:
            for path in registry.iterdir():
                path.unlink()
            registry.rmdir()


async def _remove(docker: aiodocker.Docker, tag: str) -> None:
    try:
        await docker.images.delete(tag, force=True)
    except DockerError as exc:
        if exc.status != 404:
            raise


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200, help="the sized image's MB")
    parser.add_argument("--files", type=int, default=1000, help="files in the uploaded tree")
    parser.add_argument("--file-bytes", type=int, default=512, help="bytes per file")
    parser.add_argument("--fork", type=int, default=4, help="copies per fork (and fresh creates beside it)")
    parser.add_argument("--repeat", type=int, default=3, help="repeats of each step")
    parser.add_argument("--per-file-sample", type=int, default=100, help="files timed one call each (then scaled)")
    parser.add_argument("--calls", type=int, default=20, help="commands for the per-call figures")
    parser.add_argument("--registry", default="", help="keep the archive in this folder (default: a temp one)")
    asyncio.run(main(parser.parse_args()))
