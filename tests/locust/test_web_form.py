"""What Locust's web form posts becomes the settings the command line would have given."""

from __future__ import annotations

import argparse

import pytest

from harness.errors import UsageError
from harness.locust.settings import RunSettings, add_arguments
from harness.locust.web_form import as_form_text, coerce_form_values, typed


def command_line(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser, locust=False)
    return parser.parse_args(list(argv))


def test_blank_fields_are_the_defaults_and_typed_fields_their_types() -> None:
    options = command_line("--stages", "2,3")
    # what Locust's /swarm leaves after the form posts every field as text
    options.hold, options.seed, options.time_scale, options.base_url = "20", "7", "", ""
    options.stages, options.poisson, options.reward_command = "4,8", "true", ""
    coerce_form_values(options)
    assert (options.hold, options.seed, options.time_scale, options.base_url) == (20.0, 7, None, None)
    assert (options.stages, options.poisson, options.reward_command) == ("4,8", True, None)
    settings = RunSettings.from_options(options)
    assert (settings.hold_s, settings.seed, settings.stages, settings.poisson) == (20.0, 7, (4, 8), True)


def test_values_that_are_already_typed_are_left_alone() -> None:
    options = command_line("--hold", "3", "--provider-option", "a=b")
    coerce_form_values(options)
    assert options.hold == 3.0 and options.provider_option == ["a=b"]


def test_a_word_in_a_number_field_is_one_clear_error() -> None:
    options = command_line()
    options.hold = "soon"
    with pytest.raises(UsageError, match=r"--hold takes a number \(got 'soon' in the web form\)"):
        coerce_form_values(options)


def test_under_the_web_ui_number_options_are_text_yet_each_test_reads_them_typed() -> None:
    options = command_line("--hold", "1.5", "--seed", "3", "--max-inflight", "40")
    as_form_text(options)
    # Locust stores a posted value as type(current)(text): text now, so "" or "soon" no longer fail in Locust
    assert (options.hold, options.seed, options.max_inflight) == ("1.5", "3", "40")
    settings = RunSettings.from_options(typed(options))
    assert (settings.hold_s, settings.seed, settings.max_inflight) == (1.5, 3, 40)
    options.hold = ""  # the user cleared the field: the default again
    assert typed(options).hold is None
