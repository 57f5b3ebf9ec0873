"""What the stub vendor itself says it holds: its own sandbox list, read page by page over its REST API.

A fault test's last word on leaks and lost rows is the vendor's record, not the harness's.
"""

from __future__ import annotations

import json
import urllib.request


def vendor_sandboxes(url: str, token: str, run_id: str | None, *, active: bool) -> list[dict]:
    """A run's live sandboxes (`active`), or every one the vendor ever made for it (any run: `run_id` None)."""
    found: list[dict] = []
    labels = f"&labels=stampede-run%3D{run_id}" if run_id else ""
    for page in range(1, 500):
        request = urllib.request.Request(
            f"{url}/api/v1/sandbox?is_active={'true' if active else 'false'}&per_page=100&page={page}{labels}",
            headers={"Authorization": f"Bearer {token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.loads(response.read())
        found += body["sandboxes"]
        if not body["hasNext"]:
            break
    return found


def rollout_label(sandbox: dict) -> str | None:
    """The attempt a vendor's sandbox belongs to: its `stampede-rollout` label (a list of KEY=VALUE, or a dict)."""
    labels = sandbox.get("labels") or []
    if isinstance(labels, dict):
        return labels.get("stampede-rollout")
    return next((label.split("=", 1)[1] for label in labels if label.startswith("stampede-rollout=")), None)
