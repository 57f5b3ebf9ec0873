"""Baseline (a): a bare asyncio + aiohttp closed loop making the lifecycle's calls, N in flight.

    python bench/baselines/bare_loop.py --url URL --token T --concurrency 64 --seconds 20 --out result.json

Prints nothing; writes {"ends": [epoch seconds of each lifecycle's end], "errors": n} to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lifecycle_http import create_body, exec_body, gateway_url, look_delays


async def lifecycle(http: aiohttp.ClientSession, api: str, index: int) -> None:
    async with http.post(f"{api}/sandbox", json=create_body(index)) as response:
        created = await response.json()
        response.raise_for_status()
    sandbox_id = created["id"]
    for delay in look_delays():
        await asyncio.sleep(delay)
        async with http.post(f"{api}/sandbox/status:batchGet", json={"sandbox_ids": [sandbox_id]}) as response:
            statuses = (await response.json())["statuses"]
        if statuses and statuses[0]["status"] == "RUNNING":
            break
    auth = created["gatewayAuth"]
    headers = {"Authorization": f"Bearer {auth['token']}"}
    async with http.post(gateway_url(auth), json=exec_body(sandbox_id), headers=headers) as response:
        await response.json()
    async with http.delete(f"{api}/sandbox/{sandbox_id}") as response:
        await response.read()


async def main(args: argparse.Namespace) -> None:
    api = f"{args.url.rstrip('/')}/api/v1"
    connector = aiohttp.TCPConnector(limit=0)
    headers = {"Authorization": f"Bearer {args.token}"}
    ends: list[float] = []
    errors = 0
    deadline = time.monotonic() + args.seconds
    counter = iter(range(10**9))

    async def worker() -> None:
        nonlocal errors
        while time.monotonic() < deadline:
            try:
                await lifecycle(http, api, next(counter))
                ends.append(time.time())
            except Exception:
                errors += 1

    async with aiohttp.ClientSession(connector=connector, headers=headers) as http:
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    Path(args.out).write_text(json.dumps({"ends": ends, "errors": errors}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--out", required=True)
    asyncio.run(main(parser.parse_args()))
