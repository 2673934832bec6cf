"""foundation.compat.kombu against the installed kombu: a Redis channel publishes through one kept client."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from kombu import Connection, Exchange, Producer, Queue

from foundation.compat import kombu as compat
from tests.compat.pins import assert_pinned


def test_kombu_is_the_version_the_compat_module_was_checked_against() -> None:
    assert_pinned("kombu", checked=compat.TESTED_VERSION, module="foundation/compat/kombu.py")


@pytest.fixture
def queue_name() -> Iterator[str]:
    name = f"compat-kombu-{uuid.uuid4().hex[:8]}"
    yield name
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(name)


def test_a_kept_channel_publishes_every_message_through_one_client(queue_name: str) -> None:
    with Connection(settings.CELERY_BROKER_URL) as connection:
        channel: Any = connection.channel()
        built: list[object] = []
        create_client = channel._create_client

        def counting_create_client(*args: Any, **kwargs: Any) -> Any:
            client = create_client(*args, **kwargs)
            built.append(client)
            return client

        channel._create_client = counting_create_client
        exchange = Exchange(queue_name, type="direct")
        Queue(queue_name, exchange=exchange, routing_key=queue_name, channel=channel).declare()
        producer = Producer(channel, exchange=exchange, routing_key=queue_name)

        before = len(built)
        producer.publish({"n": 0})
        built_by_one_publish = len(built) - before
        assert compat.channel_client_keep(channel)
        assert compat.channel_client_keep(channel)  # a second call keeps the same client
        kept_at = len(built)
        for n in range(1, 4):
            producer.publish({"n": n})

        # Without it kombu builds clients for every publish (what the module saves); with it, none more.
        assert built_by_one_publish >= 1
        assert kept_at == before + built_by_one_publish + 1  # the kept client, built once
        assert len(built) == kept_at
        assert redis.Redis.from_url(settings.CELERY_BROKER_URL).llen(queue_name) == 4
        channel.close()


def test_a_channel_of_another_transport_is_left_alone() -> None:
    with Connection("memory://") as connection:
        channel = connection.channel()
        assert not compat.channel_client_keep(channel)
