"""The local Modal control plane: `modal.client.ModalClient` (the pinned SDK's `modal_proto`) over the simulator.

It implements what `modal==1.6.4` calls for a sandbox lifecycle on both backends (research providers.md
section 1.4), and answers UNIMPLEMENTED to every other RPC:

- session: `ClientHello`, `AuthTokenGet` (an HS256 JWT with `exp`, sent back by V2 calls);
- objects: `AppGetOrCreate`, `EnvironmentGetOrCreate` (a supported image builder version),
  `ImageGetOrCreate` (always already built, so no build ever runs), `ImageFromId`, `SecretGetOrCreate`
  (anonymous Secrets only: V1 sends a sandbox's `env` that way; V2 sends it inline);
- filesystem snapshots: `SandboxSnapshotFs` (the legacy path; SDK 1.6 asks the router's
  `TaskSnapshotFilesystem`): an Image id whose creates start with a copy of the snapshot's tree;
- V1: `SandboxCreate`, `SandboxGetTaskId` (the task id appears once the simulator has scheduled the
  sandbox; a sandbox that ended first gets its reason in `task_result`), `TaskGetCommandRouterAccess`,
  `SandboxWait`, `SandboxTerminate`, `SandboxList`, `SandboxTagsGet`;
- V2: `SandboxCreateV2` (returns the task id and command-router access at once), `SandboxGetTaskIdV2`,
  `SandboxGetCommandRouterAccess`, `SandboxWaitV2`, `SandboxTerminateV2`, `SandboxListV2`,
  `SandboxTagsGetV2`.

Every call must carry the workspace token pair (`x-modal-token-id`/`-secret`); V2 sandbox calls also the
`AuthTokenGet` JWT. Creates are refused with the gRPC errors in `modal_errors`. Time: a sandbox's lifetime
(`timeout_secs`) is vendor seconds, played at the simulator's time scale; waits a client asks for
(`SandboxWait.timeout`) and token expiry are real seconds, because the client acts on them.
"""

from __future__ import annotations

import hashlib
from typing import Any

from grpclib import GRPCError, Status
from modal_proto import api_grpc, api_pb2

from providers.sim.core.simulator import CreateRequest, Rejected
from providers.sim.modal.errors import generic_result, rejection_error
from providers.sim.modal.grpc_plumbing import with_unimplemented
from providers.sim.modal.registry import ModalRegistry, ModalSandbox, is_ended, is_scheduled_or_ended
from providers.sim.modal.tokens import AUTH_TOKEN_TTL_S, ROUTER_TOKEN_TTL_S, Credentials, JwtSigner, base62_id

IMAGE_BUILDER_VERSION = "2025.06"
DEFAULT_ENVIRONMENT = "main"
LIST_PAGE_SIZE = 100
DEFAULT_CPU = 0.125  # Modal's default sandbox request (cores)
DEFAULT_MEMORY_MB = 128
DEFAULT_TIMEOUT_S = 300


def _remaining(stream: Any, wanted: float | None) -> float | None:
    """`wanted` seconds, cut to what is left of the call's gRPC deadline (a little margin for the answer)."""
    deadline = getattr(stream, "deadline", None)
    if deadline is None:
        return wanted
    left = max(0.0, float(deadline.time_remaining()) - 0.05)
    return left if wanted is None else min(wanted, left)


