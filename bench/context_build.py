"""Context build time with 10 vs 100,000 prior items in the conversation (DESIGN §6: ratio ≤ 1.2).

Two conversations in one scratch database: one with 10 prior transcript items, one with 100,000
(bulk-loaded with `generate_series`); `context_build` (what a worker does for every run it claims:
manifest, policies, resources, cursors, state snapshot) is timed for a run of each, alternating.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import timedelta

from bench._hostapi import django_on_scratch_database, drop_scratch_database, median
from bench._report import percentile, print_table

SAMPLES = 500


def main() -> None:
    django_on_scratch_database("hostapi_bench_context")
    from django.db import connection
    from django.utils import timezone

    from bindings.models import AgentBinding, RunnerDescriptor, Workspace
    from runners.models import Run
    from runners.orchestrator.context import context_build
    from transcripts.models import EventLog, TranscriptItem

    workspace = Workspace.objects.create(slug="bench", name="bench")
    manifest = {
        "id": "plugin:bench/ctx/default",
        "name": "default",
        "label": {"en_US": "ctx"},
        "permissions": {"history": ["page", "search"], "events": ["get", "page"]},
        "context": {"supports_history_pull": True},
    }
    descriptor = RunnerDescriptor.objects.create(
        runner_id="plugin:bench/ctx/default", plugin_author="bench", plugin_name="ctx", runner_name="default",
        manifest=manifest, manifest_sha256=hashlib.sha256(json.dumps(manifest).encode()).hexdigest(),
    )  # fmt: skip
    binding = AgentBinding.objects.create(
        workspace=workspace, binding_id="b", scope_type="workspace", scope_id="bench",
        event_types=["message.received"], runner_id=descriptor.runner_id,
    )  # fmt: skip
    table = TranscriptItem._meta.db_table

    def conversation(name: str, prior: int) -> tuple[Run, EventLog]:
        with connection.cursor() as cursor:
            cursor.execute(
                f"""INSERT INTO {table} (workspace_id, conversation_id, thread_id, role, content, contents,
                                         artifacts, runner_id, created_at)
                    SELECT %s, %s, '', 'user', 'prior ' || g, '[]', '[]', '', now()
                    FROM generate_series(1, %s) AS g""",
                [workspace.pk, name, prior],
            )
        event = EventLog.objects.create(
            workspace=workspace, event_id=f"e-{name}", event_type="message.received", source="api",
            conversation_id=name, actor={"actor_type": "user", "actor_id": "u"}, input={"text": "now"},
        )  # fmt: skip
        TranscriptItem.objects.create(
            workspace=workspace, conversation_id=name, role="user", content="now", event=event
        )
        run = Run.objects.create(
            workspace=workspace, event=event, binding=binding, binding_key="b", runner_id=descriptor.runner_id,
            conversation_id=name,
        )  # fmt: skip
        return run, event

    small = conversation("small", 10)
    large = conversation("large", 100_000)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}")

    def build(run: Run, event: EventLog) -> float:
        started = time.perf_counter()
        context_build(
            run=run, event=event, binding=binding, descriptor=descriptor, deadline_at=timezone.now() + timedelta(60)
        )
        return (time.perf_counter() - started) * 1000

    for _ in range(50):
        build(*small)
        build(*large)
    times_small: list[float] = []
    times_large: list[float] = []
    for _ in range(SAMPLES):
        times_small.append(build(*small))
        times_large.append(build(*large))
    ratio = median(times_large) / median(times_small)
    print_table(
        [
            ("context build, 10 prior items, p50", f"{median(times_small):.2f} ms", ""),
            ("context build, 10 prior items, p99", f"{percentile(times_small, 99):.2f} ms", ""),
            ("context build, 100,000 prior items, p50", f"{median(times_large):.2f} ms", ""),
            ("context build, 100,000 prior items, p99", f"{percentile(times_large, 99):.2f} ms", ""),
            ("ratio of medians (100,000 / 10)", f"{ratio:.2f}", "≤ 1.2"),
        ]
    )
    drop_scratch_database()


if __name__ == "__main__":
    main()
