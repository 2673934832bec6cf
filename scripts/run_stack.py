#!/usr/bin/env python3
"""The foreground supervisor behind `make run`: one command starts the whole LangBot Host stack.

It makes sure Redis answers (starting a private `redis-server` when none does), migrates and seeds
the database, then starts the plugin runtime (`--listen` WebSocket, token-protected, with no host
credentials in its environment), daphne, a Celery worker and Celery beat. Each child runs in its own
process group and its output is prefixed with its name. Once `/healthz` answers it prints the URLs
and the demo login, then stays in the foreground: Ctrl-C or SIGTERM stops every child it started
(SIGTERM, then SIGKILL after a grace period); a child that dies on its own stops everything with exit
status 1.

Environment (see `.env.example`; a `.env` file in the repository root is read too, without overriding
the real environment): PORT (web, default 8000; the runtime listens on PORT+1), HOST (web bind
address, default 127.0.0.1), REDIS_URL, LANGBOT_PLUGIN_DIRS, LANGBOT_RUNTIME_TOKEN (generated when
unset), LANGBOT_DEMO_PASSWORD, LANGBOT_STOP_GRACE (seconds, default 15), LANGBOT_START_TIMEOUT
(seconds to wait for /healthz, default 120).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
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
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import FrameType

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# The one allowlist of what the plugin runtime may inherit (DESIGN §5); it runs third-party runner code.
from langbot_sdk.runtime.environment import runtime_environment  # noqa: E402

VAR = REPO / "var"
BIN = Path(sys.executable).parent
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

RUNTIME_LISTENING = "langbot runtime listening on ws://"
COLORS = ("36", "33", "35", "32", "34", "91", "96", "93")
# seed_demo prints "admin login: <user> / <password>" (or a note that an existing password is unchanged).
LOGIN_RE = re.compile(r"login:\s*(?P<login>.+)$")


class StackError(Exception):
    """A startup step failed; the message says what and how to fix it."""


class Console:
    """Serializes output lines from all children, each prefixed with its source's name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._colors: dict[str, str] = {}
        self._use_color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")

    def line(self, name: str, text: str) -> None:
        prefix = f"{name:<8}|"
        if self._use_color:
            color = self._colors.setdefault(name, COLORS[len(self._colors) % len(COLORS)])
            prefix = f"\033[{color}m{prefix}\033[0m"
        with self._lock:
            sys.stdout.write(f"{prefix} {text}\n")
            sys.stdout.flush()

    def say(self, text: str) -> None:
        self.line("run", text)


def _parent_death_signal() -> Callable[[], None] | None:
    """Return a pre-exec hook asking Linux to SIGTERM the child if this supervisor dies abruptly."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    term = int(signal.SIGTERM)

    def hook() -> None:
        prctl(pr_set_pdeathsig, term)

    return hook


PREEXEC = _parent_death_signal()


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc."""
    members: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may contain spaces and parentheses; the fields after the last ')' do not.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


