"""The people admin as an operator uses it: a person's page shows their identities and what is stored about them
(the view audited), an identity added there links it (moving another person's only identity with its person),
the merge and erase actions, the erase confirmation, and the export download."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from people.models import Person, PersonAudit, PersonIdentity
from people.services import person_of_actor
from tests.factories import UserFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def person(workspace, channel: str, actor_id: str) -> Person:
    person_id, _ = person_of_actor(
        workspace_id=workspace.pk, channel=channel, actor_type="user", actor_id=actor_id, actor_name=actor_id
    )
    return Person.objects.get(person_id=person_id)


def _content(response: Any) -> bytes:
    return b"".join(response.streaming_content)


def test_the_person_page_shows_identities_and_what_is_stored_and_is_audited(staff: Client):
    ann = person(WorkspaceFactory.create(), "telegram", "tg-ann")
    page = staff.get(reverse("admin:people_person_change", args=[ann.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "tg-ann" in text
    assert "Download everything stored about them (zip)" in text
    assert PersonAudit.objects.filter(person_id=ann.person_id, action="viewed").exists()

    download = staff.get(reverse("admin:people_person_export", args=[ann.pk]))
    archive = zipfile.ZipFile(io.BytesIO(_content(download)))
    assert json.loads(archive.read("person.json"))["identities"][0]["actor_id"] == "tg-ann"


def test_adding_an_identity_links_it_and_brings_its_person_along(staff: Client):
    workspace = WorkspaceFactory.create()
    ann, other = person(workspace, "telegram", "tg-ann"), person(workspace, "slack", "U-ANN")
    url = reverse("admin:people_person_change", args=[ann.pk])
    form = {
        "workspace": workspace.pk,
        "display_name": "Ann",
        "identities-TOTAL_FORMS": "2",
        "identities-INITIAL_FORMS": "1",
        "identities-MIN_NUM_FORMS": "0",
        "identities-MAX_NUM_FORMS": "1000",
        "identities-0-id": str(ann.identities.get().pk),
        "identities-0-person": str(ann.pk),
        "identities-1-channel": "slack",
        "identities-1-actor_type": "user",
        "identities-1-actor_id": "U-ANN",
        "identities-1-actor_name": "",
        "identities-1-person": str(ann.pk),
    }
    response = staff.post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert set(PersonIdentity.objects.filter(person=ann).values_list("channel", flat=True)) == {"telegram", "slack"}
    assert not Person.objects.filter(pk=other.pk).exists()


def test_merge_and_erase_actions(staff: Client):
    workspace = WorkspaceFactory.create()
    one, two, three = (person(workspace, c, a) for c, a in (("telegram", "1"), ("slack", "2"), ("line", "3")))
    changelist = reverse("admin:people_person_changelist")
    staff.post(changelist, {"action": "merge_persons", "_selected_action": [one.pk, two.pk]})
    assert set(one.identities.values_list("channel", flat=True)) == {"telegram", "slack"}

    confirm = staff.post(changelist, {"action": "erase_persons", "_selected_action": [three.pk]})
    assert confirm.status_code == 200
    assert "Yes, erase" in confirm.content.decode()
    assert Person.objects.filter(pk=three.pk).exists()
    staff.post(changelist, {"action": "erase_persons", "_selected_action": [three.pk], "confirmed": "yes"})
    assert not Person.objects.filter(pk=three.pk).exists()
    assert PersonAudit.objects.filter(person_id=three.person_id, action="erased").exists()
