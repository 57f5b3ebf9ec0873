"""`stampede cleanup`: terminate the sandboxes a run left behind, found by the labels every sandbox carries.

A crashed or killed run leaves its sandboxes running (and billed); they carry the run's label, so they can be
found and reaped later from any machine with the vendor's credentials.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from foundation.cli_help import set_env_var
from harness.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--provider", default="stub", help="the vendor the sandboxes are on")
    parser.add_argument("--base-url", default=None, help="its API endpoint (default: the vendor's own)")
    set_env_var(parser.add_argument("--token", default=None, help="the vendor's API token"), "STAMPEDE_TOKEN")
    parser.add_argument("--provider-option", action="append", default=None, help="KEY=VALUE (repeatable)")
    set_env_var(
        parser.add_argument(
            "--out",
            default=None,
            help="the results folder holding the run (default: results): a crashed run's folder (OUT/RUN_ID) gets its unfinished "
            "attempts written into its tables",
        ),
        "STAMPEDE_OUT",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--run-id", help="the run whose sandboxes to reap")
    which.add_argument(
        "--all-owned",
        action="store_true",
        help="every live sandbox stampede ever tagged on this vendor, whatever the run (crashed runs' leftovers)",
    )


def run(args: argparse.Namespace) -> int:
    from harness.locust.setting_values import parse_key_values
    from harness.wire.redact import redact, secret_values
    from providers import create_provider
    from providers.base import ProviderConfigError, ProviderError

    if args.run_id:
        repair_run_folder(Path(args.out or os.environ.get("STAMPEDE_OUT") or "results"), args.run_id)
    options: dict[str, object] = dict(parse_key_values(args.provider_option, "provider-option"))
    if args.base_url:
        options["base_url"] = args.base_url
    token = args.token or os.environ.get("STAMPEDE_TOKEN")
    if token:
        options["token"] = token

    async def reap() -> int:
        provider = create_provider(args.provider, options)
        try:
            await provider.preflight()
            if args.all_owned:
                return await provider.cleanup_all_owned()
            return await provider.cleanup(args.run_id)
        finally:
            await provider.aclose()

    try:
        count = asyncio.run(reap())
    except (ProviderConfigError, ProviderError) as exc:
        # a vendor's error text may quote the credentials it was sent (main redacts every printed error again)
        raise UsageError(redact(str(exc), secret_values(options))) from None
    if args.all_owned:
        print(f"reaped {count} sandboxes stampede had tagged on {args.provider} (every run)")
    else:
        print(f"reaped {count} sandboxes of run {args.run_id}")
    return 0


def repair_run_folder(out: Path, run_id: str) -> None:
    """Reading a crashed run's folder repairs it (`harness.results.read.run_repair`); anything else is left as it is."""
    from harness.results.read.dataset import is_run_folder, read_run_info

    folder = out / run_id
    if "/" in run_id or run_id in (".", "..") or not is_run_folder(folder):
        return
    try:
        read_run_info(folder)
    except UsageError:
        pass  # a damaged run.json is summary's to report; the sandboxes are still reaped
