"""factory_boy factories for host models."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from bindings.models import Workspace


class WorkspaceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Workspace
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"ws-{n}")
    name = factory.LazyAttribute(lambda o: f"Workspace {o.slug}")


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", "pw")
