"""The committed JSON Schema must match the models, so clients reading it never see a stale contract."""

import json

from langbot_sdk import schema


def test_committed_protocol_schema_is_up_to_date():
    committed = schema.SCHEMA_PATH.read_text(encoding="utf-8")

    assert committed == schema.render_schema(), (
        "langbot_sdk/schemas/protocol_v1.json is stale; run `python -m langbot_sdk.schema` and commit it"
    )


def test_schema_describes_the_public_models_under_defs():
    document = json.loads(schema.render_schema())

    for name in ("AgentRunContext", "AgentRunResult", "AgentRunnerManifest", "HistoryPage", "AgentAPIError"):
        assert name in document["$defs"]
    assert document["$defs"]["AgentRunResult"]["additionalProperties"] is False


def test_check_mode_fails_on_a_stale_file_and_passes_on_a_fresh_one(tmp_path, capsys):
    target = tmp_path / "protocol_v1.json"
    target.write_text("{}\n", encoding="utf-8")

    assert schema.main(["--check", "--output", str(target)]) == 1
    assert "stale" in capsys.readouterr().err

    assert schema.main(["--output", str(target)]) == 0
    assert schema.main(["--check", "--output", str(target)]) == 0