class Child:
    """One supervised process, leader of its own process group, its output relayed line by line."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: Mapping[str, str],
        console: Console,
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        self.name = name
        self.argv = argv
        self.console = console
        self.stopping = False
        self.process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=PREEXEC,  # only a prctl call, no Python state touched
        )
        self.pgid = self.process.pid
        self._reader = threading.Thread(target=self._relay, args=(on_line,), name=f"relay-{name}", daemon=True)
        self._reader.start()

    def _relay(self, on_line: Callable[[str], None] | None) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            if on_line is not None:
                on_line(text)
            self.console.line(self.name, text)

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def running(self) -> bool:
        """True while the leader or anything left in its process group is alive."""
        return self.process.poll() is None or bool(_group_members(self.pgid))

    def terminate(self) -> None:
        self.stopping = True
        if self.process.poll() is None:
            # Only the leader: daphne and the Celery main process shut their own children down in order.
            self.process.send_signal(signal.SIGTERM)
        else:
            self._signal_group(signal.SIGTERM)

    def kill(self) -> None:
        self.stopping = True
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def finish_output(self, timeout: float = 2.0) -> None:
        self._reader.join(timeout)


class Supervisor:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.console = Console()
        self.children: list[Child] = []
        self.redis: Child | None = None
        self.stop_requested = threading.Event()
        self.force = threading.Event()
        self._interrupts = 0
        self.stop_reason = ""
        self.port = _int_env(env, "PORT", 8000)
        self.runtime_port = self.port + 1
        self.host = env.get("HOST") or "127.0.0.1"
        self.grace = float(env.get("LANGBOT_STOP_GRACE") or 15)
        self.start_timeout = float(env.get("LANGBOT_START_TIMEOUT") or 120)
        self.redis_url = env.get("REDIS_URL") or DEFAULT_REDIS_URL
        self.token = env.get("LANGBOT_RUNTIME_TOKEN") or secrets.token_urlsafe(32)
        self.login: str | None = None

    # -- signals -------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.stop_requested.is_set():
            # A second Ctrl-C means "now": skip the grace period. A repeated SIGTERM does not, because
            # make forwards the SIGTERM sent to its process group, so the supervisor sees it twice.
            if signum == signal.SIGINT and self._interrupts > 0:
                self.force.set()
            self._interrupts += signum == signal.SIGINT
            return
        self._interrupts = int(signum == signal.SIGINT)
        self.stop_reason = signal.Signals(signum).name
        self.stop_requested.set()

    def _check_stop(self) -> None:
        if self.stop_requested.is_set():
            raise StackError(f"stopped by {self.stop_reason} during start-up")

    # -- environment ---------------------------------------------------------------------------

    def host_env(self) -> dict[str, str]:
        env = dict(self.env)
        env.setdefault("DJANGO_SETTINGS_MODULE", "langbot_host.settings")
        env["PYTHONUNBUFFERED"] = "1"
        env["PORT"] = str(self.port)
        env["LANGBOT_RUNTIME_URL"] = f"ws://127.0.0.1:{self.runtime_port}"
        env["LANGBOT_RUNTIME_TOKEN"] = self.token
        return env

    def runtime_env(self) -> dict[str, str]:
        return runtime_environment(self.env, PYTHONUNBUFFERED="1", LANGBOT_RUNTIME_TOKEN=self.token)

    def plugin_dirs(self) -> list[str]:
        raw = self.env.get("LANGBOT_PLUGIN_DIRS") or "plugins"
        return [part for part in raw.split(os.pathsep) if part]

    # -- steps ---------------------------------------------------------------------------------

    def check_ports_free(self) -> None:
        for host, port, what in ((self.host, self.port, "web"), ("127.0.0.1", self.runtime_port, "runtime")):
            if not _port_free(host, port):
                raise StackError(
                    f"port {port} on {host} ({what}) is already in use — is another `make run` up? "
                    f"Choose another with PORT=<n> (the runtime uses PORT+1)."
                )

    def ensure_redis(self) -> None:
        state = _redis_state(self.redis_url)
        if state == "ok":
            self.console.say(f"Redis answers at {_redact(self.redis_url)}")
            return
        if state != "down":
            raise StackError(f"Redis at {_redact(self.redis_url)} answers but is unusable: {state}")
        url = urllib.parse.urlsplit(self.redis_url)
        host, port = url.hostname or "127.0.0.1", url.port or 6379
        if url.scheme != "redis" or host not in {"127.0.0.1", "localhost", "::1"}:
            raise StackError(
                f"Redis at {_redact(self.redis_url)} does not answer; start it or point REDIS_URL elsewhere."
            )
        server = shutil.which("redis-server")
        if server is None:
            raise StackError(
                f"Redis does not answer at {_redact(self.redis_url)} and `redis-server` is not installed.\n"
                "    Install it (Debian/Ubuntu: `sudo apt-get install redis-server`, macOS: "
                "`brew install redis`)\n    or point REDIS_URL at a running Redis."
            )
        self.console.say(f"Redis does not answer; starting {server} on port {port}")
        argv = [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "-::1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        argv += ["--dir", str(VAR)]
        if url.password:
            argv += ["--requirepass", urllib.parse.unquote(url.password)]
        self.redis = Child("redis", argv, self.env, self.console)
        deadline = time.monotonic() + 15
        while _redis_state(self.redis_url) != "ok":
            self._check_stop()
            if self.redis.returncode is not None:
                raise StackError(f"redis-server exited with status {self.redis.returncode}")
            if time.monotonic() > deadline:
                raise StackError("redis-server did not answer within 15 s")
            time.sleep(0.2)

    def manage(self, name: str, *args: str, on_line: Callable[[str], None] | None = None) -> None:
        self._check_stop()
        child = Child(name, [sys.executable, "manage.py", *args], self.host_env(), self.console, on_line)
        self.children.append(child)
        while child.returncode is None:
            if self.stop_requested.wait(0.1):
                raise StackError(f"stopped by {self.stop_reason} during `manage.py {args[0]}`")
        child.finish_output()
        self.children.remove(child)
        if child.returncode != 0:
            raise StackError(f"`manage.py {' '.join(args)}` failed with status {child.returncode}")

    def prepare_database(self) -> None:
        def remember_login(text: str) -> None:
            match = LOGIN_RE.search(text)
            if match:
                self.login = match["login"].strip()

        self.manage("migrate", "migrate", "--noinput")
        self.manage("seed", "seed_demo", on_line=remember_login)
        self.manage("static", "collectstatic", "--noinput", "--verbosity", "0")

    def start_runtime(self) -> None:
        self._check_stop()
        argv = [sys.executable, "-m", "langbot_sdk.runtime", "--listen", f"127.0.0.1:{self.runtime_port}"]
        for directory in self.plugin_dirs():
            argv += ["--plugins-dir", directory]
        listening = threading.Event()

        def watch_for_listening(text: str) -> None:
            # The runtime announces its address once it accepts connections; a bare TCP probe instead
            # would make it log a failed WebSocket handshake.
            if RUNTIME_LISTENING in text:
                listening.set()

        runtime = self.start("runtime", argv, self.runtime_env(), on_line=watch_for_listening)
        deadline = time.monotonic() + 30
        while not listening.is_set():
            if self.stop_requested.wait(0.2):
                raise StackError(f"stopped by {self.stop_reason} during start-up")
            if runtime.returncode is not None:
                raise StackError(f"the plugin runtime exited with status {runtime.returncode}")
            if time.monotonic() > deadline:
                raise StackError(f"the plugin runtime did not listen on 127.0.0.1:{self.runtime_port} within 30 s")

    def start_host_processes(self) -> None:
        env = self.host_env()
        self.start(
            "web",
            [_tool("daphne"), "-b", self.host, "-p", str(self.port), "langbot_host.asgi:application"],
            env,
        )
        celery = [_tool("celery"), "-A", "langbot_host"]
        # Task threads only claim runs and hand them to the process's run loop, which holds the runs.
        self.start("worker", [*celery, "worker", "--pool", "threads", "--concurrency", "8", "--loglevel", "INFO"], env)
        self.start(
            "beat",
            [*celery, "beat", "--loglevel", "INFO", "--schedule", str(VAR / "celerybeat-schedule")],
            env,
        )

    def start(
        self, name: str, argv: list[str], env: Mapping[str, str], on_line: Callable[[str], None] | None = None
    ) -> Child:
        child = Child(name, argv, env, self.console, on_line)
        self.children.append(child)
        return child

    def wait_healthy(self) -> bool:
        url = f"{self.probe_base()}/healthz"
        deadline = time.monotonic() + self.start_timeout
        last = "no answer"
        while time.monotonic() < deadline:
            self.raise_if_child_died()
            status, body = _http_get(url)
            if status == 200:
                return True
            last = f"HTTP {status}: {body}" if status else body
            if self.stop_requested.wait(1.0):
                raise StackError(f"stopped by {self.stop_reason} during start-up")
        self.console.say(f"WARNING: {url} is not healthy after {self.start_timeout:.0f} s ({last})")
        return False

    def probe_base(self) -> str:
        host = "127.0.0.1" if self.host in {"0.0.0.0", "::", ""} else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def print_banner(self, healthy: bool) -> None:
        base = self.probe_base()
        login = self.login or f"admin / {self.env.get('LANGBOT_DEMO_PASSWORD') or 'admin'}"
        lines = [
            "",
            "LangBot Host is up" + ("" if healthy else " (but /healthz is not OK yet — see above)"),
            f"  admin        {base}/admin/",
            f"  debug chat   {base}/chat/",
            f"  API docs     {base}/api/docs/",
            f"  health       {base}/healthz",
            f"  demo login   {login}",
            f"  runtime      ws://127.0.0.1:{self.runtime_port} (token shared with web and worker)",
            "Press Ctrl-C to stop everything.",
            "",
        ]
        for text in lines:
            self.console.say(text)

    def raise_if_child_died(self) -> None:
        for child in self.children + ([self.redis] if self.redis else []):
            code = child.returncode
            if code is not None and not child.stopping:
                raise StackError(f"{child.name} exited unexpectedly with status {code}")

    def supervise(self) -> None:
        while not self.stop_requested.wait(0.5):
            self.raise_if_child_died()

    # -- shutdown ------------------------------------------------------------------------------

    def stop_all(self) -> None:
        # Web and workers first so runs end while the runtime is still there; Redis last.
        by_name = {child.name: child for child in self.children}
        tiers = [
            [by_name[n] for n in ("web", "beat", "worker") if n in by_name],
            [c for c in self.children if c.name not in {"web", "beat", "worker"}],
            [self.redis] if self.redis else [],
        ]
        for tier in tiers:
            self._stop_tier([child for child in tier if child.running()])

    def _stop_tier(self, tier: list[Child]) -> None:
        if not tier:
            return
        self.console.say("stopping " + ", ".join(child.name for child in tier))
        for child in tier:
            child.terminate()
        deadline = time.monotonic() + self.grace
        signalled_groups: set[str] = set()
        while time.monotonic() < deadline and not self.force.is_set():
            alive = [child for child in tier if child.running()]
            if not alive:
                break
            for child in alive:
                # The leader is gone but something it started is still in the group: ask it too.
                if child.returncode is not None and child.name not in signalled_groups:
                    signalled_groups.add(child.name)
                    child.terminate()
            time.sleep(0.1)
        for child in tier:
            if child.running():
                self.console.say(f"{child.name} did not stop in time; killing its process group")
                child.kill()
        for child in tier:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=5)
            child.finish_output()

    # -- entry point ---------------------------------------------------------------------------

    def run(self) -> int:
        self.install_signal_handlers()
        VAR.mkdir(exist_ok=True)
        exit_code = 0
        try:
            self.check_ports_free()
            self.ensure_redis()
            self.prepare_database()
            self.start_runtime()
            # The runner registry lives in the database; fill it from the runtime before serving.
            self.manage("sync", "sync_runners")
            self.start_host_processes()
            healthy = self.wait_healthy()
            self.print_banner(healthy)
            self.supervise()
            self.console.say(f"received {self.stop_reason}; shutting down")
        except StackError as exc:
            if self.stop_requested.is_set():
                self.console.say(str(exc))
            else:
                self.console.say(f"ERROR: {exc}")
                exit_code = 1
        finally:
            self.stop_all()
        self.console.say("stopped" if exit_code == 0 else "stopped after an error")
        return exit_code


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise StackError(f"{name} must be an integer, got {raw!r}") from None


def _tool(name: str) -> str:
    candidate = BIN / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise StackError(f"`{name}` not found; run `make venv` first")
    return found


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


def build_env(base: Mapping[str, str], dotenv: Mapping[str, str]) -> dict[str, str]:
    """The real environment wins over `.env`, as django-environ's read_env does."""
    env = dict(dotenv)
    env.update(base)
    return env


def main(argv: Iterable[str] | None = None) -> int:
    del argv  # no options: everything comes from the environment
    os.chdir(REPO)
    env = build_env(os.environ, read_dotenv(REPO / ".env"))
    try:
        supervisor = Supervisor(env)
    except StackError as exc:
        print(f"run     | ERROR: {exc}", file=sys.stderr)
        return 1
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
