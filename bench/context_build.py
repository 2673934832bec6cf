"""Context build time with 10 vs 100,000 prior items in the conversation (docs/operations.md, "Performance targets":
ratio ≤ 1.2).

Two conversations in one scratch database: one with 10 prior transcript items, one with 100,000
(bulk-loaded with `generate_series`). Timed, alternating between them, is the path a worker takes for every
run it claims: `run_claim` — the one statement that loads the queued run with everything its context needs
(including the context handles), `context_build` with those handles and the runner's `recent_tail`
bootstrap (the last 10 items inlined: as many as the small conversation has, so both inline the same),
and the claim update with the state snapshot. One queued run per sample. Also `context_build` alone, as
the worker calls it (handles given, state read by the claim).
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import timedelta

from bench._hostapi import django_on_scratch_database, drop_scratch_database, median
from bench._report import percentile, print_table

SAMPLES = 300


def main() -> None:
    django_on_scratch_database("hostapi_bench_context")
    from django.db import connection
    from django.utils import timezone

    from bindings.models import AgentBinding, RunnerDescriptor, Workspace
    from runners.models import Run
    from runners.orchestrator.admission import run_claim
    from runners.orchestrator.context import context_build
    from transcripts.models import EventLog, TranscriptItem

    workspace = Workspace.objects.create(slug="bench", name="bench")
    manifest = {
        "id": "plugin:bench/ctx/default",
        "name": "default",
        "label": {"en_US": "ctx"},
        "permissions": {"history": ["page", "search"], "events": ["get", "page"]},
        "context": {
            "supports_history_pull": True,
            "ownership": "host_bootstrap",
            "bootstrap": "recent_tail",
            "max_inline_events": 10,
            "max_inline_bytes": 16384,
        },
    }
    descriptor = RunnerDescriptor.objects.create(
        runner_id="plugin:bench/ctx/default", plugin_author="bench", plugin_name="ctx", runner_name="default",
        manifest=manifest, manifest_sha256=hashlib.sha256(json.dumps(manifest).encode()).hexdigest(),
    )  # fmt: skip
    binding = AgentBinding.objects.create(
        workspace=workspace, binding_id="b", scope_type="workspace", scope_id="bench",
        event_types=["message.received"], runner_id=descriptor.runner_id, concurrency_policy="parallel",
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

    def queued(prior: tuple[Run, EventLog]) -> str:
        run, event = prior
        return str(
            Run.objects.create(
                workspace=workspace, event=event, binding=binding, binding_key="b", runner_id=descriptor.runner_id,
                conversation_id=run.conversation_id,
            ).run_id
        )  # fmt: skip

    def claim(run_id: str) -> float:
        started = time.perf_counter()
        claimed = run_claim(run_id=run_id, owner="bench", lease_seconds=60)
        elapsed = (time.perf_counter() - started) * 1000
        assert claimed is not None, "the run was not claimed"
        return elapsed

    def build(prior: tuple[Run, EventLog]) -> float:
        run, event = prior
        handles = (
            TranscriptItem.objects.filter(event=event).values_list("id", flat=True).first(),
            TranscriptItem.objects.filter(conversation_id=run.conversation_id, event__isnull=True)
            .order_by("-id").values_list("id", flat=True).first(),
        )  # fmt: skip
        started = time.perf_counter()
        built = context_build(
            run=run, event=event, binding=binding, descriptor=descriptor, deadline_at=timezone.now() + timedelta(60),
            handles=handles, read_state=False,
        )  # fmt: skip
        elapsed = (time.perf_counter() - started) * 1000
        assert built.context.bootstrap is not None, "no recent_tail bootstrap was built"
        return elapsed

    for _ in range(20):
        claim(queued(small))
        claim(queued(large))
        build(small)
        build(large)
    claims: dict[str, list[float]] = {"small": [], "large": []}
    builds: dict[str, list[float]] = {"small": [], "large": []}
    for _ in range(SAMPLES):
        for name, prior in (("small", small), ("large", large)):
            run_id = queued(prior)
            claims[name].append(claim(run_id))
            builds[name].append(build(prior))
    rows: list[tuple[str, str, str]] = []
    for label, samples in (("claim (load + context build + claim)", claims), ("context_build alone", builds)):
        ratio = median(samples["large"]) / median(samples["small"])
        rows += [
            (f"{label}, 10 prior items, p50", f"{median(samples['small']):.2f} ms", ""),
            (f"{label}, 10 prior items, p99", f"{percentile(samples['small'], 99):.2f} ms", ""),
            (f"{label}, 100,000 prior items, p50", f"{median(samples['large']):.2f} ms", ""),
            (f"{label}, 100,000 prior items, p99", f"{percentile(samples['large'], 99):.2f} ms", ""),
            (f"{label}, ratio of medians (100,000 / 10)", f"{ratio:.2f}", "≤ 1.2"),
        ]
    print_table(rows)
    drop_scratch_database()


if __name__ == "__main__":
    main()
