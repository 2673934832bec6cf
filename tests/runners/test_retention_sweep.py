"""The daily retention sweep (issue 22): expired and too-old artifacts with their blobs, orphan blobs left by
rolled-back transactions, result events of long-finished runs and old proxy audit rows go, per workspace
and in batches; what a live run or a knowledge document still uses stays; the counts show in admin."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from resources.models import KnowledgeBase, KnowledgeDocument
from runners.lifecycle.retention import retention_sweep
from runners.models import ProxyCallAudit, Run, RunEvent
from tests.factories import UserFactory, WorkspaceFactory
from tests.streaming.conftest import make_run
from transcripts.models import RetentionPurge

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


def _artifact(workspace, *, expires_in: timedelta | None = None, source: str = "upload", **extra) -> Artifact:
    expires_at = timezone.now() + expires_in if expires_in is not None else None
    return artifact_create_from_bytes(
        workspace=workspace, data=b"bytes", name="a.txt", mime_type="text/plain", conversation_id="c",
        source=source, expires_at=expires_at, **extra,
    )  # fmt: skip


def _blob(artifact_dir: Path, artifact: Artifact) -> Path:
    return artifact_dir / artifact.storage_key


def _counts(sweep: list[RetentionPurge]) -> dict[tuple[str | None, str], int]:
    return {(row.workspace.slug if row.workspace else None, row.kind): row.count for row in sweep}


def test_expired_artifacts_go_with_their_blobs_and_live_ones_stay(artifact_dir, django_capture_on_commit_callbacks):
    workspace = WorkspaceFactory.create(slug="acme")
    expired = _artifact(workspace, expires_in=-DAY)
    fresh = _artifact(workspace, expires_in=DAY)
    forever = _artifact(workspace)

    with django_capture_on_commit_callbacks(execute=True):
        sweep = retention_sweep()

    assert set(Artifact.objects.values_list("pk", flat=True)) == {fresh.pk, forever.pk}
    assert not _blob(artifact_dir, expired).exists()
    assert _blob(artifact_dir, fresh).exists()
    assert _counts(sweep) == {("acme", "artifacts"): 1}


def test_an_artifact_a_live_run_or_a_knowledge_document_uses_is_kept(settings, django_capture_on_commit_callbacks):
    settings.LANGBOT_RETENTION_ARTIFACT_DAYS = 1
    workspace = WorkspaceFactory.create()
    running = make_run(workspace, status=Run.Status.RUNNING)
    ended = make_run(workspace, status=Run.Status.COMPLETED)
    of_live_run = _artifact(workspace, expires_in=-DAY, source="runner", run_id=running.run_id)
    of_live_event = _artifact(workspace, expires_in=-DAY, event=running.event)
    of_ended_run = _artifact(workspace, expires_in=-DAY, source="runner", run_id=ended.run_id)
    document_file = _artifact(workspace)
    kb = KnowledgeBase.objects.create(workspace=workspace, kb_id="kb", name="kb")
    KnowledgeDocument.objects.create(workspace=workspace, knowledge_base=kb, name="d", artifact=document_file)

    with django_capture_on_commit_callbacks(execute=True):
        retention_sweep(now=timezone.now() + 2 * DAY)

    kept = set(Artifact.objects.values_list("pk", flat=True))
    assert kept == {of_live_run.pk, of_live_event.pk, document_file.pk}
    assert of_ended_run.pk not in kept


def test_artifact_days_apply_per_workspace(settings, django_capture_on_commit_callbacks):
    settings.LANGBOT_RETENTION_ARTIFACT_DAYS = 0
    settings.LANGBOT_RETENTION_WORKSPACES = {"short": {"artifact_days": 1}}
    short, long = WorkspaceFactory.create(slug="short"), WorkspaceFactory.create(slug="long")
    _artifact(short)
    kept = _artifact(long)

    with django_capture_on_commit_callbacks(execute=True):
        sweep = retention_sweep(now=timezone.now() + 2 * DAY)

    assert list(Artifact.objects.values_list("pk", flat=True)) == [kept.pk]
    # (Here the test's transaction holds back the blob deletions, which the orphan pass then also sees.)
    assert {key: n for key, n in _counts(sweep).items() if key[1] == "artifacts"} == {("short", "artifacts"): 1}


def test_a_blob_written_by_a_rolled_back_transaction_is_removed_after_the_grace_period(artifact_dir, settings):
    settings.LANGBOT_RETENTION_ORPHAN_GRACE_HOURS = 24
    workspace = WorkspaceFactory.create(slug="acme")
    kept = _artifact(workspace)
    orphan = None
    try:
        with transaction.atomic():
            orphan = _artifact(workspace)
            raise RuntimeError("the request failed after the upload was stored")
    except RuntimeError:
        pass
    assert orphan is not None
    orphan_blob = _blob(artifact_dir, orphan)
    assert orphan_blob.exists()
    assert not Artifact.objects.filter(pk=orphan.pk).exists()

    young = retention_sweep()
    assert orphan_blob.exists()  # its transaction might still be open: within the grace period

    day_old = (timezone.now() - 2 * DAY).timestamp()
    os.utime(orphan_blob, (day_old, day_old))
    os.utime(_blob(artifact_dir, kept), (day_old, day_old))
    sweep = retention_sweep()

    assert not orphan_blob.exists()
    assert _blob(artifact_dir, kept).exists()
    assert _counts(young) == {}
    assert _counts(sweep) == {("acme", "orphan_blobs"): 1}


def test_run_events_of_long_finished_runs_go_in_batches(settings):
    settings.LANGBOT_RETENTION_RUN_EVENT_DAYS = 30
    settings.LANGBOT_RETENTION_BATCH = 2
    workspace = WorkspaceFactory.create(slug="acme")
    old, recent, running = (
        make_run(workspace, status=Run.Status.COMPLETED),
        make_run(workspace, status=Run.Status.FAILED),
        make_run(workspace, status=Run.Status.RUNNING),
    )
    Run.objects.filter(pk=old.pk).update(finished_at=timezone.now() - 31 * DAY)
    Run.objects.filter(pk=recent.pk).update(finished_at=timezone.now() - 29 * DAY)
    for run in (old, recent, running):
        RunEvent.objects.bulk_create([RunEvent(run=run, seq=seq, type="message.delta", data={}) for seq in range(1, 6)])

    sweep = retention_sweep()

    assert RunEvent.objects.filter(run=old).count() == 0
    assert RunEvent.objects.filter(run=recent).count() == 5
    assert RunEvent.objects.filter(run=running).count() == 5
    assert Run.objects.filter(pk=old.pk).exists()  # the run row, its output and usage stay
    assert _counts(sweep) == {("acme", "run_events"): 5}


def test_old_proxy_audit_rows_go_per_workspace(settings):
    settings.LANGBOT_RETENTION_PROXY_AUDIT_DAYS = 30
    settings.LANGBOT_RETENTION_WORKSPACES = {"keeper": {"proxy_audit_days": 0}}
    acme, keeper = WorkspaceFactory.create(slug="acme"), WorkspaceFactory.create(slug="keeper")
    now = timezone.now()

    def audit(workspace_id, age):
        return ProxyCallAudit.objects.create(
            run_id="r", workspace_id=workspace_id, action="state_get", outcome="ok", created_at=now - age
        )

    audit(acme.pk, 31 * DAY)
    recent = audit(acme.pk, 29 * DAY)
    kept = audit(keeper.pk, 365 * DAY)
    audit(None, 31 * DAY)  # a refusal no run could be named for

    sweep = retention_sweep()

    assert set(ProxyCallAudit.objects.values_list("pk", flat=True)) == {recent.pk, kept.pk}
    assert _counts(sweep) == {("acme", "proxy_audit"): 1, (None, "proxy_audit"): 1}


def test_a_second_sweep_finds_nothing_left_to_remove(django_capture_on_commit_callbacks):
    _artifact(WorkspaceFactory.create(), expires_in=-DAY)
    with django_capture_on_commit_callbacks(execute=True):
        retention_sweep()

    assert retention_sweep() == []


def test_the_counts_show_in_admin_and_the_sweep_runs_daily_from_beat(client, settings):
    from runners.tasks import retention_sweep as task

    workspace = WorkspaceFactory.create(slug="acme")
    _artifact(workspace, expires_in=-DAY)
    retention_sweep()
    client.force_login(UserFactory.create(is_staff=True, is_superuser=True))

    page = client.get("/admin/transcripts/retentionpurge/").content.decode()

    assert "acme" in page
    assert "artifacts (expired or past their retention)" in page
    entry = settings.CELERY_BEAT_SCHEDULE["retention-sweep"]
    assert entry["task"] == task.name
    assert entry["schedule"].is_due(timezone.now() - 2 * DAY).is_due