class ModalControlPlane(with_unimplemented(api_grpc.ModalClientBase)):  # type: ignore[misc]
    """One Modal workspace whose sandboxes are the simulator's."""

    def __init__(self, registry: ModalRegistry, credentials: Credentials, signer: JwtSigner, router_url: str) -> None:
        self.registry = registry
        self.sim = registry.sim
        self.credentials = credentials
        self.signer = signer
        self.router_url = router_url
        self.time_scale = self.sim.clock.time_scale

    # --- auth -----------------------------------------------------------------------------------------

    def _check_token(self, stream: Any) -> None:
        metadata = stream.metadata
        if not self.credentials.accepts(metadata.get("x-modal-token-id"), metadata.get("x-modal-token-secret")):
            raise GRPCError(Status.UNAUTHENTICATED, "Invalid token: the token id and secret were not accepted")

    def _check_v2(self, stream: Any) -> None:
        self._check_token(stream)
        if self.signer.verify(stream.metadata.get("x-modal-auth-token")) is None:
            raise GRPCError(Status.UNAUTHENTICATED, "Missing or expired auth token (x-modal-auth-token)")

    def _sandbox(self, sandbox_id: str) -> ModalSandbox:
        record = self.registry.by_id.get(sandbox_id)
        if record is None:
            raise GRPCError(Status.NOT_FOUND, f"Sandbox {sandbox_id} not found")
        return record

    def _access(self, record: ModalSandbox) -> api_pb2.CommandRouterAccess:
        jwt = self.signer.mint({"task_id": record.task_id}, ROUTER_TOKEN_TTL_S)
        return api_pb2.CommandRouterAccess(url=self.router_url, jwt=jwt)

    # --- session and objects --------------------------------------------------------------------------

    async def ClientHello(self, stream: Any) -> None:
        await stream.recv_message()
        self._check_token(stream)
        await stream.send_message(api_pb2.ClientHelloResponse(image_builder_version=IMAGE_BUILDER_VERSION))

    async def AuthTokenGet(self, stream: Any) -> None:
        await stream.recv_message()
        self._check_token(stream)
        token = self.signer.mint({"sub": self.credentials.token_id, "typ": "auth"}, AUTH_TOKEN_TTL_S)
        await stream.send_message(api_pb2.AuthTokenGetResponse(token=token))

    async def AppGetOrCreate(self, stream: Any) -> None:
        request: api_pb2.AppGetOrCreateRequest = await stream.recv_message()
        self._check_token(stream)
        environment = request.environment_name or DEFAULT_ENVIRONMENT
        create = request.object_creation_type == api_pb2.OBJECT_CREATION_TYPE_CREATE_IF_MISSING
        app = self.registry.app(request.app_name, environment, create=create)
        if app is None:
            raise GRPCError(Status.NOT_FOUND, f"App '{request.app_name}' not found in environment '{environment}'")
        metadata = api_pb2.AppHandleMetadata(app_id=app.app_id, environment_name=environment)
        await stream.send_message(api_pb2.AppGetOrCreateResponse(app_id=app.app_id, handle_metadata=metadata))

    async def EnvironmentGetOrCreate(self, stream: Any) -> None:
        request: api_pb2.EnvironmentGetOrCreateRequest = await stream.recv_message()
        self._check_token(stream)
        name = request.deployment_name or DEFAULT_ENVIRONMENT
        settings = api_pb2.EnvironmentSettings(image_builder_version=IMAGE_BUILDER_VERSION)
        metadata = api_pb2.EnvironmentMetadata(name=name, settings=settings)
        environment_id = base62_id("en", f"{self.registry.seed}:{name}")
        await stream.send_message(
            api_pb2.EnvironmentGetOrCreateResponse(environment_id=environment_id, metadata=metadata)
        )

    async def ImageGetOrCreate(self, stream: Any) -> None:
        request: api_pb2.ImageGetOrCreateRequest = await stream.recv_message()
        self._check_token(stream)
        definition = request.image.SerializeToString(deterministic=True)
        digest = hashlib.blake2b(definition + request.builder_version.encode(), digest_size=16).hexdigest()
        image_id = base62_id("im", digest)
        self.registry.images.setdefault(image_id, _image_name(request.image, image_id))
        success = api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS)
        await stream.send_message(api_pb2.ImageGetOrCreateResponse(image_id=image_id, result=success))

    async def ImageFromId(self, stream: Any) -> None:
        request: api_pb2.ImageFromIdRequest = await stream.recv_message()
        self._check_token(stream)
        if request.image_id not in self.registry.images:
            raise GRPCError(Status.NOT_FOUND, f"Image {request.image_id or '(none)'} not found")
        await stream.send_message(api_pb2.ImageFromIdResponse(image_id=request.image_id))

    async def SandboxSnapshotFs(self, stream: Any) -> None:
        """The legacy snapshot (`MODAL_USE_LEGACY_FILESYSTEM_SNAPSHOT=1`); SDK 1.6 asks the command router."""
        request: api_pb2.SandboxSnapshotFsRequest = await stream.recv_message()
        self._check_token(stream)
        image_id = await self.registry.snapshot_image(self._sandbox(request.sandbox_id))
        success = api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS)
        await stream.send_message(api_pb2.SandboxSnapshotFsResponse(image_id=image_id, result=success))

    async def SecretGetOrCreate(self, stream: Any) -> None:
        request: api_pb2.SecretGetOrCreateRequest = await stream.recv_message()
        self._check_token(stream)
        inline = (api_pb2.OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP, api_pb2.OBJECT_CREATION_TYPE_EPHEMERAL)
        if request.object_creation_type not in inline:
            raise GRPCError(Status.NOT_FOUND, f"Secret '{request.deployment_name}' not found")
        secret_id = self.registry.secret(dict(request.env_dict))
        await stream.send_message(api_pb2.SecretGetOrCreateResponse(secret_id=secret_id))

    # --- create ---------------------------------------------------------------------------------------

    def _create(self, request: Any, stream: Any, version: int) -> ModalSandbox:
        if request.app_id not in self.registry.apps_by_id:
            raise GRPCError(Status.NOT_FOUND, f"App {request.app_id or '(none)'} not found")
        definition: api_pb2.Sandbox = request.definition
        image = self.registry.images.get(definition.image_id)
        if image is None:
            raise GRPCError(Status.NOT_FOUND, f"Image {definition.image_id or '(none)'} not found")
        if definition.HasField("pty_info") or len(definition.nfs_mounts) or definition.resources.gpu_config.count:
            if version == 2:
                raise GRPCError(Status.INVALID_ARGUMENT, "GPUs, network file systems and PTYs need a V1 sandbox")
        tags = {tag.tag_name: tag.tag_value for tag in request.tags}
        resources = definition.resources
        timeout_secs = int(definition.timeout_secs or DEFAULT_TIMEOUT_S)
        create = CreateRequest(
            image=image,
            labels=tuple(f"{key}={value}" for key, value in sorted(tags.items())),
            cpu=(resources.milli_cpu / 1000.0) if resources.milli_cpu else DEFAULT_CPU,
            memory_mb=int(resources.memory_mb or DEFAULT_MEMORY_MB),
            lifetime_s=float(timeout_secs),
            name=definition.name,
            idempotency_key=stream.metadata.get("x-idempotency-key"),
            env=self.registry.environment(definition.secret_ids, getattr(request, "secret_sources", ())),
            start_command=tuple(definition.entrypoint_args),
            meta={"modal_backend": f"v{version}", "app_id": request.app_id},
            from_snapshot=self.registry.snapshots.get(definition.image_id),
        )
        try:
            sb = self.sim.create(create)
        except Rejected as exc:
            raise rejection_error(exc, self.time_scale) from None
        return self.registry.add(
            sb,
            version=version,
            app_id=request.app_id,
            tags=tags,
            image_id=definition.image_id,
            has_readiness_probe=definition.HasField("readiness_probe"),
            workdir=definition.workdir or None,
            timeout_secs=timeout_secs,
            name=definition.name,
        )

    async def SandboxCreate(self, stream: Any) -> None:
        request: api_pb2.SandboxCreateRequest = await stream.recv_message()
        self._check_token(stream)
        record = self._create(request, stream, version=1)
        metadata = api_pb2.SandboxHandleMetadata(app_id=record.app_id)
        await stream.send_message(api_pb2.SandboxCreateResponse(sandbox_id=record.modal_id, metadata=metadata))

    async def SandboxCreateV2(self, stream: Any) -> None:
        request: api_pb2.SandboxCreateV2Request = await stream.recv_message()
        self._check_v2(stream)
        record = self._create(request, stream, version=2)
        await stream.send_message(
            api_pb2.SandboxCreateV2Response(
                sandbox_id=record.modal_id,
                task_id=record.task_id,
                command_router_access=self._access(record),
                sandbox_token=record.sandbox_token,
                metadata=api_pb2.SandboxHandleMetadata(app_id=record.app_id),
            )
        )

    # --- task id and router access --------------------------------------------------------------------

    async def SandboxGetTaskId(self, stream: Any) -> None:
        request: api_pb2.SandboxGetTaskIdRequest = await stream.recv_message()
        self._check_token(stream)
        record = self._sandbox(request.sandbox_id)
        if request.timeout > 0:
            await self.registry.wait_for(record, is_scheduled_or_ended, _remaining(stream, request.timeout))
        await stream.send_message(self._task_id_response(record, scheduled_only=True))

    async def SandboxGetTaskIdV2(self, stream: Any) -> None:
        request: api_pb2.SandboxGetTaskIdRequest = await stream.recv_message()
        self._check_v2(stream)
        record = self._sandbox(request.sandbox_id)
        await stream.send_message(self._task_id_response(record, scheduled_only=False))

    def _task_id_response(self, record: ModalSandbox, *, scheduled_only: bool) -> api_pb2.SandboxGetTaskIdResponse:
        result = generic_result(record.sim)
        response = api_pb2.SandboxGetTaskIdResponse()
        if record.scheduled or not scheduled_only:
            response.task_id = record.task_id
        if result is not None:
            response.task_result.CopyFrom(result)
        return response

    async def TaskGetCommandRouterAccess(self, stream: Any) -> None:
        request: api_pb2.TaskGetCommandRouterAccessRequest = await stream.recv_message()
        self._check_token(stream)
        record = self.registry.by_task.get(request.task_id)
        if record is None:
            raise GRPCError(Status.NOT_FOUND, f"Task {request.task_id} not found")
        access = self._access(record)
        await stream.send_message(api_pb2.TaskGetCommandRouterAccessResponse(url=access.url, jwt=access.jwt))

    async def SandboxGetCommandRouterAccess(self, stream: Any) -> None:
        request: api_pb2.SandboxGetCommandRouterAccessRequest = await stream.recv_message()
        self._check_v2(stream)
        if request.sandbox_id:
            record = self._sandbox(request.sandbox_id)
        else:
            found = self.registry.by_task.get(request.task_id)
            if found is None:
                raise GRPCError(Status.NOT_FOUND, f"Task {request.task_id} not found")
            record = found
        access = self._access(record)
        await stream.send_message(api_pb2.SandboxGetCommandRouterAccessResponse(url=access.url, jwt=access.jwt))

    # --- wait, terminate, list, tags ------------------------------------------------------------------

    async def _wait(self, stream: Any) -> None:
        request: api_pb2.SandboxWaitRequest = await stream.recv_message()
        record = self._sandbox(request.sandbox_id)
        if request.timeout > 0:
            await self.registry.wait_for(record, is_ended, _remaining(stream, request.timeout))
        response = api_pb2.SandboxWaitResponse(metadata=api_pb2.SandboxHandleMetadata(app_id=record.app_id))
        result = generic_result(record.sim)
        if result is not None:
            response.result.CopyFrom(result)
        await stream.send_message(response)

    async def SandboxWait(self, stream: Any) -> None:
        self._check_token(stream)
        await self._wait(stream)

    async def SandboxWaitV2(self, stream: Any) -> None:
        self._check_v2(stream)
        await self._wait(stream)

    async def _terminate(self, stream: Any) -> None:
        request: api_pb2.SandboxTerminateRequest = await stream.recv_message()
        record = self._sandbox(request.sandbox_id)
        existing = generic_result(record.sim)
        self.sim.terminate(record.sim.id)
        response = api_pb2.SandboxTerminateResponse()
        if existing is not None:
            response.existing_result.CopyFrom(existing)
        await stream.send_message(response)

    async def SandboxTerminate(self, stream: Any) -> None:
        self._check_token(stream)
        await self._terminate(stream)

    async def SandboxTerminateV2(self, stream: Any) -> None:
        self._check_v2(stream)
        await self._terminate(stream)

    async def _list(self, stream: Any, *, v1_only: bool) -> None:
        request: api_pb2.SandboxListRequest = await stream.recv_message()
        wanted = {tag.tag_name: tag.tag_value for tag in request.tags}
        before = request.before_timestamp
        found: list[ModalSandbox] = []
        for record in self.registry.by_id.values():
            if v1_only and record.version != 1:
                continue
            if request.app_id and record.app_id != request.app_id:
                continue
            if not request.include_finished and not record.sim.active:
                continue
            if before and record.created_wall >= before:
                continue
            if any(record.tags.get(key) != value for key, value in wanted.items()):
                continue
            found.append(record)
        found.sort(key=lambda r: r.created_wall, reverse=True)
        page = [_sandbox_info(record) for record in found[:LIST_PAGE_SIZE]]
        await stream.send_message(api_pb2.SandboxListResponse(sandboxes=page))

    async def SandboxList(self, stream: Any) -> None:
        self._check_token(stream)
        await self._list(stream, v1_only=True)

    async def SandboxListV2(self, stream: Any) -> None:
        self._check_v2(stream)
        await self._list(stream, v1_only=False)

    async def _tags(self, stream: Any) -> None:
        request: api_pb2.SandboxTagsGetRequest = await stream.recv_message()
        record = self._sandbox(request.sandbox_id)
        tags = [api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in record.tags.items()]
        await stream.send_message(api_pb2.SandboxTagsGetResponse(tags=tags))

    async def SandboxTagsGet(self, stream: Any) -> None:
        self._check_token(stream)
        await self._tags(stream)

    async def SandboxTagsGetV2(self, stream: Any) -> None:
        self._check_v2(stream)
        await self._tags(stream)


def _sandbox_info(record: ModalSandbox) -> api_pb2.SandboxInfo:
    result = generic_result(record.sim)
    task = api_pb2.TaskInfo(sandbox_id=record.modal_id)
    if record.scheduled or record.version == 2:
        task.id = record.task_id
    if result is not None:
        task.result.CopyFrom(result)
    return api_pb2.SandboxInfo(
        id=record.modal_id,
        created_at=record.created_wall,
        app_id=record.app_id,
        tags=[api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in record.tags.items()],
        name=record.name,
        image_id=record.image_id,
        timeout_secs=record.timeout_secs,
        task_info=task,
        metadata=api_pb2.SandboxHandleMetadata(app_id=record.app_id),
    )


def _image_name(image: api_pb2.Image, image_id: str) -> str:
    """What the simulator caches per node: the registry tag an image starts FROM, else its id."""
    for command in image.dockerfile_commands:
        words = command.split()
        if len(words) >= 2 and words[0].upper() == "FROM":
            return str(words[1])
    return image_id
