"""Runner config is checked against the runner's form schema, field by field, with defaults filled in."""

from __future__ import annotations

import pytest

from bindings.runner_config import RunnerConfigError, runner_config_validate
from foundation.crypto import SECRET_MASK
from tests.bindings.conftest import EVERY_TYPE_SCHEMA


def validate(config, stored_secrets=None):
    return runner_config_validate(config_schema=EVERY_TYPE_SCHEMA, config=config, stored_secrets=stored_secrets)


def errors_of(config, stored_secrets=None) -> dict[str, str]:
    with pytest.raises(RunnerConfigError) as caught:
        validate(config, stored_secrets)
    return caught.value.fields


def test_a_config_with_every_type_is_accepted_and_secrets_are_split_off():
    config = {
        "greeting": "hi",
        "notes": "multi\nline",
        "max_rounds": 3,
        "temperature": 0.5,
        "stream": False,
        "mode": "careful",
        "extra": {"nested": [1, 2, {"x": None}]},
        "api_key": "sk-123",
        "prompt": [{"role": "system", "content": "be brief"}],
        "model": "gpt-x",
        "fallback_models": ["a", "b"],
        "kbs": ["kb1"],
        "kb": "kb2",
    }

    split = validate(config)

    assert split.secrets == {"api_key": "sk-123"}
    assert split.plain == {k: v for k, v in config.items() if k != "api_key"}


def test_missing_optional_items_get_their_defaults():
    split = validate({"greeting": "hi"})

    assert split.plain == {"greeting": "hi", "max_rounds": 5, "stream": True, "mode": "fast"}


def test_null_means_unset_and_takes_the_default():
    split = validate({"greeting": "hi", "max_rounds": None, "notes": None})

    assert split.plain["max_rounds"] == 5
    assert "notes" not in split.plain


@pytest.mark.parametrize(
    ("name", "bad_value"),
    [
        ("greeting", 12),
        ("greeting", ""),
        ("notes", ["not", "text"]),
        ("max_rounds", "five"),
        ("max_rounds", 2.5),
        ("max_rounds", True),
        ("temperature", "hot"),
        ("stream", "yes"),
        ("mode", "reckless"),
        ("api_key", 42),
        ("prompt", [{"role": "system"}]),
        ("prompt", [{"role": "system", "content": "x", "extra": 1}]),
        ("prompt", 3),
        ("model", ["a", "b"]),
        ("fallback_models", "a"),
        ("fallback_models", ["a", ""]),
        ("kbs", "kb1"),
        ("kb", ["kb1"]),
    ],
)
def test_a_wrong_value_is_reported_on_its_own_field(name, bad_value):
    errors = errors_of({"greeting": "hi", name: bad_value})

    assert list(errors) == [f"runner_config.{name}"]
    assert errors[f"runner_config.{name}"].startswith("Must be")


def test_a_prompt_may_be_plain_text():
    assert validate({"greeting": "hi", "prompt": "You are helpful."}).plain["prompt"] == "You are helpful."


def test_select_errors_name_the_options():
    errors = errors_of({"greeting": "hi", "mode": "reckless"})

    assert "fast" in errors["runner_config.mode"]
    assert "careful" in errors["runner_config.mode"]


def test_a_missing_required_item_is_reported():
    assert errors_of({}) == {"runner_config.greeting": "This field is required."}


def test_unknown_keys_are_refused_each_on_its_own_name():
    errors = errors_of({"greeting": "hi", "colour": "blue", "size": 3})

    assert set(errors) == {"runner_config.colour", "runner_config.size"}


def test_several_problems_are_reported_together():
    errors = errors_of({"max_rounds": "x", "mode": "y"})

    assert set(errors) == {"runner_config.greeting", "runner_config.max_rounds", "runner_config.mode"}


def test_a_config_that_is_not_an_object_is_refused():
    assert errors_of(["greeting"]) == {"runner_config": "Must be a JSON object."}


def test_the_mask_keeps_the_stored_secret():
    split = validate({"greeting": "hi", "api_key": SECRET_MASK}, stored_secrets={"api_key": "sk-old"})

    assert split.secrets == {"api_key": "sk-old"}


def test_the_mask_without_a_stored_secret_is_refused():
    assert "runner_config.api_key" in errors_of({"greeting": "hi", "api_key": SECRET_MASK})
