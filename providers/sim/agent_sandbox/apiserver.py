"""The local agent-sandbox's Kubernetes API for the agents groups' custom resources: create, get, list (label and
`metadata.name` field selectors), delete, and `?watch=true` (chunked newline-delimited events from a
resourceVersion, closed after `timeoutSeconds`)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from providers.sim.agent_sandbox.cluster import CLUSTER, Cluster
from providers.sim.agent_sandbox.shapes import (
    GROUPS,
    KINDS,
    VERSION,
    Watcher,
    error,
    field_name,
    label_selector,
    now_stamp,
    status_body,
)


def _where(request: web.Request) -> tuple[str, str, str]:
    group = request.match_info["group"]
    plural = request.match_info["plural"]
    if group not in GROUPS or plural not in KINDS:
        raise web.HTTPNotFound()
    return group, request.match_info["namespace"], plural


async def create_object(request: web.Request) -> web.Response:
    cluster = request.app[CLUSTER]
    _, namespace, plural = _where(request)
    try:
        body = await request.json()
        name = body["metadata"]["name"]
    except (ValueError, KeyError, TypeError):
        return web.json_response(
            status_body(400, "BadRequest", "the body must be an object with metadata.name"), status=400
        )
    if (plural, namespace, name) in cluster.objects:
        return error(request, 409, f'{plural} "{name}" already exists')
    meta = body["metadata"]
    meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now_stamp(), generation=1)
    body.setdefault("status", {})
    obj = cluster.put(plural, body, "ADDED")
    if plural == "sandboxclaims":
        cluster.claim_created(name)
    return web.json_response(obj, status=201)


def _stored(request: web.Request) -> tuple[str, dict[str, Any]] | web.Response:
    """The object the path names, with its plural; or the apiserver's 404 Status."""
    _, namespace, plural = _where(request)
    name = request.match_info["name"]
    obj = request.app[CLUSTER].objects.get((plural, namespace, name))
    if obj is None:
        return error(request, 404, f'{plural} "{name}" not found')
    return plural, obj


async def get_object(request: web.Request) -> web.Response:
    found = _stored(request)
    return found if isinstance(found, web.Response) else web.json_response(found[1])


async def delete_object(request: web.Request) -> web.Response:
    found = _stored(request)
    if isinstance(found, web.Response):
        return found
    plural, obj = found
    cluster = request.app[CLUSTER]
    cluster.put(plural, obj, "DELETED")
    if plural == "sandboxclaims":
        cluster.claim_deleted(obj)
    return web.json_response(obj)


async def list_objects(request: web.Request) -> web.StreamResponse:
    cluster = request.app[CLUSTER]
    group, namespace, plural = _where(request)
    query = request.query
    name = field_name(query.get("fieldSelector"))
    selector = label_selector(query.get("labelSelector"))
    current = [
        obj
        for (p, ns, n), obj in cluster.objects.items()
        if p == plural and ns == namespace and name in (None, n) and selector(obj)
    ]
    if (query.get("watch") or "").lower() not in ("true", "1"):
        return web.json_response(
            {
                "apiVersion": f"{group}/{VERSION}",
                "kind": KINDS[plural] + "List",
                "metadata": {"resourceVersion": str(cluster.resource_version())},
                "items": current,
            }
        )
    return await _watch(request, cluster, plural, namespace, name, selector, current)


async def _watch(
    request: web.Request,
    cluster: Cluster,
    plural: str,
    namespace: str,
    name: str | None,
    selector: Callable[[dict[str, Any]], bool],
    current: list[dict[str, Any]],
) -> web.StreamResponse:
    """A watch: the current objects newer than `resourceVersion` first (all of them from "0" or none), then every
    change, one JSON event a line, until `timeoutSeconds` or the client leaves."""
    try:
        since = int(request.query.get("resourceVersion") or 0)
        timeout = float(request.query.get("timeoutSeconds") or 1800)
    except ValueError:
        return web.json_response(
            status_body(400, "BadRequest", "resourceVersion and timeoutSeconds are numbers"), status=400
        )
    watcher = Watcher(plural, namespace, name, selector)
    cluster.watchers.append(watcher)
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        first = [obj for obj in current if since == 0 or int(obj["metadata"]["resourceVersion"]) > since]
        for obj in first:
            await response.write(
                json.dumps({"type": "ADDED" if since == 0 else "MODIFIED", "object": obj}).encode() + b"\n"
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0:
            try:
                event = await asyncio.wait_for(watcher.queue.get(), left)
            except TimeoutError:
                break
            if event is None:
                break
            await response.write(json.dumps(event).encode() + b"\n")
        await response.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        cluster.watchers.remove(watcher)
    return response
