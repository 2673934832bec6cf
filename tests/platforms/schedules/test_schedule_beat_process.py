"""A real `celery beat` with the DatabaseScheduler (as `make run` starts it) and the session's real worker:
a missed tick is sent at beat's start, its event runs the qa-runner with `source: scheduler`, and a beat
killed and started again, which sends that tick once more, posts nothing more."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from platforms.schedules.services import schedule_create
from platforms.schedules.specs import ScheduleIn
from runners.models import Run
from tests.processes import REPO_ROOT, _host_env, wait_terminal
from transcripts.models import EventLog

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# `Procfile`'s beat, logging to a file of the test.
BEAT_ARGV = [
    sys.executable, "-m", "celery", "-A", "langbot_host", "beat", "--loglevel", "INFO",
    "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler",
]  # fmt: skip


@pytest.fixture
def start_beat(celery_queue, tmp_path: Path) -> Iterator[Callable[[], tuple[subprocess.Popen[bytes], Path]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start() -> tuple[subprocess.Popen[bytes], Path]:
        log_path = tmp_path / f"beat-{len(started)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                BEAT_ARGV, cwd=REPO_ROOT, env=_host_env(celery_queue), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        started.append(process)
        return process, log_path

    yield start
    for process in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


# What the worker logs when it has handled one send of a schedule's tick.
FIRE_DONE = re.compile(r"platforms\.schedules\.tasks\.schedule_fire\[[^\]]+\] succeeded")


def wait_for(condition: Callable[[], object], what: str, log_path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout}s; beat log:\n{log_path.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)


def test_beat_sends_a_missed_tick_once_across_a_killed_restart_and_it_runs_the_qa_runner(
    worker, qa_binding, start_beat
):
    # Given an hourly schedule of a qa-runner binding whose last run beat recorded two hours ago (it was down)
    now = timezone.now()
    if now.minute == 59 and now.second > 30:
        time.sleep(61 - now.second)  # keep both beats within one hour's tick
    tick = timezone.now().replace(minute=0, second=0, microsecond=0)
    binding = qa_binding(binding_id="hourly")
    schedule = schedule_create(
        workspace=binding.workspace,
        spec=ScheduleIn(schedule_id="hourly", cron="0 * * * *", binding_id="hourly", input_text="qa:echo_context"),
    )
    missed_since = timezone.now() - datetime.timedelta(hours=2)
    PeriodicTask.objects.filter(pk=schedule.periodic_task_id).update(last_run_at=missed_since)
    task_name = f"schedule:{schedule.pk}"

    # When beat starts, it sends the missed tick at once, and the worker posts it
    beat, log_path = start_beat()
    wait_for(lambda: task_name in log_path.read_text(errors="replace"), "beat sent no tick", log_path)
    wait_for(lambda: Run.objects.filter(binding_key="hourly").exists(), "no run", log_path)
    handled = len(FIRE_DONE.findall(worker.log()))
    # ...and beat is killed before it recorded the send, and started again. (It records its sends within
    # seconds, whenever its schedule changes; what it recorded is put back as a kill a moment earlier
    # would have left it.)
    os.killpg(beat.pid, signal.SIGKILL)
    beat.wait(10)
    PeriodicTask.objects.filter(pk=schedule.periodic_task_id).update(last_run_at=missed_since)
    _, second_log = start_beat()
    wait_for(lambda: task_name in second_log.read_text(errors="replace"), "the restarted beat sent nothing", second_log)
    wait_for(lambda: len(FIRE_DONE.findall(worker.log())) > handled, "the worker took no second send", second_log)

    # Then the tick it sent again posted nothing: one event of the tick, one run, and it ran the qa-runner
    # with the event's source
    [event] = EventLog.objects.filter(workspace=binding.workspace, source="scheduler")
    assert event.event_time == tick
    [run] = Run.objects.filter(event=event)
    run = wait_terminal(run)
    assert run.status == Run.Status.COMPLETED, run.error
    context = json.loads(run.output)
    assert context["trigger"]["source"] == "scheduler"
    assert context["event"]["source"] == "scheduler"
    assert context["event"]["event_id"] == event.event_id
    assert Run.objects.filter(binding_key="hourly").count() == 1
