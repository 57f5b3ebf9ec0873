"""`providers.preflight`: every adapter's preflight failure is one line of the same shape (refused, no answer in
time, unreachable, or the vendor's own words), met here over real loopback sockets."""

from __future__ import annotations

import asyncio
import socket

import pytest

from providers.base import FailureKind, Phase, ProviderError, classify_common
from providers.preflight import preflight_errors


async def test_a_vendor_nobody_listens_for_is_unreachable() -> None:
    with socket.socket() as closed, pytest.raises(ProviderError) as info:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: refused, and no test beside this one can take it
        async with preflight_errors("http://127.0.0.1", classify_common, timeout_s=5):
            await asyncio.open_connection("127.0.0.1", closed.getsockname()[1])
    assert info.value.kind is FailureKind.TRANSPORT
    assert info.value.args[0].startswith("http://127.0.0.1 is unreachable: ")


async def test_a_vendor_that_accepts_and_never_answers_did_not_answer_within_the_budget() -> None:
    server = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ProviderError) as info:
            async with preflight_errors("the vendor", classify_common, timeout_s=0.2, timeout_note=" (listing)"):
                reader, _ = await asyncio.open_connection("127.0.0.1", port)
                await reader.read(1)
    finally:
        server.close()
    assert (info.value.kind, info.value.args[0]) == (
        FailureKind.TRANSPORT,
        "the vendor did not answer within 0.2s (listing)",
    )


class _Refused(Exception):
    pass


def _refusal(exc: BaseException) -> str | None:
    return "HTTP 401" if isinstance(exc, _Refused) else None


async def test_refused_credentials_name_the_credential_and_why() -> None:
    with pytest.raises(ProviderError) as info:
        async with preflight_errors("api", classify_common, refused=_refusal, credential="the token"):
            raise _Refused("401")
    assert (info.value.kind, info.value.args[0]) == (FailureKind.AUTH, "api refused the token (HTTP 401)")


async def test_other_vendor_errors_carry_the_adapters_classification_and_the_vendors_words() -> None:
    def classify(exc: BaseException, phase: Phase | None) -> FailureKind:
        assert phase is Phase.CREATE
        return FailureKind.QUOTA_EXHAUSTED

    with pytest.raises(ProviderError) as info:
        async with preflight_errors("api", classify, vendor_errors=(ValueError,)):
            raise ValueError("over the limit")
    assert (info.value.kind, info.value.args[0]) == (FailureKind.QUOTA_EXHAUSTED, "api: over the limit")


async def test_an_already_worded_error_and_a_bug_pass_through_unchanged() -> None:
    worded = ProviderError(FailureKind.RATE_LIMITED, "slow down")
    with pytest.raises(ProviderError) as info:
        async with preflight_errors("api", classify_common):
            raise worded
    assert info.value is worded
    with pytest.raises(KeyError):  # not a vendor error: our bug shows as itself
        async with preflight_errors("api", classify_common, vendor_errors=(OSError,)):
            raise KeyError("x")
