"""Hypothesis strategies that build protobuf messages from their descriptors, for fuzzing the simulated fronts.

`messages(descriptor)` walks `Descriptor.fields` and draws a value per field type: every scalar width at its
edges, strings and bytes (string fields aimed at `known` values by name, so a call can reach past "not found"), nested messages
down to `MAX_DEPTH`, repeated fields and maps, oneofs (one member set), enums including numbers the enum does
not name. `json_objects(descriptor)` draws what a careless or hostile client puts in a Connect JSON body: the
message's own JSON field names with values of any JSON type, nested (numeric fields often at the extremes). `envelopes()` draws Connect streaming
bodies with broken framing: truncated prefixes, lengths that lie, oversized lengths, unknown flags, garbage.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

MAX_DEPTH = 3
MAX_REPEATED = 3
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_UINT32 = (0, 2**32 - 1)
_UINT64 = (0, 2**64 - 1)
_INTS = {
    FieldDescriptor.TYPE_INT32: _INT32,
    FieldDescriptor.TYPE_SINT32: _INT32,
    FieldDescriptor.TYPE_SFIXED32: _INT32,
    FieldDescriptor.TYPE_INT64: _INT64,
    FieldDescriptor.TYPE_SINT64: _INT64,
    FieldDescriptor.TYPE_SFIXED64: _INT64,
    FieldDescriptor.TYPE_UINT32: _UINT32,
    FieldDescriptor.TYPE_FIXED32: _UINT32,
    FieldDescriptor.TYPE_UINT64: _UINT64,
    FieldDescriptor.TYPE_FIXED64: _UINT64,
}


def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    edges = sorted(n for n in {low, high, 0, 1, -1, 2**31 - 1, 2**32 - 1} if low <= n <= high)
    return st.one_of(st.sampled_from(edges), st.integers(low, high), st.integers(0, 1000))


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def _is_repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


Known = Mapping[str, Sequence[str]]
"""Strings worth sending per field name (e.g. `{"sandbox_id": [an id that exists]}`): most draws of that field
take one, so a call gets past "not found" into the handler's later checks."""


def _text(field: FieldDescriptor, known: Known) -> st.SearchStrategy[str]:
    plain = st.text(max_size=24)
    aimed = known.get(field.name)
    return st.integers(0, 3).flatmap(lambda n: plain if n == 3 else st.sampled_from(list(aimed))) if aimed else plain


def scalar(field: FieldDescriptor, known: Known) -> st.SearchStrategy[Any]:
    """A value for one non-message field (an enum: a named number or any int32)."""
    kind = field.type
    if kind in _INTS:
        return _integers(*_INTS[kind])
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return st.floats(allow_nan=True, allow_infinity=True)
    if kind == FieldDescriptor.TYPE_FLOAT:
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_STRING:
        return _text(field, known)
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=48)
    if kind == FieldDescriptor.TYPE_ENUM:
        named = [value.number for value in field.enum_type.values]
        return st.one_of(st.sampled_from(named), _integers(*_INT32)) if named else _integers(*_INT32)
    raise AssertionError(f"unhandled field type {kind} of {field.full_name}")


def _value(field: FieldDescriptor, depth: int, known: Known) -> st.SearchStrategy[Any]:
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return messages(field.message_type, depth + 1, known)
    return scalar(field, known)


def _field_values(field: FieldDescriptor, depth: int, known: Known) -> st.SearchStrategy[Any]:
    if _is_map(field):
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return st.dictionaries(scalar(key, known), _value(value, depth, known), max_size=MAX_REPEATED)
    if _is_repeated(field):
        return st.lists(_value(field, depth, known), max_size=MAX_REPEATED)
    return _value(field, depth, known)


def _assign(message: Message, field: FieldDescriptor, value: Any) -> None:
    name = field.name
    if _is_map(field):
        target = getattr(message, name)
        message_valued = field.message_type.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE
        for key, item in value.items():
            if message_valued:
                target[key].CopyFrom(item)
            else:
                target[key] = item
    elif _is_repeated(field):
        getattr(message, name).extend(value)
    elif field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        getattr(message, name).CopyFrom(value)
    else:
        setattr(message, name, value)


