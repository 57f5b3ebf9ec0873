"""JSON for the hot paths' messages (the engine's rows to Locust, the write-ahead's lines), made once.

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
from json import scanner as json_scanner
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


_JSON_WHITESPACE = " \t\n\r"
# the C scanner json.loads's own decoder uses (its memo cleared per call); typeshed types its argument as itself
_SCAN: Callable[[str, int], tuple[Any, int]] = json_scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def loads_line(line: bytes) -> Any:
    """`json.loads(line)` for a line of UTF-8 JSON, without its per-call detour through `detect_encoding` and
    `JSONDecoder.decode`'s regexes: the C scanner called on the text. A line that starts with whitespace (or is
    empty) goes through `json.loads` itself; what is not JSON raises its JSONDecodeError either way."""
    text = line.decode("utf-8", "surrogatepass")
    if not text or text[0] in _JSON_WHITESPACE:
        return json.loads(text)
    try:
        value, end = _SCAN(text, 0)
    except StopIteration as exc:
        raise json.JSONDecodeError("Expecting value", text, exc.value) from None
    if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
        raise json.JSONDecodeError("Extra data", text, end)
    return value
