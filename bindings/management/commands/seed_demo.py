"""`python manage.py seed_demo`: the demo workspace, bot, qa-runner binding and admin login that `make run`
prints. Idempotent: existing objects are kept as they are (an operator may have edited them). A demo
workspace it creates may reach private addresses (a local Ollama), as its operator's own.

The demo binding is workspace-scoped: it answers the debug chat's default target ("Workspace default",
no bot) as well as messages to `demo-bot`, by the resolver's ordinary rules (a bot-scoped binding added
later wins for its bot)."""

import logging
import os
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from bindings.models import AgentBinding, Bot, RunnerDescriptor, Workspace, WorkspaceMembership
from bindings.services import (
    BindingValidationError,
    binding_create,
    binding_store_unvalidated,
    bot_create,
    workspace_get_or_create,
    workspace_member_add,
)
from bindings.specs import BindingIn, BindingScopeIn, BotIn

logger = logging.getLogger(__name__)

DEMO_USERNAME = "admin"
DEMO_BOT_ID = "demo-bot"
DEMO_BINDING_ID = "demo-qa"
DEMO_RUNNER_ID = "plugin:langbot/qa-runner/default"
DEMO_RUNNER_CONFIG = {"behaviour": "ok"}


def seed_demo_bot_and_binding(workspace: Workspace) -> tuple[Bot, AgentBinding]:
    bot = Bot.objects.filter(workspace=workspace, bot_id=DEMO_BOT_ID).first() or bot_create(
        workspace=workspace, spec=BotIn(bot_id=DEMO_BOT_ID, name="Demo bot", platform="webui")
    )
    binding = AgentBinding.objects.filter(workspace=workspace, binding_id=DEMO_BINDING_ID).first()
    if binding is not None:
        return bot, binding
    spec = BindingIn(
        binding_id=DEMO_BINDING_ID,
        name="Demo: qa-runner",
        scope=BindingScopeIn(scope_type="workspace"),
        event_types=["message.received"],
        runner_id=DEMO_RUNNER_ID,
        runner_config=DEMO_RUNNER_CONFIG,
    )
    known = (
        RunnerDescriptor.objects.filter(runner_id=DEMO_RUNNER_ID)
        .exclude(status=RunnerDescriptor.Status.MISSING)
        .exists()
    )
    if known:
        try:
            return bot, binding_create(workspace=workspace, spec=spec, source=AgentBinding.Source.SEED)
        except BindingValidationError as exc:
            logger.warning("demo binding does not fit the installed qa-runner (%s); storing it unchecked", exc)
    else:
        # `make run` seeds before the runtime is up; `sync_runners` (run once it is) validates the config.
        # Expected on a first start, so nothing a newcomer has to read.
        logger.debug("runner %s is not known yet; demo binding config checked at the runner sync", DEMO_RUNNER_ID)
    binding = binding_store_unvalidated(
        workspace=workspace, spec=spec, source=AgentBinding.Source.SEED, source_detail="seed_demo"
    )
    return bot, binding


class Command(BaseCommand):
    help = "Create (or keep) the demo workspace and its admin user; prints the login."

    def handle(self, *args: Any, **options: Any) -> None:
        password = os.environ.get("LANGBOT_DEMO_PASSWORD", "admin")
        new = not Workspace.objects.filter(slug="demo").exists()
        workspace = workspace_get_or_create(slug="demo", name="Demo workspace")
        if new:
            # The demo workspace is the operator's own, on their machine: its model provider may be a local
            # Ollama (README), which the outbound address guard refuses unless the workspace is allowed.
            Workspace.objects.filter(pk=workspace.pk).update(allow_private_addresses=True)
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(
            username=DEMO_USERNAME, defaults={"is_staff": True, "is_superuser": True}
        )
        if created:
            user.set_password(password)
            user.save(update_fields=["password"])
        workspace_member_add(workspace=workspace, user=user, role=WorkspaceMembership.Role.OWNER)
        bot, binding = seed_demo_bot_and_binding(workspace)
        self.stdout.write(f"demo workspace: {workspace.slug}")
        self.stdout.write(
            f"demo bot: {bot.bot_id}; binding: {binding.binding_id} ({binding.scope_type} scope) -> {binding.runner_id}"
        )
        if created:
            self.stdout.write(f"admin login: {DEMO_USERNAME} / {password}")
        else:
            self.stdout.write(f"admin login: {DEMO_USERNAME} (existing user; password unchanged)")
