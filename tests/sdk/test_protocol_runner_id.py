"""Runner ids: the wire form round-trips and malformed ids are refused with a clear reason."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langbot_sdk.protocol import RunnerId

ID_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"
valid_part = st.text(alphabet=ID_ALPHABET, min_size=1, max_size=64).filter(lambda s: set(s) != {"."})


@given(author=valid_part, plugin=valid_part, runner=valid_part)
def test_runner_id_round_trips_through_its_string_form(author, plugin, runner):
    runner_id = RunnerId(author, plugin, runner)

    parsed = RunnerId.parse(str(runner_id))

    assert parsed == runner_id
    assert str(parsed) == f"plugin:{author}/{plugin}/{runner}"


@given(part=valid_part, bad=st.characters(blacklist_characters=ID_ALPHABET + "/"))
def test_runner_id_with_a_character_outside_the_alphabet_is_refused(part, bad):
    with pytest.raises(ValueError, match="runner id"):
        RunnerId.parse(f"plugin:{part}/{part}{bad}/{part}")


@given(parts=st.lists(valid_part, min_size=0, max_size=6).filter(lambda p: len(p) != 3))
def test_runner_id_needs_exactly_three_parts(parts):
    with pytest.raises(ValueError, match="exactly three"):
        RunnerId.parse("plugin:" + "/".join(parts))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("langbot/qa-runner/default", "must start with 'plugin:'"),
        ("Plugin:langbot/qa-runner/default", "must start with 'plugin:'"),
        ("plugin:langbot//default", "plugin name is empty"),
        ("plugin:langbot/qa-runner/", "runner name is empty"),
        ("plugin: langbot/qa-runner/default", "whitespace"),
        ("plugin:langbot/qa runner/default", "whitespace"),
        ("plugin:langbot/qa-runner/default\n", "whitespace"),
        ("plugin:langbot/qa:runner/default", "only letters, digits"),
        ("plugin:../qa-runner/default", "dots only"),
        ("plugin:" + "a" * 65 + "/qa-runner/default", "limit is 64"),
    ],
)
def test_malformed_runner_id_is_refused_with_the_reason(value, reason):
    with pytest.raises(ValueError, match=reason):
        RunnerId.parse(value)


def test_runner_id_parts_of_64_characters_are_accepted():
    part = "a" * 64

    assert RunnerId.parse(f"plugin:{part}/{part}/{part}").runner == part


def test_runner_id_knows_its_plugin_identity():
    assert RunnerId.parse("plugin:langbot/qa-runner/default").plugin_identity == "langbot/qa-runner"
