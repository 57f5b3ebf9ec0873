"""One JSON encoder made once for a hot path's messages (the engine's rows to Locust, the write-ahead's lines).

`JSONEncoder.encode` builds a new C encoder (`_json.make_encoder`) for every call before it encodes anything: about a
fifth of the time a row's message took. The C encoder is made once here, with the same options, and called
directly; its output is the same bytes `encoder.encode` gives for every message these paths send (dicts of strings,
numbers, booleans, None, lists and nested dicts, never self-referencing: there is no cycle check, which
`JSONEncoder` does only to raise a clearer error for a cycle). Where the C encoder is missing (an interpreter built
without `_json`), `encoder.encode` itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as json_encoder
from typing import Any


def one_shot_encoder(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """`encoder.encode` for a value with no cycles and an encoder without indent, its C encoder made once."""
    make = getattr(json_encoder, "c_make_encoder", None)  # json's own import of _json, None without it
    if make is None or encoder.indent is not None:
        return encoder.encode
    strings = json_encoder.encode_basestring_ascii if encoder.ensure_ascii else json_encoder.encode_basestring
    iterencode = make(
        None,  # no cycle check (markers)
        encoder.default,
        strings,
        encoder.indent,
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return strings(value)
        return "".join(iterencode(value, 0))

    return encode
