"""`count_tokens` through the real handlers: exact counts with the tokenizer of a model tiktoken knows,
offline; flagged estimates for other models and for images; no provider call; authorization as any
model call."""

from __future__ import annotations

import tiktoken

from langbot_sdk.protocol import CountTokensResult
from resources.tokens import token_count


def test_a_known_openai_model_is_counted_exactly_with_its_own_encoding(model_run, fake):
    run = model_run(name="gpt-4o-mini")
    text = "The quick brown fox jumps over the lazy dog. 敏捷的棕色狐狸。"

    result = CountTokensResult.model_validate(run.call("count_tokens", model_id="m1", text=text))

    assert result.encoding == "o200k_base"
    assert result.estimated is False
    assert result.tokens == len(tiktoken.get_encoding("o200k_base").encode(text))
    assert fake.paths == []


def test_an_older_model_uses_its_older_encoding(model_run):
    run = model_run(name="gpt-3.5-turbo")

    result = CountTokensResult.model_validate(run.call("count_tokens", model_id="m1", text="hello world"))

    assert (result.encoding, result.estimated, result.tokens) == ("cl100k_base", False, 2)


def test_a_model_tiktoken_does_not_know_gets_an_estimate_flagged_as_such(model_run):
    run = model_run(name="qwen-max")

    result = CountTokensResult.model_validate(run.call("count_tokens", model_id="m1", text="hello world"))

    assert result.estimated is True
    assert result.encoding == "cl100k_base"
    assert result.tokens == 2


def test_chat_messages_count_their_formatting_and_grow_with_the_conversation(model_run):
    run = model_run(name="gpt-4o")
    one = [{"role": "user", "content": "What is the capital of France?"}]
    two = [*one, {"role": "assistant", "content": "Paris."}]

    first = CountTokensResult.model_validate(run.call("count_tokens", model_id="m1", messages=one))
    second = CountTokensResult.model_validate(run.call("count_tokens", model_id="m1", messages=two))

    content_tokens = len(tiktoken.get_encoding("o200k_base").encode("What is the capital of France?"))
    assert first.tokens > content_tokens  # role and chat formatting count too
    assert second.tokens > first.tokens
    assert first.estimated is False


def test_an_image_makes_the_count_an_estimate(model_run):
    run = model_run(name="gpt-4o")
    message = {
        "role": "user",
        "content": [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": "https://x/y.png"}],
    }

    result = CountTokensResult.model_validate(run.call("count_tokens", model_id="m1", messages=[message]))

    assert result.estimated is True
    assert result.tokens > 100


def test_counting_a_model_the_run_may_not_use_is_refused(model_run):
    run = model_run(name="gpt-4o")

    error = run.refused("count_tokens", model_id="other", text="hi")

    assert error.code == "unauthorized"


def test_a_model_deleted_since_the_run_started_is_not_found(model_run):
    run = model_run(name="gpt-4o")
    run.workspace.models.all().delete()

    error = run.refused("count_tokens", model_id="m1", text="hi")

    assert error.code == "not_found"


def test_without_any_encoding_the_count_falls_back_to_bytes_and_says_so(monkeypatch):
    from resources import tokens

    monkeypatch.setattr(tokens, "_encoding", lambda name: None)

    counted = token_count(model_name="gpt-4o", messages=[], text="abcdefgh")

    assert (counted.tokens, counted.encoding, counted.estimated) == (2, "bytes/4", True)
