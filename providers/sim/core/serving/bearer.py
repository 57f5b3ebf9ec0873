"""Constant-time token checks that any header a client can send ends in yes or no, never an exception.

`hmac.compare_digest` refuses `str`s with non-ASCII characters (TypeError), and aiohttp hands a header's
bytes over as text (UTF-8, undecodable bytes kept as surrogates), so a fuzzer's `Authorization: Bearer é`
used to reach the front as a 500. Both sides are compared as bytes instead.
"""

from __future__ import annotations

import hmac


def tokens_equal(presented: str, expected: str) -> bool:
    """Whether two tokens are the same, in constant time for tokens of one length, for any characters."""
    try:
        left, right = presented.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate outside the escape range: no token we issue looks like that
        return False
    return hmac.compare_digest(left, right)


def bearer_matches(authorization: str | None, expected: str) -> bool:
    """Whether an `Authorization` header is `Bearer <expected>` (scheme case-insensitive, token trimmed)."""
    scheme, _, presented = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and tokens_equal(presented.strip(), expected)
