"""What a platform declares (and a runner sees in `ctx.delivery`), and long replies split at its limit on
paragraph, line, sentence or word boundaries."""

from __future__ import annotations

from platforms.adapters.telegram import TelegramAdapter
from platforms.delivery import text_split
from platforms.interface import ReplyTarget
from runners.actions.delivery import surface_delivery


def test_a_10000_character_reply_becomes_three_telegram_messages_cut_after_sentences():
    sentence = "This sentence is exactly fifty characters long ok. "
    text = (sentence * 200).strip()  # 10,199 characters
    pieces = text_split(text, 4096, TelegramAdapter.text_length)
    assert len(pieces) == 3
    assert all(len(p) <= 4096 for p in pieces)
    assert all(p.endswith("ok.") for p in pieces)
    assert " ".join(pieces) == text


def test_lines_are_preferred_to_sentences_and_the_binding_limit_narrows_the_platform_one():
    text = "first line. still first\nsecond line. still second\nthird"
    assert text_split(text, 40) == ["first line. still first", "second line. still second\nthird"]
    # A sentence end in the first third would make a stub of a message: a space later wins.
    assert text_split("One. Two three four five six seven", 20) == ["One. Two three four", "five six seven"]
    assert text_split(text, 30) == ["first line. still first", "second line. still second", "third"]


def test_a_piece_without_any_boundary_is_cut_hard_and_utf16_units_are_counted():
    assert text_split("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]
    emoji = "😀" * 3000  # 6000 UTF-16 code units: Telegram counts these, not characters
    pieces = text_split(emoji, 4096, TelegramAdapter.text_length)
    assert [TelegramAdapter.text_length(p) for p in pieces] == [4096, 1904]


def test_ctx_delivery_says_what_telegram_supports():
    telegram = surface_delivery("telegram")
    assert (telegram.supports_streaming, telegram.supports_edit, telegram.supports_reaction) == (True, True, True)
    assert telegram.max_message_size == 4096
    assert set(telegram.actions) == {"message.send", "message.edit", "reaction.add"}
    assert surface_delivery("dingtalk").supports_edit is False


def test_telegram_streams_to_a_group_at_a_third_of_the_private_chat_pace():
    adapter = TelegramAdapter(bot_id="b", credentials={})
    assert adapter.write_interval_seconds(ReplyTarget(chat_id="4242")) == 1.0
    assert adapter.write_interval_seconds(ReplyTarget(chat_id="-1001234")) == 3.0
