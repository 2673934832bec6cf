"""Where the web process's CPU per `POST /api/v1/events` goes (issue 19): the same request, in this process,
through Django's test client (WSGI-like, no ASGI) and through the ASGI application daphne serves
(`langbot_host.asgi.application`, called with an asgiref scope/receive/send, no server). No target of its
own: the difference between the two rows is the ASGI path's cost.

No worker runs: each event's run is published to a scratch queue nobody reads and stays queued, as the
HTTP benchmarks' runs do until a worker takes them. Authentication is an API key in `Authorization`, as a
user's client sends it. `--profile` adds the top entries of a cProfile of the ASGI rows.

Needs DATABASE_URL=postgres://... and Redis (`bench/_host.py`); exits 1 when it could not measure.
Usage: `python -m bench.asgi_cost [--requests N] [--rounds R] [--profile]`.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from bench._host import environment_or_exit, recreate_database
from bench._report import print_grid

PATH = "/api/v1/events"
# A path no route matches: the same middleware, no view, no database; what the ASGI path costs by itself.
MISSING = "/bench-no-such-page/"


def _setup() -> str:
    from django.db import close_old_connections

    from bindings.services import api_key_create
    from tests.factories import AgentBindingFactory, WorkspaceFactory

    try:
        workspace = WorkspaceFactory.create(slug="bench-asgi")
        AgentBindingFactory.create(
            workspace=workspace, binding_id="bench", runner_id="plugin:langbot/qa-runner/default"
        )
        _, key = api_key_create(workspace=workspace)
        return key
    finally:
        close_old_connections()


def _body(index: int) -> bytes:
    return json.dumps({"conversation_id": f"c-{index % 50}", "input": {"text": "hello"}}).encode()


def _test_client_round(key: str, requests: int, profiler: cProfile.Profile | None = None) -> float:
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    started = time.process_time()
    if profiler:
        profiler.enable()
    for index in range(requests):
        answer = client.post(PATH, data=_body(index), content_type="application/json")
        if answer.status_code not in (200, 201, 202):
            raise SystemExit(f"not measured: test client answered {answer.status_code}: {answer.content[:300]!r}")
    if profiler:
        profiler.disable()
    return (time.process_time() - started) / requests


async def _asgi_post(app: Any, key: str, body: bytes, path: str = PATH) -> int:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", f"Bearer {key}".encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # a client that stays connected
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


def _test_client_missing(requests: int) -> float:
    from django.test import Client

    client = Client()
    started = time.process_time()
    for _ in range(requests):
        if client.get(MISSING).status_code != 404:
            raise SystemExit(f"not measured: {MISSING} did not answer 404 through the test client")
    return (time.process_time() - started) / requests


def _asgi_missing(app: Any, requests: int) -> float:
    async def many() -> float:
        started = time.process_time()
        for _ in range(requests):
            if await _asgi_post(app, "", b"{}", MISSING) != 404:
                raise SystemExit(f"not measured: {MISSING} did not answer 404 through the ASGI application")
        return (time.process_time() - started) / requests

    return asyncio.run(many())


def _asgi_round(app: Any, key: str, requests: int, profiler: cProfile.Profile | None = None) -> float:
    async def many() -> float:
        started = time.process_time()
        if profiler:
            profiler.enable()
        for index in range(requests):
            status = await _asgi_post(app, key, _body(index))
            if status not in (200, 201, 202):
                raise SystemExit(f"not measured: ASGI application answered {status}")
        if profiler:
            profiler.disable()
        return (time.process_time() - started) / requests

    return asyncio.run(many())


def _span(values: list[float]) -> str:
    return f"{min(values) * 1000:.2f}-{max(values) * 1000:.2f} ms"


def _profile_threads(profiles: list[cProfile.Profile]) -> None:
    """Profile every thread started from now on too (cProfile sees only the thread that enables it): the
    ASGI path runs the view on a new thread per request."""

    def first_call(frame: Any, event: str, arg: Any) -> None:
        profiler = cProfile.Profile(time.thread_time)
        profiles.append(profiler)
        profiler.enable()  # replaces this function as the thread's profile hook

    threading.setprofile(first_call)


def _top(profiles: list[cProfile.Profile], key: str, count: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profiles[0], stream=out)
    for profiler in profiles[1:]:
        stats.add(profiler)
    stats.strip_dirs().sort_stats(key).print_stats(count)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print the top cProfile entries of the ASGI path")
    parser.add_argument("--top", type=int, default=30, help="profile entries printed per sort order")
    args = parser.parse_args()

    env = environment_or_exit()
    os.environ.update(env)
    os.environ.setdefault("LANGBOT_GC_FREEZE", "false")
    recreate_database(env["DATABASE_URL"])
    import django

    django.setup()
    import logging

    from langbot_host.celery import app as celery_app

    celery_app.conf.task_default_queue = env["CELERY_TASK_DEFAULT_QUEUE"]

    logging.disable(logging.WARNING)
    from django.conf import settings

    from langbot_host.asgi import application

    if "testserver" not in settings.ALLOWED_HOSTS and "*" not in settings.ALLOWED_HOSTS:
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver", "127.0.0.1"]
    key = _setup()
    measures: list[tuple[str, Callable[[], float]]] = [
        (f"POST {PATH}, Django test client (no ASGI)", lambda: _test_client_round(key, args.requests)),
        (f"POST {PATH}, ASGI application in-process", lambda: _asgi_round(application, key, args.requests)),
        (f"GET {MISSING} (404), Django test client", lambda: _test_client_missing(args.requests)),
        (f"GET {MISSING} (404), ASGI application", lambda: _asgi_missing(application, args.requests)),
    ]
    _test_client_round(key, 50)  # warm up every path
    _asgi_round(application, key, 50)
    _test_client_missing(50)
    _asgi_missing(application, 50)
    results: dict[str, list[float]] = {name: [] for name, _ in measures}
    for _ in range(args.rounds):  # alternated, so that the machine's load moves every row alike
        for name, measure in measures:
            results[name].append(measure())
    print_grid(
        ["request", f"CPU per request (min-max over {args.rounds} rounds of {args.requests})"],
        [[name, _span(values)] for name, values in results.items()],
    )
    if args.profile:
        for name, measure_profiled in (
            ("the test client", lambda profiler: _test_client_round(key, args.requests, profiler)),
            ("the ASGI application", lambda profiler: _asgi_round(application, key, args.requests, profiler)),
        ):
            profiles = [cProfile.Profile(time.thread_time)]
            _profile_threads(profiles)
            measure_profiled(profiles[0])
            threading.setprofile(None)
            print(f"\ncProfile of {args.requests} requests through {name}, all threads, CPU time, by tottime:")
            print(_top(profiles, "tottime", args.top))
            print("by cumulative time:")
            print(_top(profiles, "cumulative", args.top))
    sys.stdout.flush()
    import redis

    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(env["CELERY_TASK_DEFAULT_QUEUE"])


if __name__ == "__main__":
    main()
