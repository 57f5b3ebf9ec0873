"""The engine's hot-path JSON (rows to Locust, write-ahead lines): byte for byte what `JSONEncoder.encode` gives."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from harness.engine import submit_log
from harness.wire import protocol
from harness.wire.json_lines import loads_line, one_shot_encoder

ENCODERS = {
    "protocol": protocol._ENCODER,
    "submit log": submit_log._ENCODER,
    "unicode, sorted keys": json.JSONEncoder(ensure_ascii=False, sort_keys=True),
}


def random_value(rng: random.Random, depth: int = 0) -> object:
    kinds = ["int", "float", "str", "none", "bool"] + (["list", "dict"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.randint(-(2**40), 2**40)
    if kind == "float":
        return rng.choice([rng.random() * 10 ** rng.randint(-9, 12), -0.0, 1e-320, 1.7976931348623157e308])
    if kind == "str":
        return "".join(rng.choice('ab"\\\n\t\x01é€😀/ ') for _ in range(rng.randint(0, 12)))
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {f"k{i}{rng.choice('xé')}": random_value(rng, depth + 1) for i in range(rng.randint(0, 5))}


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_the_same_text_as_the_encoder_for_every_kind_of_value(name):
    encoder = ENCODERS[name]
    encode = one_shot_encoder(encoder)
    rng = random.Random(36)
    for _ in range(2000):
        value = random_value(rng)
        assert encode(value) == encoder.encode(value)
    assert encode('a "quoted" é') == encoder.encode('a "quoted" é')


def test_what_the_encoder_refuses_or_converts_it_refuses_or_converts_alike():
    with pytest.raises(ValueError):
        protocol.encode({"op": "result", "value": math.nan})  # allow_nan=False, as the encoder
    line = submit_log._ENCODE({"kind": "run", "out": Path("/tmp/x"), "nan": math.inf})
    assert line == submit_log._ENCODER.encode({"kind": "run", "out": Path("/tmp/x"), "nan": math.inf})
    assert protocol.encode({"op": "x"}) == b'{"op":"x"}\n'


def test_a_line_reads_as_json_loads_reads_it_and_what_it_refuses_it_refuses():
    rng = random.Random(37)
    for _ in range(2000):
        value = random_value(rng)
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False), protocol._ENCODE(value) + "\n"):
            line = text.encode("utf-8", "surrogatepass")
            assert loads_line(line) == json.loads(line)
    for good in (b'  {"op": 1}', b'{"op":1}  \r\n', b"7", b'"\\ud800"', b"\n[1]"):
        assert loads_line(good) == json.loads(good)
    for bad in (b"", b"  ", b"{", b'{"op":1} x', b'{"op":1}{"op":2}', b"nul", b"\xff{}", b"{'op': 1}", b"[1,]"):
        with pytest.raises(ValueError):
            json.loads(bad)
        with pytest.raises(ValueError):
            loads_line(bad)
    with pytest.raises(ValueError, match="an 'op'"):
        protocol.decode(b"[1]")
