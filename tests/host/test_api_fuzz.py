"""Property-based tests of the whole REST API against its own OpenAPI schema (schemathesis).

Every operation of `/api/schema/` is called in-process with generated requests, valid and invalid, as an
authenticated workspace. Whatever is sent, the answer must be a documented status with a documented body:
never a 500, an undocumented status, a body that does not match the schema, or a request the schema
forbids answered as if it were fine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from bindings.models import ApiKey
from bindings.services import API_KEY_PREFIX, api_key_secret_digest
from foundation.api_schema import RUN_STREAM_PATH
from runners.models import Run
from tests.bindings.conftest import EVERY_TYPE_SCHEMA
from tests.factories import (
    AgentBindingFactory,
    BotFactory,
    ModelFactory,
    ModelProviderFactory,
    RunnerDescriptorFactory,
    WorkspaceFactory,
)
from tests.fuzzing import fuzz_settings
from tests.streaming.conftest import make_run

KEY_PREFIX, KEY_SECRET = "fuzz0000", "schemathesis-fuzz-secret"

schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", WSGIHandler())


@schema.auth(refresh_interval=None)
class WorkspaceApiKey:
    """Every case is sent with the fuzz workspace's key, so that no case is only an authentication test."""

    def get(self, case: Any, ctx: Any) -> str:
        return f"{API_KEY_PREFIX}_{KEY_PREFIX}_{KEY_SECRET}"

    def set(self, case: Any, data: str, ctx: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@pytest.fixture(autouse=True)
def _requests_keep_the_test_connection() -> Iterator[None]:
    # As Django's test client does: a request must not close the connection that holds the test's
    # transaction.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def existing(db: Any) -> dict[str, str]:
    """The fuzz workspace's key and one object of each kind; path parameter name → the object's id."""
    workspace = WorkspaceFactory.create(slug="fuzz")
    ApiKey.objects.create(workspace=workspace, prefix=KEY_PREFIX, secret_sha256=api_key_secret_digest(KEY_SECRET))
    runner = RunnerDescriptorFactory.create(plugin_name="fuzz", config_schema=EVERY_TYPE_SCHEMA)
    AgentBindingFactory.create(
        workspace=workspace, binding_id="fuzz", runner_id=runner.runner_id, runner_config={"greeting": "hi"}
    )
    BotFactory.create(workspace=workspace, bot_id="fuzz")
    # A model uses the provider, so deleting the provider meets the documented 409 too.
    provider = ModelProviderFactory.create(workspace=workspace, provider_id="fuzz", headers={"X-Org": "fuzz"})
    ModelFactory.create(provider=provider, model_id="fuzz")
    run = make_run(workspace, conversation_id="fuzz")
    # A stream of a running run lasts until the run ends; this one replays and ends at once.
    ended = make_run(workspace, conversation_id="fuzz", status=Run.Status.COMPLETED)
    return {
        "binding_id": "fuzz",
        "bot_id": "fuzz",
        "provider_id": "fuzz",
        "model_id": "fuzz",
        "run_id": str(run.run_id),
        "ended_run_id": str(ended.run_id),
        "event_id": run.event.event_id,
        "conversation_id": "fuzz",
    }


@schema.parametrize()
# Called over WSGI here, Django reads the SSE view's async body to its end before answering (the stream
# operation is given a run that has ended); daphne serves it as a stream.
@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators")
# Derandomized in CI (the same cases on every run of the same code); randomized and longer under `make fuzz`.
@fuzz_settings(max_examples=50)
def test_every_operation_answers_as_documented(case: Any, existing: dict[str, str]) -> None:
    if case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE:
        # Valid requests act on objects that exist, or they would mostly be answered 404.
        for name in case.path_parameters or {}:
            if name in existing:
                case.path_parameters[name] = existing[name]
        if case.operation.path == RUN_STREAM_PATH:
            case.path_parameters["run_id"] = existing["ended_run_id"]
    wait = (case.query or {}).get("wait")
    if isinstance(wait, int | float) and wait > 0:
        # No worker runs in this test: a run would stay queued for the whole wait.
        case.query["wait"] = 0
    # A request the schema allows may still name an unknown bot, runner or run: a 4xx is right there.
    excluded = [positive_data_acceptance]
    if case.media_type == "multipart/form-data":
        # Multipart fields are text whatever the schema's type: an "object" arrives as its JSON text.
        excluded.append(negative_data_rejection)
    case.call_and_validate(excluded_checks=excluded)
