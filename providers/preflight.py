"""The one way a preflight failure reads: refused credentials, no answer in time, unreachable, or what the vendor said.

Every adapter's `preflight` (ARCHITECTURE.md, "Contracts") makes one cheap call before any load runs; what can go
wrong there is the same for every vendor, so it is worded once here and the user meets one line of the same shape
whichever vendor they point at:

- the vendor refused the credentials: `auth`, "<where> refused <the credential> (<why>)";
- the call did not finish within the preflight budget: `transport`, "<where> did not answer within <n>s";
- anything else the vendor's client raised, classified by the adapter in the create phase: "<where> is
  unreachable: <error>" when that is `transport`, else "<where>: <error>".

An error the adapter already classified and worded (`ProviderError`) passes through unchanged. Imports only
`providers.base`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from providers.base import FailureKind, Phase, ProviderError


def _no_reason(exc: BaseException) -> str | None:
    return None


def _nothing_special(exc: BaseException) -> ProviderError | None:
    return None


@contextlib.asynccontextmanager
async def preflight_errors(
    where: str,
    classify: Callable[[BaseException, Phase | None], FailureKind],
    *,
    timeout_s: float | None = None,
    timeout_note: str = "",
    refused: Callable[[BaseException], str | None] = _no_reason,
    credential: str = "the API key",
    vendor_errors: tuple[type[BaseException], ...] = (Exception,),
    special: Callable[[BaseException], ProviderError | None] = _nothing_special,
    unusable: Callable[[BaseException], str] | None = None,
) -> AsyncIterator[None]:
    """Run the body within `timeout_s` (None: no budget of its own) and raise any failure as one `ProviderError`.

    `refused` gives the reason shown in brackets when an error means the credentials were refused (None when it
    does not); `vendor_errors` are the client's errors worth a line (others propagate, as bugs do); `special` lets
    an adapter word a failure only its vendor has (Prime's 402); `unusable`, when given, words every other error as
    "<where> is not usable: <unusable(exc)>" (Modal's preflight does three things, so "unreachable" would mislead).
    """
    budget = asyncio.timeout(timeout_s)
    try:
        async with budget:
            yield
    except ProviderError as exc:
        reason = refused(exc)
        if reason is None:
            raise
        raise ProviderError(FailureKind.AUTH, f"{where} refused {credential} ({reason})") from None
    except Exception as exc:
        if isinstance(exc, TimeoutError) and budget.expired():
            raise ProviderError(
                FailureKind.TRANSPORT, f"{where} did not answer within {timeout_s:g}s{timeout_note}"
            ) from None
        error = special(exc)
        if error is not None:
            raise error from None
        reason = refused(exc)
        if reason is not None:
            raise ProviderError(FailureKind.AUTH, f"{where} refused {credential} ({reason})") from None
        if not isinstance(exc, (*vendor_errors, TimeoutError)):  # a client's own timeout is the vendor's too
            raise
        kind = classify(exc, Phase.CREATE)
        if unusable is not None:
            raise ProviderError(kind, f"{where} is not usable: {unusable(exc)}") from None
        if kind is FailureKind.TRANSPORT:
            raise ProviderError(kind, f"{where} is unreachable: {exc}") from None
        raise ProviderError(kind, f"{where}: {exc}") from None
