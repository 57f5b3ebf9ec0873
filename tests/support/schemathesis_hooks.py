"""schemathesis hooks for fuzzing the Prime-like stub (tests/sim/fronts/test_fronts_fuzz.py names them in its config).

Two tokens: the stub's API token for `/api/v1`, and a gateway token per sandbox for `/gateway`, which no fixed
header can carry: for a gateway call this provider asks the stub's own `POST /api/v1/sandbox/{job_id}/auth`
for the token of the case's `job_id` (a sandbox the stateful phase created and reached through the create
response's links) and sends the API token when there is no such sandbox (the stub then answers the documented
401). STAMPEDE_FUZZ_URL and STAMPEDE_FUZZ_TOKEN say where the stub is and its API token.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import schemathesis


def _gateway_token(job_id: str, api_token: str) -> str | None:
    url = f"{os.environ['STAMPEDE_FUZZ_URL']}/api/v1/sandbox/{urllib.parse.quote(job_id, safe='')}/auth"
    request = urllib.request.Request(url, method="POST", headers={"Authorization": f"Bearer {api_token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            token: str = json.loads(resp.read())["token"]
            return token
    except (urllib.error.HTTPError, ValueError, KeyError):
        return None


@schemathesis.auth(refresh_interval=None)
class StubTokens:
    """The bearer token each case needs, fetched fresh for every gateway case (tokens are per sandbox)."""

    def get(self, case: Any, ctx: Any) -> str:
        api_token = os.environ["STAMPEDE_FUZZ_TOKEN"]
        job_id = (case.path_parameters or {}).get("job_id")
        if case.operation.path.startswith("/gateway/") and isinstance(job_id, str) and job_id:
            return _gateway_token(job_id, api_token) or api_token
        return api_token

    def set(self, case: Any, data: str, ctx: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}
