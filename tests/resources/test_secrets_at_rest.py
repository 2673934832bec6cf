"""A provider's API key and headers are encrypted at rest and move to a new key on rotation."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection

from resources.models import ModelProvider
from tests.factories import ModelProviderFactory

pytestmark = pytest.mark.django_db


def raw_columns(provider: ModelProvider) -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key, headers FROM resources_modelprovider WHERE id = %s", [provider.pk])
        return cursor.fetchone()


@pytest.fixture
def encryption_keys(settings):
    from foundation.crypto import generate_key

    keys = [generate_key(), generate_key()]
    settings.LANGBOT_ENCRYPTION_KEYS = keys[:1]
    return keys


def test_rotation_moves_provider_secrets_to_the_new_key(settings, encryption_keys, capsys):
    old, new = encryption_keys
    provider = ModelProviderFactory.create(api_key="sk-rotate-me", headers={"X-Org": "org-rotate-me"})
    settings.LANGBOT_ENCRYPTION_KEYS = [new, old]

    call_command("rotate_encryption_keys")
    settings.LANGBOT_ENCRYPTION_KEYS = [new]

    assert "re-encrypted 1 model provider secrets" in capsys.readouterr().out
    raw_key, raw_headers = raw_columns(provider)
    assert Fernet(new.encode()).decrypt(raw_key.encode()) == b'"sk-rotate-me"'
    assert Fernet(new.encode()).decrypt(raw_headers.encode()) == b'{"X-Org": "org-rotate-me"}'
    assert ModelProvider.objects.get(pk=provider.pk).api_key == "sk-rotate-me"
