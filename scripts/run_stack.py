#!/usr/bin/env python3
"""`make run`: prepare the LangBot Host stack, then let honcho run the processes of the `Procfile`.

Preparation, in the foreground: check that the web and runtime ports are free, decide whether Redis must
be started (nothing answers on a local REDIS_URL and `redis-server` is installed; otherwise say how to get
it), migrate, seed the demo, collect static files and generate the runtime token. Then honcho's manager
starts the Procfile's processes (the plugin runtime over WebSocket, daphne, a Celery worker, Celery beat,
Redis when needed, and `ready`) and prefixes and colours their output. The plugin runtime runs third-party
runner code, so when it dies (crash, OOM kill) it is started again after a backoff (0.5 s doubling to 10 s;
reset once it stayed up 30 s) while the rest keeps running: runs in flight fail with a retryable
`runtime_error`, later runs wait for it (LANGBOT_RUNTIME_RECONNECT_WAIT). On Ctrl-C or SIGTERM, or when any
other process exits, it stops them all with SIGTERM (the runtime and Redis last) and kills what is left
LANGBOT_STOP_GRACE seconds after the first one stopped. `ready` is this script again (`run_stack.py
ready`): it waits for /healthz, syncs the runner registry from the runtime, prints where things are and
the demo login, then waits to be stopped.

Environment (see `.env.example`; a `.env` file in the repository root is read too, without overriding
the real environment): PORT (web, default 8000; the runtime listens on PORT+1), HOST (web bind address,
default 127.0.0.1), REDIS_URL, LANGBOT_PLUGIN_DIRS, LANGBOT_RUNTIME_TOKEN (generated when unset),
LANGBOT_DEMO_PASSWORD, LANGBOT_STOP_GRACE (seconds, default 15), LANGBOT_START_TIMEOUT (seconds to wait
for /healthz, default 120), LANGBOT_BANNER_AGAIN (seconds after the "is up" banner to print it once more, past
the worker's and beat's start-up lines; default 20, 0: once only).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import multiprocessing
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import honcho.manager  # type: ignore[import-untyped]
from honcho.environ import parse_procfile  # type: ignore[import-untyped]
from honcho.printer import Message, Printer  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# The one allowlist of what the plugin runtime may inherit (docs/security.md, "Runner code"); it runs third-party runner
# code.
from langbot_sdk.runtime.environment import runtime_environment  # noqa: E402

VAR = REPO / "var"
BIN = Path(sys.executable).parent
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# The longest name in the output ("migrate", "runtime"), so the prefixes line up from the first line.
NAME_WIDTH = 7
# seed_demo prints "admin login: <user> / <password>" (or a note that an existing password is unchanged).
LOGIN_RE = re.compile(r"login:\s*(?P<login>.+)$")
DEMO_LOGIN_ENV = "LANGBOT_DEMO_LOGIN"
# honcho reports a stop it was asked for with these statuses (128 + SIGINT, 128 + SIGTERM).
STOPPED_BY_SIGNAL = {130, 143}


class StackError(Exception):
    """A preparation step failed; the message says what and how to fix it."""


class _RestartingEvents:
    """The queue honcho's loop reads process events from, except that the exit of a restartable process
    (while the stack is not stopping) becomes a line saying so and a restart, instead of the `stop` event
    that would make honcho stop everything. The processes themselves write to the real queue."""

    def __init__(self, manager: ServicesLastManager, queue: Any) -> None:
        self._manager = manager
        self._queue = queue

    def put(self, message: Message) -> None:
        self._queue.put(message)

    def get(self, timeout: float | None = None) -> Message:
        message = self._queue.get(timeout=timeout)
        if message.type == "stop" and message.name in self._manager.RESTARTED:
            return self._manager.restart_later(message)
        return message


class ServicesLastManager(honcho.manager.Manager):
    """honcho's manager, except that a stop sends SIGTERM to the runtime and Redis only once the other
    processes have exited: runs in flight then finish during the worker's shutdown grace instead of losing
    the runtime under them (measured: a run 1 s into a 3 s runner completed; stopped all at once, it failed);
    and that the plugin runtime is restarted when it exits on its own instead of stopping the stack."""

    SERVICES = ("runtime", "redis")
    RESTARTED = ("runtime",)
    RESTART_BACKOFF_FIRST = 0.5
    RESTART_BACKOFF_MAX = 10.0
    # A process that stayed up this long was not crash-looping: its next restart starts from the first delay.
    RESTART_STABLE_SECONDS = 30.0

    def __init__(self, printer: Printer) -> None:
        super().__init__(printer)
        self._stopping = False
        self._queue: Any = self.events
        self.events: Any = _RestartingEvents(self, self._queue)
        self._backoff: dict[str, float] = {}
        self._started_at: dict[str, float] = {}

    def _start(self) -> None:
        # As honcho's, but the processes get the real queue (the wrapper only filters what the loop reads).
        for name, process in self._processes.items():
            self._spawn(name, process)

    def _spawn(self, name: str, process: dict[str, Any]) -> None:
        process["process"] = multiprocessing.Process(name=name, target=process["obj"].run, args=(self._queue, True))
        self._started_at[name] = time.monotonic()
        process["process"].start()

    def restart_later(self, stop: Message) -> Message:
        """Called by the loop's read for the exit of a restartable process: pass the exit through when the
        stack is stopping, otherwise start the process again after the backoff and say so."""
        name, returncode = stop.name, stop.data["returncode"]
        if self._stopping:
            return stop
        delay = self._backoff.get(name, self.RESTART_BACKOFF_FIRST)
        if time.monotonic() - self._started_at.get(name, 0.0) >= self.RESTART_STABLE_SECONDS:
            delay = self.RESTART_BACKOFF_FIRST
        self._backoff[name] = min(delay * 2, self.RESTART_BACKOFF_MAX)
        threading.Thread(target=self._restart, args=(stop, delay), name=f"restart-{name}", daemon=True).start()
        text = f"{name} exited with status {returncode}; restarting it in {delay:.1f} s\n"
        return Message("line", text, datetime.datetime.now(), honcho.manager.SYSTEM_PRINTER_NAME, None)

    def _restart(self, stop: Message, delay: float) -> None:
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and not self._stopping:
            time.sleep(0.05)
        if self._stopping:
            # Stopped meanwhile: report the exit, so that the loop sees every process ended.
            self._queue.put(stop)
            return
        self._spawn(stop.name, self._processes[stop.name])

    def terminate(self) -> None:
        # Called by honcho's loop (from its signal handler too) on SIGINT/SIGTERM and when a process exits.
        if not self._stopping:
            self._stopping = True
            threading.Thread(target=self._stop_in_order, name="stop-in-order", daemon=True).start()

    def _stop_in_order(self) -> None:
        hosts = [name for name in self._processes if name not in self.SERVICES]
        self._send_sigterm(hosts)
        # Past the grace, honcho's loop SIGKILLs whatever is left, services included.
        while any("returncode" not in self._processes[name] for name in hosts):
            time.sleep(0.1)
        self._send_sigterm([name for name in self.SERVICES if name in self._processes])

    def _send_sigterm(self, names: list[str]) -> None:
        for name in names:
            process = self._processes[name]
            while "pid" not in process:  # honcho's loop records it moments after the start
                time.sleep(0.05)
            if "returncode" in process:
                continue
            # Through the queue honcho's loop prints from, so that lines from this thread do not interleave.
            self.events.put(Message("line", f"sending SIGTERM to {name}", datetime.datetime.now(), "system", None))
            self._procmgr.terminate(process["pid"])


class Stack:
    """The stack as this environment configures it: ports, Redis, token, and each process's environment."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.port = _int_env(env, "PORT", 8000)
        self.runtime_port = self.port + 1
        self.host = env.get("HOST") or "127.0.0.1"
        self.grace = float(env.get("LANGBOT_STOP_GRACE") or 15)
        self.start_timeout = float(env.get("LANGBOT_START_TIMEOUT") or 120)
        self.banner_again = float(env.get("LANGBOT_BANNER_AGAIN") or 20)
        self.redis_url = env.get("REDIS_URL") or DEFAULT_REDIS_URL
        self.token = env.get("LANGBOT_RUNTIME_TOKEN") or secrets.token_urlsafe(32)
        self.printer = Printer(sys.stdout, colour=not env.get("NO_COLOR"), width=NAME_WIDTH)

    # -- environments --------------------------------------------------------------------------

    def host_env(self) -> dict[str, str]:
        # `run` says it once (`note_encryption_keys`); the processes then keep quiet about it.
        noted = {} if self.env.get("LANGBOT_ENCRYPTION_KEYS") else {"LANGBOT_ENCRYPTION_KEYS_NOTED": "1"}
        return {
            **self.env,
            **noted,
            "DJANGO_SETTINGS_MODULE": self.env.get("DJANGO_SETTINGS_MODULE") or "langbot_host.settings",
            "PYTHONUNBUFFERED": "1",
            "HOST": self.host,
            "PORT": str(self.port),
            "LANGBOT_RUNTIME_URL": f"ws://127.0.0.1:{self.runtime_port}",
            "LANGBOT_RUNTIME_TOKEN": self.token,
        }

    def runtime_env(self) -> dict[str, str]:
        return runtime_environment(
            self.env, PYTHONUNBUFFERED="1", LANGBOT_RUNTIME_TOKEN=self.token, PORT=str(self.runtime_port)
        )

    def redis_env(self) -> dict[str, str]:
        url = urllib.parse.urlsplit(self.redis_url)
        env = {**self.env, "PORT": str(url.port or 6379)}
        if url.password:
            env["REDIS_PASSWORD"] = urllib.parse.unquote(url.password)
        return env

    # -- preparation ---------------------------------------------------------------------------

    def say(self, text: str, name: str = "run") -> None:
        self.printer.write(Message("line", text, datetime.datetime.now(), name, None))

    def check_ports_free(self) -> None:
        for host, port, what in ((self.host, self.port, "web"), ("127.0.0.1", self.runtime_port, "runtime")):
            if not _port_free(host, port):
                raise StackError(
                    f"port {port} on {host} ({what}) is already in use — is another `make run` up? "
                    f"Choose another with PORT=<n> (the runtime uses PORT+1)."
                )

    def redis_must_start(self) -> bool:
        """False when Redis answers, True when `make run` should start it; raises when it cannot."""
        state = _redis_state(self.redis_url)
        if state == "ok":
            self.say(f"Redis answers at {_redact(self.redis_url)}")
            return False
        if state != "down":
            raise StackError(f"Redis at {_redact(self.redis_url)} answers but is unusable: {state}")
        url = urllib.parse.urlsplit(self.redis_url)
        if url.scheme != "redis" or url.hostname not in {"127.0.0.1", "localhost", "::1"}:
            raise StackError(
                f"Redis at {_redact(self.redis_url)} does not answer; start it or point REDIS_URL elsewhere."
            )
        if shutil.which("redis-server", path=self.env.get("PATH")) is None:
            raise StackError(
                f"Redis does not answer at {_redact(self.redis_url)} and `redis-server` is not installed.\n"
                "    Install it (Debian/Ubuntu: `sudo apt-get install redis-server`, macOS: "
                "`brew install redis`)\n    or point REDIS_URL at a running Redis."
            )
        if not _port_free("127.0.0.1", url.port or 6379):
            raise StackError(f"port {url.port or 6379} is taken by something that is not Redis; change REDIS_URL")
        self.say(f"Redis does not answer at {_redact(self.redis_url)}; it will run as `redis` below")
        return True

    def manage(self, name: str, *args: str) -> list[str]:
        """Run `manage.py <args>` to the end, its output prefixed with `name`; return its lines."""
        lines: list[str] = []
        with subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=self.host_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        ) as process:
            assert process.stdout is not None
            try:
                for line in process.stdout:
                    lines.append(line.rstrip("\n"))
                    self.say(lines[-1], name)
            except BaseException:
                process.kill()
                raise
        if process.returncode != 0:
            raise StackError(f"`manage.py {' '.join(args)}` failed with status {process.returncode}")
        return lines

    def note_encryption_keys(self) -> None:
        """Once for every process (each would log it at start otherwise: foundation/crypto.py)."""
        if not self.env.get("LANGBOT_ENCRYPTION_KEYS"):
            self.say(
                "note: LANGBOT_ENCRYPTION_KEYS is not set, so secrets are encrypted with a key derived from "
                "DJANGO_SECRET_KEY (fine on your own machine). For a deployment, set it (in .env) to a key made "
                'by `.venv/bin/python -c "from cryptography.fernet import Fernet; '
                'print(Fernet.generate_key().decode())"` before storing secrets.'
            )

    def metrics_reset(self) -> None:
        """Empty the metrics directory: its files are the counters of earlier processes (prometheus-client's
        multiprocess mode), which a new stack must not add to its own."""
        directory = Path(self.env.get("PROMETHEUS_MULTIPROC_DIR") or REPO / "var" / "metrics")
        for path in directory.glob("*.db"):
            path.unlink(missing_ok=True)

    def prepare_database(self) -> str:
        """Migrate, seed the demo and collect static files; return the demo login seed_demo printed."""
        self.metrics_reset()
        self.manage("migrate", "migrate", "--noinput")
        seeded = self.manage("seed", "seed_demo")
        self.manage("static", "collectstatic", "--noinput", "--verbosity", "0")
        logins = [match["login"].strip() for line in seeded if (match := LOGIN_RE.search(line))]
        return logins[-1] if logins else f"admin / {self.env.get('LANGBOT_DEMO_PASSWORD') or 'admin'}"

    def manager(self, *, with_redis: bool, login: str) -> ServicesLastManager:
        manager = ServicesLastManager(self.printer)
        environments = {
            "redis": self.redis_env(),
            "runtime": self.runtime_env(),
            "ready": {**self.host_env(), DEMO_LOGIN_ENV: login},
        }
        for name, command in parse_procfile((REPO / "Procfile").read_text()).processes.items():
            if name == "redis" and not with_redis:
                continue
            # `exec`, so that honcho watches and signals the process itself rather than a /bin/sh above it.
            manager.add_process(name, f"exec {command}", env=environments.get(name) or self.host_env(), cwd=REPO)
        return manager

    # -- entry point ---------------------------------------------------------------------------

    def run(self) -> int:
        VAR.mkdir(exist_ok=True)
        # Until honcho takes over the signals, SIGTERM interrupts the preparation as Ctrl-C does.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            self.check_ports_free()
            with_redis = self.redis_must_start()
            self.note_encryption_keys()
            login = self.prepare_database()
            manager = self.manager(with_redis=with_redis, login=login)
        except StackError as exc:
            self.say(f"ERROR: {exc}")
            self.say("stopped after an error")
            return 1
        except KeyboardInterrupt:
            self.say("interrupted during preparation; nothing was started")
            self.say("stopped")
            return 0
        # A module setting of honcho: how long it waits after the first process stops before SIGKILL.
        honcho.manager.KILL_WAIT = self.grace
        manager.loop()
        if manager.returncode in STOPPED_BY_SIGNAL:
            self.say("stopped")
            return 0
        self.say(f"stopped because a process exited on its own (status {manager.returncode}; see above)")
        return 1

    # -- the `ready` process -------------------------------------------------------------------

    def announce(self) -> int:
        """Once /healthz answers, sync the runner registry and say where things are; then wait to be stopped."""
        signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(0))
        healthy = self.wait_healthy()
        # The runner registry lives in the database; fill it from the runtime that is now up.
        sync = subprocess.run([sys.executable, "manage.py", "sync_runners"], cwd=REPO, check=False)
        if sync.returncode != 0:
            print(f"ERROR: `manage.py sync_runners` failed with status {sync.returncode}", flush=True)
            return 1
        banner = self.banner(healthy)
        print(banner, flush=True)
        # The worker's and beat's start-up lines come after /healthz answers and would scroll the banner away:
        # say it once more when they are done.
        if self.banner_again > 0:
            time.sleep(self.banner_again)
            print(
                banner.replace("LangBot Host is up", "LangBot Host is up (again, after the start-up logs)", 1),
                flush=True,
            )
        while True:
            signal.pause()

    def banner(self, healthy: bool) -> str:
        """Where things are, and the demo login."""
        base = self.probe_base()
        lines = [
            "",
            "LangBot Host is up" + ("" if healthy else " (but /healthz is not OK yet — see above)"),
            f"  admin        {base}/admin/",
            f"  debug chat   {base}/chat/",
            f"  API docs     {base}/api/docs/",
            f"  health       {base}/healthz",
            f"  demo login   {self.env.get(DEMO_LOGIN_ENV) or 'see `seed` above'}",
            f"  runtime      ws://127.0.0.1:{self.runtime_port} (token shared with web and worker)",
            "Press Ctrl-C to stop everything.",
            "",
        ]
        return "\n".join(lines)

    def wait_healthy(self) -> bool:
        url = f"{self.probe_base()}/healthz"
        deadline = time.monotonic() + self.start_timeout
        last = "no answer"
        while time.monotonic() < deadline:
            status, body = _http_get(url)
            if status == 200:
                return True
            last = f"HTTP {status}: {body}" if status else body
            time.sleep(0.25)
        print(f"WARNING: {url} is not healthy after {self.start_timeout:.0f} s ({last})", flush=True)
        return False

    def probe_base(self) -> str:
        host = "127.0.0.1" if self.host in {"0.0.0.0", "::", ""} else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise StackError(f"{name} must be an integer, got {raw!r}") from None


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _redis_state(url: str) -> str:
    """ "ok", "down" (nothing answers) or a description of why an answering Redis is unusable."""
    import redis  # the venv's; imported here so `--help`-style failures stay readable

    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        client.ping()
    except redis.exceptions.AuthenticationError as exc:
        return f"authentication failed ({exc})"
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
        return "down"
    except redis.exceptions.RedisError as exc:
        return f"unexpected answer: {exc}"
    finally:
        client.close()
    return "ok"


