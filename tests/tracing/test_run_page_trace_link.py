"""The admin's run page names the run's trace, and links it to the trace UI when a template is configured
(`LANGBOT_TRACE_URL_TEMPLATE`, docs/tracing.md)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from runners.models import Run
from tests.factories import UserFactory
from tests.gateway.support import binding_for, message, post_event

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def run(api_client, workspace) -> Run:
    binding_for(workspace, binding_id="support", concurrency_policy="parallel")
    response = post_event(api_client, message("hello trace", event_id="evt-trace", conversation_id="c-trace"))
    return Run.objects.get(run_id=response.json()["runs"][0]["run_id"])


def test_the_run_page_links_the_runs_trace_to_the_configured_trace_ui(admin_client, run, settings):
    settings.LANGBOT_TRACE_URL_TEMPLATE = "http://jaeger.example:16686/trace/{trace_id}"

    html = admin_client.get(reverse("admin:runners_run_change", args=[run.pk])).content.decode()

    assert f'href="http://jaeger.example:16686/trace/{run.trace_id}"' in html


def test_without_a_trace_ui_the_run_page_shows_the_trace_id_alone(admin_client, run, settings):
    settings.LANGBOT_TRACE_URL_TEMPLATE = ""

    html = admin_client.get(reverse("admin:runners_run_change", args=[run.pk])).content.decode()

    assert f"<code>{run.trace_id}</code>" in html
    assert "/trace/" not in html


def test_a_run_from_before_trace_ids_links_its_run_id_as_its_trace(admin_client, run, settings):
    settings.LANGBOT_TRACE_URL_TEMPLATE = "http://jaeger.example:16686/trace/{trace_id}"
    Run.objects.filter(pk=run.pk).update(trace_id="")

    html = admin_client.get(reverse("admin:runners_run_change", args=[run.pk])).content.decode()

    assert f'href="http://jaeger.example:16686/trace/{run.run_id.hex}"' in html
