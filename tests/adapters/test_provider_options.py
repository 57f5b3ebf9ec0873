"""`providers.options`: one typed parser for every adapter's `--provider-option KEY=VALUE` strings."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import pytest

from providers import create_provider
from providers.base import ProviderConfigError
from providers.options import (
    Option,
    choice,
    declare,
    declared_options,
    declared_values,
    flag,
    integer,
    like,
    number,
    parse_options,
    text,
    words,
)

DECLARED: dict[str, Option] = {
    "name": text("x"),
    "on": flag(False),
    "count": integer(3, minimum=1),
    "wait": number(1.5, positive=True),
    "mode": choice("a", "a", "b"),
    "caps": words(("X",)),
}


def test_defaults_for_absent_keys_and_typed_values_for_given_ones() -> None:
    assert parse_options("p", {}, DECLARED) == {
        "name": "x",
        "on": False,
        "count": 3,
        "wait": 1.5,
        "mode": "a",
        "caps": ("X",),
    }
    given = {"name": "y", "on": "yes", "count": "7", "wait": "0.25", "mode": "B", "caps": "A, B C"}
    assert parse_options("p", given, DECLARED) == {
        "name": "y",
        "on": True,
        "count": 7,
        "wait": 0.25,
        "mode": "b",
        "caps": ("A", "B", "C"),
    }
    # JSON values (the engine's config) as well as strings; None and "" are the default
    assert parse_options("p", {"on": True, "count": 2, "wait": 3, "caps": ["Y"], "name": ""}, DECLARED) == {
        "name": "x",
        "on": True,
        "count": 2,
        "wait": 3.0,
        "mode": "a",
        "caps": ("Y",),
    }
    assert parse_options("p", {"count": None}, DECLARED)["count"] == 3


def test_an_unknown_key_is_one_line_naming_it_and_the_known_ones() -> None:
    with pytest.raises(ProviderConfigError) as info:
        parse_options("p", {"coutn": "2"}, DECLARED)
    assert str(info.value) == "p provider: unknown option(s) coutn (known: caps, count, mode, name, on, wait)"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"on": "maybe"}, "p provider: on must be 1 or 0 (got 'maybe')"),
        ({"count": "lots"}, "p provider: count must be a whole number >= 1 (got 'lots')"),
        ({"count": "0"}, "p provider: count must be a whole number >= 1 (got '0')"),
        ({"count": "1.5"}, "p provider: count must be a whole number >= 1 (got '1.5')"),
        ({"wait": "0"}, "p provider: wait must be a positive number (got '0')"),
        ({"wait": "inf"}, "p provider: wait must be a positive number (got 'inf')"),
        ({"mode": "c"}, "p provider: mode must be a or b (got 'c')"),
        ({"caps": 3}, "p provider: caps must be a list of words (got 3)"),
        ({"name": ["a"]}, "p provider: name must be a string (got ['a'])"),
    ],
)
def test_a_bad_value_is_one_line_saying_what_is_expected(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ProviderConfigError) as info:
        parse_options("p", options, DECLARED)
    assert str(info.value) == message


def test_like_types_an_option_by_its_default() -> None:
    declared = {"b": like(True), "i": like(4), "f": like(2.0), "t": like(("a",)), "s": like("z")}
    given = {"b": "off", "i": "5", "f": "2.5", "t": "c,d", "s": "w"}
    assert parse_options("p", given, declared) == {"b": False, "i": 5, "f": 2.5, "t": ("c", "d"), "s": "w"}


@pytest.mark.parametrize(
    ("provider", "options"),
    [
        ("stub", {"base_url": "http://127.0.0.1:1", "token": "t"}),
        ("prime", {"base_url": "http://127.0.0.1:1", "token": "t"}),
        ("modal", {"base_url": "http://127.0.0.1:1", "token": "t", "token_id": "ak-x"}),  # what --local passes
        ("docker", {"token": "t"}),  # the harness passes the run's token to every provider
    ],
)
def test_every_adapter_accepts_what_the_harness_passes_and_refuses_a_typo(
    provider: str, options: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("MODAL_SANDBOX_V2", "MODAL_MAX_THROTTLE_WAIT"):  # the modal provider sets these for its process
        monkeypatch.setenv(name, "")
    created = create_provider(provider, options)
    assert created.name == provider
    with pytest.raises(ProviderConfigError) as info:
        create_provider(provider, {**options, "poll_intervall_s": "1"})
    assert str(info.value).startswith(f"{provider} provider: unknown option(s) poll_intervall_s (known: ")
    assert "\n" not in str(info.value)


def test_docker_refuses_a_base_url_it_could_not_use() -> None:
    with pytest.raises(ProviderConfigError, match=r"docker provider: unknown option\(s\) base_url"):
        create_provider("docker", {"base_url": "http://127.0.0.1:1"})


def test_a_users_own_provider_without_options_is_built_by_the_contracts_default(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`from_options` is part of `Provider`: a vendor that declares no options is built with no arguments."""
    (tmp_path / "my_vendor.py").write_text(
        "from providers.base import Provider\n"
        "class Mine(Provider):\n"
        "    name = 'mine'\n"
        "    create = wait_ready = exec = terminate = list_owned = None\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert create_provider("my_vendor:Mine", {}).name == "mine"


def _record_with_wait(default: float) -> type:
    @dataclasses.dataclass(frozen=True)
    class Record:
        name: str
        wait_s: float = declare(default, number, key="wait", positive=True)
        mode: str = declare("a", choice, "a", "b")

    return Record


@pytest.mark.parametrize("default", [1.5, 7.0])
def test_a_default_written_on_the_field_is_the_options_default_everywhere(default: float) -> None:
    record = _record_with_wait(default)
    declared = declared_options(record)
    assert set(declared) == {"wait", "mode"}  # the option's own key where it differs from the field's
    assert declared["wait"].default == default
    parsed = record(name="x", **declared_values(record, parse_options("p", {}, declared)))
    assert parsed == record(name="x")
    assert parsed.wait_s == default
    assert record(name="x", **declared_values(record, parse_options("p", {"wait": "3"}, declared))).wait_s == 3.0
    with pytest.raises(ProviderConfigError, match=r"^p provider: wait must be a positive number \(got '0'\)$"):
        parse_options("p", {"wait": "0"}, declared)


ADAPTER_OPTIONS = [
    (
        "providers.vendors.stub.provider",
        "StubOptions",
        "STUB_OPTIONS",
        {"base_url": "http://127.0.0.1:1", "token": "t"},
    ),
    (
        "providers.vendors.prime.options",
        "PrimeOptions",
        "PRIME_OPTIONS",
        {"base_url": "http://127.0.0.1:1", "token": "t"},
    ),
    (
        "providers.vendors.modal.provider",
        "ModalOptions",
        "MODAL_OPTIONS",
        {"base_url": "http://127.0.0.1:1", "token": "t"},
    ),
    ("providers.vendors.e2b", "E2BOptions", "E2B_OPTIONS", {"base_url": "http://127.0.0.1:1", "token": "t"}),
    (
        "providers.vendors.daytona.provider",
        "DaytonaOptions",
        "DAYTONA_OPTIONS",
        {"base_url": "http://127.0.0.1:1/api", "token": "t"},
    ),
    ("providers.vendors.docker.options", "DockerOptions", "DOCKER_OPTIONS", {}),
]


@pytest.mark.parametrize(("module", "record", "table", "given"), ADAPTER_OPTIONS)
def test_every_adapters_untuned_options_are_its_dataclass_defaults(
    module: str, record: str, table: str, given: dict[str, str]
) -> None:
    """An adapter's option table, its dataclass and what an untuned parse builds agree on every default."""
    loaded = importlib.import_module(module)
    options_class, declared = getattr(loaded, record), getattr(loaded, table)
    assert declared_options(options_class).items() <= declared.items()
    build = getattr(options_class, "from_mapping", None) or options_class.parse
    built = build(given)
    for spec_field in dataclasses.fields(options_class):
        if spec_field.metadata:  # a declared option
            assert getattr(built, spec_field.name) == spec_field.default, spec_field.name