def _redact(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:" if parts.username else ":"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}***@{netloc}"))


# Probes go straight to the local server, never through an HTTP proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http_get(url: str) -> tuple[int, str]:
    try:
        with _OPENER.open(url, timeout=3) as response:
            return response.status, response.read(2000).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        body = exc.read(2000).decode("utf-8", "replace")
        with contextlib.suppress(ValueError):
            body = json.dumps(json.loads(body).get("checks", body))
        return exc.code, body
    except (OSError, ValueError) as exc:
        return 0, str(exc)


def read_dotenv(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a .env file (comments, blank lines and `export ` prefixes allowed)."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        key, value = key.strip(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


def main(argv: list[str]) -> int:
    os.chdir(REPO)
    # The real environment wins over `.env`, as django-environ's read_env does; the venv's tools come
    # first on PATH, as in an activated venv, so the Procfile's `python`, `daphne` and `celery` are its own.
    env = {**read_dotenv(REPO / ".env"), **os.environ}
    path = env.get("PATH") or os.defpath
    if path.split(os.pathsep)[0] != str(BIN):
        env["PATH"] = os.pathsep.join([str(BIN), path])
    try:
        stack = Stack(env)
    except StackError as exc:
        print(f"run     | ERROR: {exc}", file=sys.stderr)
        return 1
    return stack.announce() if argv == ["ready"] else stack.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
