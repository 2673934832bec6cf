"""Values a runner's config schema forbids are refused on their own field: a number outside its
`minimum`/`maximum` (a negative sleep), an object where the `json` item asks for a list. The qa-runner's
own manifest declares them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from bindings.runner_config import RunnerConfigError, runner_config_validate
from langbot_sdk.protocol.manifest import DynamicFormItemSchema

QA_MANIFEST = Path(__file__).resolve().parents[2] / "plugins/qa-runner/components/agent_runner/default.yaml"


@pytest.fixture(scope="module")
def qa_schema() -> list[dict]:
    return yaml.safe_load(QA_MANIFEST.read_text())["spec"]["config"]


def refusal(schema: list[dict], config: dict) -> dict[str, str]:
    with pytest.raises(RunnerConfigError) as caught:
        runner_config_validate(config_schema=schema, config=config)
    return caught.value.fields


@pytest.mark.parametrize(
    ("config", "field", "message"),
    [
        ({"sleep_seconds": -1}, "runner_config.sleep_seconds", "Must be a number from 0 to 3600."),
        ({"sleep_seconds": 3601}, "runner_config.sleep_seconds", "Must be a number from 0 to 3600."),
        ({"delta_count": -3}, "runner_config.delta_count", "Must be an integer from 0 to 10000."),
        ({"proxy_calls": {"name": "x"}}, "runner_config.proxy_calls", "Must be a JSON list."),
    ],
)
def test_the_qa_runner_refuses_values_its_schema_forbids(qa_schema, config, field, message):
    assert refusal(qa_schema, config) == {field: message}


def test_values_inside_the_bounds_are_kept(qa_schema):
    split = runner_config_validate(
        config_schema=qa_schema, config={"sleep_seconds": 0, "delta_count": 10000, "proxy_calls": []}
    )

    assert (split.plain["sleep_seconds"], split.plain["delta_count"], split.plain["proxy_calls"]) == (0, 10000, [])


def test_a_one_sided_bound_says_which_side():
    schema = [{"name": "retries", "type": "integer", "label": {"en_US": "Retries"}, "minimum": 1}]

    assert refusal(schema, {"retries": 0}) == {"runner_config.retries": "Must be an integer of at least 1."}


@pytest.mark.parametrize(
    "item",
    [
        {"name": "x", "type": "string", "label": {"en_US": "X"}, "minimum": 0},
        {"name": "x", "type": "integer", "label": {"en_US": "X"}, "minimum": 5, "maximum": 1},
        {"name": "x", "type": "integer", "label": {"en_US": "X"}, "json_type": "array"},
    ],
)
def test_a_manifest_with_bounds_that_cannot_apply_is_refused(item):
    with pytest.raises(ValidationError):
        DynamicFormItemSchema.model_validate(item)
