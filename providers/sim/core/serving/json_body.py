"""Reading a request's JSON object body, the one way every front reads it, refused in each vendor's own words.

An absent body is an empty object (the SDKs send none for calls without options); a body that is not JSON, or is
JSON but not an object, is refused through the front's own exception, worded as that vendor's server words it,
because the SDKs and the conformance tests read those words.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web


async def read_json_object(
    request: web.Request, refuse: Callable[[str], Exception], *, not_json: str, not_object: str
) -> dict[str, Any]:
    """The body as a dict (`{}` when there is none); `refuse(not_json)` or `refuse(not_object)` is raised."""
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except ValueError:
        raise refuse(not_json) from None
    if not isinstance(body, dict):
        raise refuse(not_object)
    return body