@st.composite
def _message(draw: st.DrawFn, descriptor: Descriptor, depth: int, known: Known) -> Message:
    message = GetMessageClass(descriptor)()
    if depth >= MAX_DEPTH:
        return message
    in_oneof = {field.name for oneof in descriptor.oneofs for field in oneof.fields}
    plain = [field for field in descriptor.fields if field.name not in in_oneof]
    chosen = draw(st.lists(st.sampled_from(plain), unique=True, max_size=len(plain))) if plain else []
    for oneof in descriptor.oneofs:  # one member of each oneof, or none
        member = draw(st.none() | st.sampled_from(list(oneof.fields)))
        if member is not None:
            chosen.append(member)
    for field in chosen:
        value = draw(_field_values(field, depth, known))
        try:
            _assign(message, field, value)
        except ValueError:  # a closed (proto2) enum refuses numbers it does not name
            continue
    return message


def messages(descriptor: Descriptor, depth: int = 0, known: Known | None = None) -> st.SearchStrategy[Message]:
    """Messages of `descriptor`'s type with a random subset of fields set; `known` aims string fields by name."""
    return _message(descriptor, depth, dict(known or {}))


def not_a_message() -> st.SearchStrategy[bytes]:
    """Bytes a protobuf parser should refuse or misread: random, and field keys whose length runs past the end."""
    lying = st.builds(
        lambda tag, n, tail: bytes([tag << 3 | 2]) + _varint(n) + tail,
        st.integers(1, 15),
        st.integers(64, 2**32),
        st.binary(max_size=8),
    )
    wrong_wire = st.builds(
        lambda tag, kind: bytes([tag << 3 | kind]), st.integers(1, 15), st.sampled_from([3, 4, 6, 7])
    )
    return st.one_of(st.binary(min_size=1, max_size=64), lying, wrong_wire, st.just(b"\xff" * 11))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


JSON_SCALARS: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**18, max_value=10**400),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e308, -1e308, 1e400]),  # 1e400 is written as 1e+400, read back as inf
    st.text(max_size=16),
)
EXTREME_NUMBERS: st.SearchStrategy[Any] = st.sampled_from(
    [1e400, -1e400, 2**64, -(2**63) - 1, 2**32, -1, 0.5, 1e308]  # json.dumps writes 1e400 as Infinity
)
"""Numbers a numeric field's reader must refuse or bound: past any int or float width, negative, fractional."""
JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def _json_object(draw: st.DrawFn, descriptor: Descriptor, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in draw(st.lists(st.sampled_from(list(descriptor.fields)), unique=True)) if descriptor.fields else []:
        nested = field.type == FieldDescriptor.TYPE_MESSAGE and depth < MAX_DEPTH and not _is_map(field)
        if nested and draw(st.booleans()):
            inner = _json_object(field.message_type, depth + 1)
            out[field.json_name] = draw(st.lists(inner, max_size=2) if _is_repeated(field) else inner)
        elif field.type in _INTS or field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            out[field.json_name] = draw(st.one_of(EXTREME_NUMBERS, JSON_VALUES))
        else:
            out[field.json_name] = draw(JSON_VALUES)
    return out


def json_objects(descriptor: Descriptor) -> st.SearchStrategy[dict[str, Any]]:
    """A JSON body with `descriptor`'s JSON field names and values of any JSON type (often the wrong one)."""
    return _json_object(descriptor, 0)


_PREFIX = struct.Struct(">BI")


def envelope(payload: bytes, flags: int = 0) -> bytes:
    return _PREFIX.pack(flags, len(payload)) + payload


def broken_envelopes() -> st.SearchStrategy[bytes]:
    """Connect streaming bodies whose framing is wrong: what a server must refuse with a Connect error."""
    payload = st.binary(max_size=32)
    return st.one_of(
        st.binary(max_size=4),  # shorter than one prefix (or empty: no message at all)
        st.builds(lambda p, cut: envelope(p)[: 5 + cut], st.binary(min_size=2, max_size=32), st.integers(0, 1)),
        st.builds(
            lambda flags, n, p: _PREFIX.pack(flags, n) + p, st.integers(0, 255), st.integers(2**22, 2**32 - 1), payload
        ),  # a length over the 4 MiB limit, or far past the body
        st.builds(lambda p, q: envelope(p) + envelope(q), payload, payload),  # two messages to a unary-request stream
        st.builds(lambda p: envelope(p, flags=0b10), payload),  # the request sent as an end-of-stream envelope
        st.builds(lambda p: envelope(p, flags=0b01), payload),  # "compressed" without saying how
        st.builds(lambda flags, p: envelope(p, flags=flags), st.integers(4, 255), payload),  # unknown flag bits
    )
