"""`history.page` at 1,000,000 transcript rows (docs/operations.md, "Performance targets": p99 ≤ 5 ms, cursor on an
index, no OFFSET).

Bulk-loads 1,000,000 TranscriptItem rows with `generate_series` — 900,000 in one conversation, the rest
spread over 1,000 others, interleaved in time as real conversations are — then times the handler's page
function (query + projection to the SDK's `HistoryPage`, as served to a runner) for backward and forward
pages of 50 from random cursors.
"""

from __future__ import annotations

import random
import time

from bench._hostapi import django_on_scratch_database, drop_scratch_database
from bench._report import percentile, print_table

ROWS = 1_000_000
SAMPLES = 2000


def main() -> None:
    django_on_scratch_database("hostapi_bench_history")
    from django.db import connection

    from bindings.models import Workspace
    from hostapi.history import _page
    from transcripts.models import TranscriptItem

    workspace = Workspace.objects.create(slug="bench", name="bench")
    table = TranscriptItem._meta.db_table
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {table} (workspace_id, conversation_id, thread_id, role, content, contents, artifacts,
                                     runner_id, created_at)
                SELECT %s, CASE WHEN g %% 10 <> 0 THEN 'big' ELSE 'c' || (g %% 1000) END, '',
                       CASE WHEN g %% 2 = 0 THEN 'user' ELSE 'assistant' END,
                       'message number ' || g || ' about the weather and the database', '[]', '[]', '', now()
                FROM generate_series(1, %s) AS g""",
            [workspace.pk, ROWS],
        )
        cursor.execute(f"ANALYZE {table}")
        cursor.execute(f"SELECT min(id), max(id) FROM {table} WHERE conversation_id = 'big'")
        low, high = cursor.fetchone()
    load_seconds = time.perf_counter() - started

    def page(*, before: int | None, after: int | None, forward: bool) -> float:
        t0 = time.perf_counter()
        result = _page(workspace_id=workspace.pk, conversation_id="big", thread_id=None, limit=50,
                       include_artifacts=False, before=before, after=after, forward=forward)  # fmt: skip
        elapsed = (time.perf_counter() - t0) * 1000
        assert len(result["items"]) == 50
        return elapsed

    rng = random.Random(7)
    for _ in range(100):  # warm the pool and caches
        page(before=None, after=None, forward=False)
    newest = [page(before=None, after=None, forward=False) for _ in range(SAMPLES)]
    backward = [page(before=rng.randint(low + 100, high), after=None, forward=False) for _ in range(SAMPLES)]
    forward = [page(before=None, after=rng.randint(low, high - 100), forward=True) for _ in range(SAMPLES)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"EXPLAIN SELECT id FROM {table} WHERE workspace_id = %s AND conversation_id = 'big' AND id < %s "
            "ORDER BY id DESC LIMIT 51",
            [workspace.pk, high - 1000],
        )
        plan = " ".join(row[0] for row in cursor.fetchall())
    uses_index = "Index" in plan and "Sort" not in plan

    print_table(
        [
            ("rows loaded (generate_series)", f"{ROWS:,} in {load_seconds:.1f} s", ""),
            ("page of 50, newest, p50", f"{percentile(newest, 50):.2f} ms", ""),
            ("page of 50, newest, p99", f"{percentile(newest, 99):.2f} ms", "≤ 5 ms"),
            ("page of 50, backward from random cursor, p50", f"{percentile(backward, 50):.2f} ms", ""),
            ("page of 50, backward from random cursor, p99", f"{percentile(backward, 99):.2f} ms", "≤ 5 ms"),
            ("page of 50, forward from random cursor, p50", f"{percentile(forward, 50):.2f} ms", ""),
            ("page of 50, forward from random cursor, p99", f"{percentile(forward, 99):.2f} ms", "≤ 5 ms"),
            ("plan: index scan, no sort/offset", "yes" if uses_index else f"no: {plan[:80]}", "yes"),
        ]
    )
    drop_scratch_database()


if __name__ == "__main__":
    main()
