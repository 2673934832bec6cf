"""Secrets are encrypted at rest with rotatable Fernet keys."""

from __future__ import annotations

import logging

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection

from bindings.models import AgentBinding, Bot
from bindings.services import binding_create, binding_runner_config_plain
from bindings.specs import BindingIn
from foundation import crypto
from tests.factories import BotFactory

pytestmark = pytest.mark.django_db


def raw_column(table: str, column: str, pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def make_binding(workspace, runner) -> AgentBinding:
    spec = BindingIn(
        binding_id="b",
        event_types=["message.received"],
        runner_id=runner.runner_id,
        runner_config={"greeting": "hello", "api_key": "sk-very-secret"},
    )
    return binding_create(workspace=workspace, spec=spec)


def test_runner_secrets_are_not_stored_in_plaintext(workspace, runner, encryption_keys):
    binding = make_binding(workspace, runner)

    raw = raw_column("bindings_agentbinding", "runner_secrets", binding.pk)
    plain_config = raw_column("bindings_agentbinding", "runner_config", binding.pk)

    assert "sk-very-secret" not in raw
    assert "sk-very-secret" not in str(plain_config)
    assert Fernet(encryption_keys[0].encode()).decrypt(raw.encode()) == b'{"api_key": "sk-very-secret"}'


def test_bot_credentials_are_not_stored_in_plaintext(encryption_keys):
    bot = BotFactory.create(credentials={"token": "tg-token-123"})

    raw = raw_column("bindings_bot", "credentials", bot.pk)

    assert "tg-token-123" not in raw
    assert Bot.objects.get(pk=bot.pk).credentials == {"token": "tg-token-123"}


def test_old_keys_still_decrypt_and_rotation_moves_every_secret_to_the_first_key(
    settings, workspace, runner, encryption_keys, capsys
):
    old, new = encryption_keys
    binding = make_binding(workspace, runner)
    bot = BotFactory.create(credentials={"token": "tg"})

    settings.LANGBOT_ENCRYPTION_KEYS = [new, old]
    assert binding_runner_config_plain(AgentBinding.objects.get(pk=binding.pk))["api_key"] == "sk-very-secret"
    call_command("rotate_encryption_keys")
    settings.LANGBOT_ENCRYPTION_KEYS = [new]

    assert "re-encrypted 1 bot credentials" in capsys.readouterr().out
    assert binding_runner_config_plain(AgentBinding.objects.get(pk=binding.pk))["api_key"] == "sk-very-secret"
    assert Bot.objects.get(pk=bot.pk).credentials == {"token": "tg"}
    raw = raw_column("bindings_bot", "credentials", bot.pk)
    assert Fernet(new.encode()).decrypt(raw.encode()) == b'{"token": "tg"}'


def test_a_dropped_key_makes_decryption_fail_loudly(settings, encryption_keys):
    bot = BotFactory.create(credentials={"token": "tg"})
    settings.LANGBOT_ENCRYPTION_KEYS = [encryption_keys[1]]

    with pytest.raises(crypto.SecretDecryptionError):
        Bot.objects.get(pk=bot.pk)


def test_without_keys_a_key_is_derived_from_the_secret_key_with_a_warning(settings, caplog):
    settings.LANGBOT_ENCRYPTION_KEYS = []
    settings.SECRET_KEY = "a-secret-key-only-this-test-uses"

    with caplog.at_level(logging.WARNING, logger="foundation.crypto"):
        token = crypto.encrypt_text("hello")

    assert crypto.decrypt_text(token) == "hello"
    assert "LANGBOT_ENCRYPTION_KEYS is not set" in caplog.text
    settings.SECRET_KEY = "another-secret-key"
    with pytest.raises(crypto.SecretDecryptionError):
        crypto.decrypt_text(token)


def test_a_malformed_key_is_a_configuration_error(settings):
    from django.core.exceptions import ImproperlyConfigured

    settings.LANGBOT_ENCRYPTION_KEYS = ["not-a-fernet-key"]

    with pytest.raises(ImproperlyConfigured):
        crypto.encrypt_text("x")
