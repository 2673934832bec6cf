"""The development tokens and sessions left the runners app for runtimes (runners 0010, runtimes 0001):
a database made before the move keeps its tokens, its sessions and who may manage them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from runtimes.models import DevelopmentSession, DevelopmentToken
from tests.factories import UserFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("runners", "0009_development_tokens_and_sessions")]


def _migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor


def test_tokens_sessions_and_permissions_made_before_the_move_are_the_runtimes_apps() -> None:
    workspace = WorkspaceFactory.create()
    operator = UserFactory.create()
    # Back to before the move: the models are the runners app's again, and so are their content types, as
    # on a host that never ran the new code.
    executor = _migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    content_type = old.get_model("contenttypes", "ContentType")
    content_type.objects.filter(model__in=["developmenttoken", "developmentsession"]).update(app_label="runners")
    old_token = old.get_model("runners", "DevelopmentToken").objects.create(
        workspace_id=workspace.pk, name="laptop", prefix="abc123", secret_sha256="0" * 64,
        expires_at=timezone.now() + timedelta(days=3),
    )  # fmt: skip
    old.get_model("runners", "DevelopmentSession").objects.create(
        session_id="s" * 32, workspace_id=workspace.pk, token_id=old_token.pk, runner_ids=["plugin:a/b/c"]
    )
    permission = Permission.objects.get(codename="change_developmenttoken")
    operator.user_permissions.add(permission)

    executor = _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    token = DevelopmentToken.objects.get(prefix="abc123")
    assert (token.name, token.workspace_id) == ("laptop", workspace.pk)
    assert DevelopmentSession.objects.get(token=token).runner_ids == ["plugin:a/b/c"]
    permission.refresh_from_db()
    assert permission.content_type.app_label == "runtimes"
    operator = type(operator).objects.get(pk=operator.pk)  # a fresh user: no cached permissions
    assert operator.has_perm("runtimes.change_developmenttoken")
