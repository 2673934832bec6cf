"""`artifacts.open_stream` of a 1 GiB artifact: throughput (MB/s) and peak RSS.

A 1 GiB artifact is written to a scratch `file://` storage; the host's `artifact_stream` handler then
streams it in 1 MiB chunks exactly as it serves a runner (storage reads in a thread, base64, the
`ArtifactStreamChunk` projection), while a sampler records this process's RSS. Constant memory means
the peak stays a few chunk sizes above the baseline, not near 1 GiB.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import tempfile
import threading
import time

from bench._hostapi import django_on_scratch_database, drop_scratch_database
from bench._report import print_table

SIZE = 1024**3
CHUNK = 1024**2


def main() -> None:
    storage_dir = tempfile.mkdtemp(prefix="langbot-bench-artifacts-")
    os.environ["ARTIFACT_STORAGE_URL"] = f"file://{storage_dir}"
    django_on_scratch_database("hostapi_bench_artifacts")
    import psutil
    from django.core.files.base import File

    from artifacts.models import Artifact
    from artifacts.services import artifact_create_from_chunks
    from bindings.models import Workspace
    from hostapi.artifacts import _chunks

    try:
        workspace = Workspace.objects.create(slug="bench", name="bench")
        source = os.path.join(storage_dir, "source.bin")
        block = os.urandom(CHUNK)
        with open(source, "wb") as out:
            for _ in range(SIZE // CHUNK):
                out.write(block)
        with open(source, "rb") as handle:
            artifact = artifact_create_from_chunks(
                workspace=workspace, chunks=iter(lambda: handle.read(CHUNK), b""), name="big.bin",
                mime_type="application/octet-stream", conversation_id="c", source=Artifact.Source.UPLOAD,
                content=File(handle),
            )  # fmt: skip
        os.remove(source)

        process = psutil.Process()
        baseline = process.memory_info().rss
        peak = baseline
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, process.memory_info().rss)
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()

        async def drain() -> int:
            received = 0
            async for chunk in _chunks(artifact, 0, CHUNK):
                received += len(base64.b64decode(chunk["data_base64"]))
            return received

        started = time.perf_counter()
        received = asyncio.run(drain())
        elapsed = time.perf_counter() - started
        done.set()
        sampler.join()
        assert received == SIZE, received
        print_table(
            [
                ("artifact size", "1 GiB", ""),
                ("open_stream throughput (1 MiB chunks, incl. base64)", f"{SIZE / elapsed / 1e6:.0f} MB/s", ""),
                ("RSS before streaming", f"{baseline / 2**20:.0f} MiB", ""),
                ("peak RSS while streaming", f"{peak / 2**20:.0f} MiB", "constant (≪ 1 GiB)"),
                ("peak RSS growth", f"{(peak - baseline) / 2**20:.1f} MiB", "a few chunks"),
            ]
        )
    finally:
        drop_scratch_database()
        shutil.rmtree(storage_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
