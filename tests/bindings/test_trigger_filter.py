"""A binding's trigger filter, rule by rule: chat types, the group rules (addressed, prefix, pattern), the
prefix removed from the runner's text, ignore rules, access lists; patterns checked on save and bounded
in time when run; the bindings API shows and checks it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from bindings.triggers import PATTERN_MAX_CHARS, TriggerContext, TriggerPolicy, trigger_filter


def check(policy: dict[str, Any], text: str = "hello", **context: Any):
    fields = {"chat_kind": "private", "mentioned": True, "chat_id": "chat-1", "user_id": "user-1", **context}
    return trigger_filter(TriggerPolicy.model_validate(policy).model_dump(mode="json")).check(
        TriggerContext(text=text, **fields)
    )


def answered(policy: dict[str, Any], text: str = "hello", **context: Any) -> bool:
    return check(policy, text, **context) is not None


def test_the_default_filter_answers_private_and_addressed_group_messages():
    assert answered({}, chat_kind="private", mentioned=False)
    assert answered({}, chat_kind="group", mentioned=True)
    assert trigger_filter({}).check(TriggerContext(text="", chat_kind="group", mentioned=True)) is not None


def test_the_default_filter_ignores_a_group_message_that_says_it_does_not_address_the_bot():
    assert not answered({}, chat_kind="group", mentioned=False)


def test_chat_types_limit_the_chats_answered():
    assert not answered({"chat_types": ["private"]}, chat_kind="group")
    assert answered({"chat_types": ["private"]}, chat_kind="private")
    assert not answered({"chat_types": ["group"]}, chat_kind="private")


def test_a_group_prefix_answers_an_unaddressed_group_message_and_is_removed_from_the_text():
    policy = {"group_mention": False, "group_prefixes": ["ai"]}

    match = check(policy, "ai  what time is it?", chat_kind="group", mentioned=False)

    assert match is not None
    assert match.strip == "ai"
    assert not answered(policy, "what time is it?", chat_kind="group", mentioned=False)


def test_a_group_prefix_is_kept_when_strip_prefix_is_off():
    match = check(
        {"group_mention": False, "group_prefixes": ["ai"], "strip_prefix": False},
        "ai hi",
        chat_kind="group",
        mentioned=False,
    )

    assert match is not None
    assert match.strip == ""


def test_group_rules_do_not_apply_to_private_chats():
    assert answered({"group_mention": False, "group_prefixes": ["ai"]}, "no prefix here", chat_kind="private")


def test_without_the_mention_rule_an_addressed_group_message_needs_a_prefix_or_pattern():
    policy = {"group_mention": False, "group_prefixes": ["ai"]}

    assert not answered(policy, "hello", chat_kind="group", mentioned=True)
    assert answered(policy, "ai hello", chat_kind="group", mentioned=True)


def test_a_group_pattern_matches_at_the_start_of_the_message():
    policy = {"group_mention": False, "group_patterns": [r"(help|faq)\b"]}

    assert answered(policy, "help me", chat_kind="group", mentioned=False)
    assert not answered(policy, "please help me", chat_kind="group", mentioned=False)
    assert check(policy, "faq", chat_kind="group", mentioned=False).strip == ""


def test_ignore_prefixes_and_patterns_refuse_in_any_chat():
    policy = {"ignore_prefixes": ["!"], "ignore_patterns": [r"\bspam\b"]}

    assert not answered(policy, "!ban", chat_kind="private")
    assert not answered(policy, "this is spam indeed", chat_kind="group")
    assert answered(policy, "spammy but fine", chat_kind="private")


def test_ignore_rules_read_the_text_after_the_matched_prefix():
    policy = {"group_mention": False, "group_prefixes": ["ai"], "ignore_prefixes": ["!"]}

    assert not answered(policy, "ai !reset", chat_kind="group", mentioned=False)
    assert answered(policy, "ai reset", chat_kind="group", mentioned=False)


def test_a_deny_list_refuses_listed_group_chats_private_chats_and_senders():
    policy = {
        "access_group_chat_ids": ["g-bad"],
        "access_private_user_ids": ["u-quiet"],
        "access_user_ids": ["u-banned"],
    }

    assert not answered(policy, chat_kind="group", chat_id="g-bad", user_id="u-1")
    assert answered(policy, chat_kind="group", chat_id="g-ok", user_id="u-quiet")  # a private-chat entry
    assert not answered(policy, chat_kind="private", chat_id="dm-9", user_id="u-quiet")
    assert not answered(policy, chat_kind="group", chat_id="g-ok", user_id="u-banned")
    assert answered(policy, chat_kind="private", chat_id="dm-1", user_id="u-1")


def test_an_allow_list_answers_only_listed_chats_and_a_star_lists_every_chat_of_its_kind():
    policy = {"access_mode": "allow", "access_group_chat_ids": ["g-1"], "access_private_user_ids": ["*"]}

    assert answered(policy, chat_kind="group", chat_id="g-1")
    assert not answered(policy, chat_kind="group", chat_id="g-2")
    assert answered(policy, chat_kind="private", user_id="anyone")
    assert not answered({"access_mode": "allow"}, chat_kind="private")


def test_an_event_without_ids_is_not_on_any_list():
    assert answered({"access_user_ids": ["u-1"]}, user_id=None, chat_id=None)
    assert not answered({"access_mode": "allow", "access_user_ids": ["u-1"]}, user_id=None, chat_id=None)


def test_a_pattern_that_backtracks_for_too_long_refuses_instead_of_holding_the_process():
    catastrophic = r"^(\w+\s?)*$"
    text = "a" * 5000 + "!"

    assert not answered({"group_mention": False, "group_patterns": [catastrophic]}, text, chat_kind="group")
    assert not answered({"ignore_patterns": [catastrophic]}, text, chat_kind="private")


@pytest.mark.parametrize(
    ("policy", "location"),
    [
        ({"group_patterns": ["(unclosed"]}, "group_patterns"),
        ({"ignore_patterns": ["x" * (PATTERN_MAX_CHARS + 1)]}, "ignore_patterns"),
        ({"group_prefixes": [""]}, "group_prefixes"),
        ({"chat_types": ["channel"]}, "chat_types"),
        ({"access_mode": "whitelist"}, "access_mode"),
        ({"prefixes": ["ai"]}, "prefixes"),
    ],
)
def test_a_policy_the_filter_cannot_hold_is_refused(policy, location):
    with pytest.raises(ValidationError) as error:
        TriggerPolicy.model_validate(policy)

    assert error.value.errors()[0]["loc"][0] == location


def test_a_stored_policy_that_no_longer_validates_answers_nothing():
    broken = trigger_filter({"group_patterns": ["(unclosed"]})

    assert broken.check(TriggerContext(text="hi", chat_kind="private", mentioned=True)) is None


@pytest.mark.django_db
def test_the_bindings_api_shows_the_default_filter_and_stores_a_given_one(api_client, runner):
    body = {
        "binding_id": "support",
        "event_types": ["message.received"],
        "runner_id": runner.runner_id,
        "runner_config": {"greeting": "hello", "api_key": "sk"},
    }
    created = api_client.post("/api/v1/bindings", body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["trigger_policy"]["chat_types"] == ["private", "group"]
    assert created.json()["trigger_policy"]["group_mention"] is True

    policy = {"group_prefixes": ["ai"], "access_mode": "allow", "access_group_chat_ids": ["g-1"]}
    patched = api_client.patch("/api/v1/bindings/support", {"trigger_policy": policy}, format="json")

    assert patched.status_code == 200, patched.content
    assert patched.json()["trigger_policy"]["group_prefixes"] == ["ai"]
    assert patched.json()["trigger_policy"]["access_mode"] == "allow"


@pytest.mark.django_db
def test_the_bindings_api_refuses_a_pattern_that_does_not_compile(api_client, runner):
    body = {
        "event_types": ["message.received"],
        "runner_id": runner.runner_id,
        "runner_config": {"greeting": "hello", "api_key": "sk"},
        "trigger_policy": {"group_patterns": ["(help"]},
    }

    response = api_client.post("/api/v1/bindings", body, format="json")

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_argument"
    assert "not a valid regular expression" in error["details"]["fields"]["trigger_policy.group_patterns"]
