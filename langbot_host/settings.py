"""All configuration of the host, read from the environment through django-environ (docs/operations.md, "Settings").

Pluggable parts — database, Redis, broker, artifact storage, plugin runtime — are chosen by URL so a
production set-up changes environment variables, not code. `.env.example` lists every variable.
"""

import os
from pathlib import Path

import django_stubs_ext
import environ
from celery.schedules import crontab

# Lets admin and form classes be subscripted at runtime the way the type stubs describe them.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)
# The fallback key only ever serves a local `make run`; any deployed instance sets its own.
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="insecure-local-development-key-change-me")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
PORT = env.int("PORT", default=8000)

INSTALLED_APPS = [
    "daphne",
    # Django's admin with the console's site as `admin.site` (langbot_host/admin_site: menu and dashboard).
    "langbot_host.admin_site.apps.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "bindings",
    "runners",
    "runners.takeover",
    "runtimes",
    "transcripts",
    "artifacts",
    "resources",
    "platforms",
    "platforms.webhooks",
    "platforms.schedules",
    "platforms.alerts",
    "gateway",
    "hostapi",
    "people",
    "webchat",
    "django_celery_beat",
    "langbot_host.admin_site",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The language of a page: the switch's cookie (Django's set_language view), else Accept-Language.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "foundation.api_input.StorableTextMiddleware",
    "foundation.limits.RequestLimitsMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A view that gets no database connection answers 503 (not a 500 with a logged traceback).
    "foundation.api_errors.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "langbot_host.urls"
ASGI_APPLICATION = "langbot_host.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web, worker and beat share the embedded database: WAL lets readers proceed beside one writer and
    # IMMEDIATE transactions take the write lock up front instead of failing on upgrade.
    # A writer waits this long for the lock (sqlite3's default is 5 s, which a burst of runs on two cores
    # outlasts); past it the request answers 503 `unavailable` (`foundation.db_unavailable`).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": env.float("LANGBOT_SQLITE_BUSY_TIMEOUT", default=30.0),
        }
    )

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env.bool(
    "LANGBOT_DB_PREPARED_STATEMENTS", default=True
):
    # Django turns psycopg's prepared statements off (prepare_threshold None), which also ignores an
    # explicit `execute(..., prepare=True)`. The run hot path (`foundation/sql.py`) prepares its
    # statements: planning its joins costs more than running them. The ORM's client-side-binding cursors
    # never prepare, whatever the threshold. Turn off behind a pooler that cannot keep prepared
    # statements (PgBouncer before 1.21 in transaction mode).
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 5

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env.bool("LANGBOT_DB_POOL", default=True):
    # Worker loops and threads open many short database sessions; a pool makes them cheap.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env.int("LANGBOT_DB_POOL_MIN", default=2),
        "max_size": env.int("LANGBOT_DB_POOL_MAX", default=20),
        "timeout": env.float("LANGBOT_DB_POOL_TIMEOUT", default=10.0),
    }

# `/healthz` reads through an alias of its own on the same database, outside the pool: when waiting or
# busy requests take every pooled connection, the health check neither waits for one nor reports the
# database down. A fresh connection per check also proves the server still accepts connections.
# Tests treat it as the same database (MIRROR), so no second test database is made.
DATABASES["health"] = {
    **DATABASES["default"],
    "OPTIONS": {k: v for k, v in DATABASES["default"].get("OPTIONS", {}).items() if k != "pool"},
    "TEST": {"MIRROR": "default"},
}
if DATABASES["health"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["health"]["OPTIONS"]["connect_timeout"] = 2

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
# The languages the admin and the chat are translated to (locale/, docs/operations.md, "Languages"); runner
# manifests' `zh_Hans` labels are shown when Simplified Chinese is active (bindings.forms.manifest_locale).
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# Artifacts live behind django-storages; `file://` keeps them under var/ by default.
ARTIFACT_STORAGE_URL = env.str("ARTIFACT_STORAGE_URL", default=f"file://{VAR_DIR / 'artifacts'}")
# Largest `POST /api/v1/artifacts` upload and largest file fetched for a URL attachment.
LANGBOT_ARTIFACT_UPLOAD_MAX_BYTES = env.int("LANGBOT_ARTIFACT_UPLOAD_MAX_BYTES", default=1024**3)
LANGBOT_ARTIFACT_FETCH_MAX_BYTES = env.int("LANGBOT_ARTIFACT_FETCH_MAX_BYTES", default=50 * 1024**2)
# Largest artifact a runner uploads (`api.artifacts.upload`); a workspace's own setting (admin) wins, 0 turns it off.
LANGBOT_ARTIFACT_RUNNER_UPLOAD_MAX_BYTES = env.int("LANGBOT_ARTIFACT_RUNNER_UPLOAD_MAX_BYTES", default=100 * 1024**2)
# Knowledge-base document uploads above this answer 413 `payload_too_large` (resources/knowledge/uploads.py).
KNOWLEDGE_DOCUMENT_MAX_BYTES = env.int("KNOWLEDGE_DOCUMENT_MAX_BYTES", default=50 * 1024**2)
# Knowledge bases' vector index files, one per knowledge base (resources/knowledge/vectors.py); several hosts
# need it on shared storage or each keeps its own copy.
KNOWLEDGE_INDEX_DIR = env.str("LANGBOT_KNOWLEDGE_INDEX_DIR", default="") or str(VAR_DIR / "knowledge-index")
# What a document may expand to once parsed (resources/knowledge/limits.py): a DOCX's unpacked files (and any
# one PDF stream), a zip's entry count and any large entry's compression ratio, a PDF's pages, the characters
# extracted. Parsing runs in a child process with this address-space cap and wall-clock timeout.
LANGBOT_KB_MAX_EXPANDED_BYTES = env.int("LANGBOT_KB_MAX_EXPANDED_BYTES", default=64 * 1024**2)
LANGBOT_KB_MAX_ZIP_ENTRIES = env.int("LANGBOT_KB_MAX_ZIP_ENTRIES", default=1000)
LANGBOT_KB_MAX_COMPRESSION_RATIO = env.int("LANGBOT_KB_MAX_COMPRESSION_RATIO", default=100)
LANGBOT_KB_MAX_PDF_PAGES = env.int("LANGBOT_KB_MAX_PDF_PAGES", default=2000)
LANGBOT_KB_MAX_CHARACTERS = env.int("LANGBOT_KB_MAX_CHARACTERS", default=10_000_000)
LANGBOT_KB_PARSE_MEMORY_MB = env.int("LANGBOT_KB_PARSE_MEMORY_MB", default=1024)
LANGBOT_KB_PARSE_TIMEOUT_SECONDS = env.float("LANGBOT_KB_PARSE_TIMEOUT_SECONDS", default=120.0)
LANGBOT_ARTIFACT_FETCH_TIMEOUT = env.float("LANGBOT_ARTIFACT_FETCH_TIMEOUT", default=20.0)
# The outbound address guard (foundation.outbound): every URL a tenant chooses (model providers,
# bots' api_base_url, MCP servers, webhooks, URL attachments) may reach only public addresses unless this
# is on for the whole host, or a superuser set the workspace's `allow_private_addresses` in the admin.
LANGBOT_ALLOW_PRIVATE_ADDRESSES = env.bool("LANGBOT_ALLOW_PRIVATE_ADDRESSES", default=False)
# Older name of LANGBOT_ALLOW_PRIVATE_ADDRESSES (it covered URL attachments only); on, it now means the same.
LANGBOT_ARTIFACT_FETCH_ALLOW_PRIVATE = env.bool("LANGBOT_ARTIFACT_FETCH_ALLOW_PRIVATE", default=False)
# Default lifetime of artifacts runners create (0 = kept until deleted); uploads may set their own.
LANGBOT_ARTIFACT_RUNNER_TTL_SECONDS = env.int("LANGBOT_ARTIFACT_RUNNER_TTL_SECONDS", default=0)
# The currency models' prices and budgets are written in, the same for every workspace of the host (an ISO
# 4217 code, shown beside every amount; nothing is converted). Budget periods are UTC days and months.
LANGBOT_COST_CURRENCY = env.str("LANGBOT_COST_CURRENCY", default="USD")
# Host API calls a single run may make: a token bucket of this rate (calls/s) and burst.
LANGBOT_PROXY_RATE_PER_RUN = env.float("LANGBOT_PROXY_RATE_PER_RUN", default=200.0)
LANGBOT_PROXY_BURST_PER_RUN = env.float("LANGBOT_PROXY_BURST_PER_RUN", default=400.0)
# Stdio MCP servers are programs the worker starts: only an operator may add one (an operator API key, staff
# in the admin), and only with a command matching one of these comma-separated absolute paths or fnmatch
# patterns (e.g. /usr/bin/uvx,/opt/mcp/bin/*). Empty: no stdio MCP server runs on this host.
LANGBOT_MCP_STDIO_COMMANDS = env.list("LANGBOT_MCP_STDIO_COMMANDS", default=[])

# The web process (langbot_host/web.py) closes a connection whose request line, headers and body have not all
# arrived within this many seconds of the request line (a client trickling a body holds no socket longer).
# 0 leaves only Twisted's idle timeout (60 s without a byte).
LANGBOT_HTTP_REQUEST_READ_TIMEOUT = env.float("LANGBOT_HTTP_REQUEST_READ_TIMEOUT", default=30.0)

REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")

CHANNEL_LAYERS = {
    "default": {
        # channels_redis' layer, reading a process's waiting messages in one round trip (runners/live/layers.py).
        "BACKEND": "runners.live.layers.BatchedRedisChannelLayer",
        # A listener (a `?wait=` request, an SSE client) may fall behind a fast stream for a moment; the
        # default of 100 queued messages per channel would drop results it is entitled to.
        "CONFIG": {
            "hosts": [REDIS_URL],
            "capacity": env.int("LANGBOT_CHANNEL_CAPACITY", default=5000),
            "expiry": 60,
        },
    }
}

CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}

# Celery: the database is the source of truth for runs, the broker only wakes workers (docs/architecture.md, "Runs").
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# No unacked-message bookkeeping in Redis: with it every message costs the worker's single consumer
# thread two more Redis round trips (store on delivery, remove on ack), which capped a worker at about
# 100 runs/s. Nothing depends on it: the database owns each run, a run whose message was lost with a
# killed worker is still `queued` and `runs_sweep` re-sends it; a claimed run is owned by its lease.
CELERY_BROKER_TRANSPORT_OPTIONS = {"ack_emulation": env.bool("LANGBOT_BROKER_ACK_EMULATION", default=False)}
# Lets a test session or a second deployment on the same broker keep its own queue.
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_TASK_DEFAULT_QUEUE", default="celery")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Beat keeps its schedule in the database (django-celery-beat): the scheduled events' rows beside the
# entries below, which it copies in at start. Every beat (`make run`'s, `make worker`'s -B) uses it.
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# Completion webhooks (platforms.webhooks): the Celery queue of their tasks — empty for the default queue,
# which every worker consumes; a name to send them to workers of their own (`celery ... -Q <name>`), so
# slow receivers never hold the threads that admit runs.
LANGBOT_WEBHOOK_QUEUE = env.str("LANGBOT_WEBHOOK_QUEUE", default="")
# Older name of LANGBOT_ALLOW_PRIVATE_ADDRESSES (it covered webhooks only); on, it now means the same.
LANGBOT_WEBHOOK_ALLOW_PRIVATE = env.bool("LANGBOT_WEBHOOK_ALLOW_PRIVATE", default=False)
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    # Fails runs whose worker stopped renewing its lease and re-sends runs left queued (docs/architecture.md, "Runs").
    "runs-sweep": {"task": "runners.tasks.runs_sweep", "schedule": env.float("LANGBOT_SWEEP_SECONDS", default=5.0)},
    # Daily at 03:17 UTC: what the retention settings below no longer keep (runners.lifecycle.retention).
    "retention-sweep": {"task": "runners.tasks.retention_sweep", "schedule": crontab(minute=17, hour=3)},
    # Sends the completion webhook deliveries whose retry is due (platforms.webhooks.delivery).
    "webhook-deliveries-due": {
        "task": "platforms.webhooks.tasks.webhook_deliveries_due_send",
        "schedule": env.float("LANGBOT_WEBHOOK_DUE_SECONDS", default=5.0),
        "options": {"queue": LANGBOT_WEBHOOK_QUEUE or None},
    },
    # Records the webhook messages of run ends no observer reported (a worker died in between).
    "webhook-run-ends-reconcile": {
        "task": "platforms.webhooks.tasks.webhook_run_ends_reconcile",
        "schedule": 60.0,
        "options": {"queue": LANGBOT_WEBHOOK_QUEUE or None},
    },
    # Raises and resolves the alerts (platforms.alerts.evaluator): bots down, deliveries, failure rates, queue,
    # providers.
    "alerts-evaluate": {"task": "platforms.alerts.tasks.alerts_evaluate", "schedule": 60.0},
}

# Run execution in workers (runners.orchestrator): in-flight runs per worker process, the database threads
# of its loop (also the most connections its loop's own pool for result writes opens), the lease a worker
# holds on each run and how often it renews them, the grace given to runs at worker shutdown.
LANGBOT_WORKER_MAX_RUNS = env.int("LANGBOT_WORKER_MAX_RUNS", default=1000)
LANGBOT_WORKER_DB_THREADS = env.int("LANGBOT_WORKER_DB_THREADS", default=8)
LANGBOT_WORKER_SHUTDOWN_GRACE = env.float("LANGBOT_WORKER_SHUTDOWN_GRACE", default=10.0)
LANGBOT_LEASE_SECONDS = env.float("LANGBOT_LEASE_SECONDS", default=15.0)
LANGBOT_LEASE_RENEW_SECONDS = env.float("LANGBOT_LEASE_RENEW_SECONDS", default=5.0)
# The host's own deadline fires this long after `deadline_at`, so the runtime's timeout result wins.
LANGBOT_RUN_DEADLINE_GRACE = env.float("LANGBOT_RUN_DEADLINE_GRACE", default=2.0)
# After `cancel_run`, how long the host waits for the runner's `cancelled` result before ending it.
LANGBOT_RUN_CANCEL_GRACE = env.float("LANGBOT_RUN_CANCEL_GRACE", default=7.0)
LANGBOT_QUEUED_STALE_SECONDS = env.float("LANGBOT_QUEUED_STALE_SECONDS", default=30.0)
LANGBOT_SWEEP_BATCH = env.int("LANGBOT_SWEEP_BATCH", default=500)
LANGBOT_RUN_CANCEL_CHANNEL = env.str("LANGBOT_RUN_CANCEL_CHANNEL", default="langbot:runs:cancel")
# Freeze the objects alive after start-up out of the garbage collector's view (foundation/process.py):
# full collections then stop pausing daphne and the workers for 85-230 ms. Off only to compare.
LANGBOT_GC_FREEZE = env.bool("LANGBOT_GC_FREEZE", default=True)

# Secrets in runner config are encrypted with the first key; older keys still decrypt (rotation).
LANGBOT_ENCRYPTION_KEYS = env.list("LANGBOT_ENCRYPTION_KEYS", default=[])
# Set by `make run`, which says once for all its processes that no key is set (and what to do): then
# the processes do not each repeat it.
LANGBOT_ENCRYPTION_KEYS_NOTED = env.bool("LANGBOT_ENCRYPTION_KEYS_NOTED", default=False)

# Plugin runtime: `stdio` spawns a child runtime per host process; `ws://host:port` connects to a
# runtime started with `python -m langbot_sdk.runtime --listen host:port`.
LANGBOT_PLUGIN_DIRS = [
    str(BASE_DIR / p) if not Path(p).is_absolute() else p
    for p in env.str("LANGBOT_PLUGIN_DIRS", default="plugins").split(os.pathsep)
    if p
]
LANGBOT_RUNTIME_URL = env.str("LANGBOT_RUNTIME_URL", default="stdio")
LANGBOT_RUNTIME_TOKEN = env.str("LANGBOT_RUNTIME_TOKEN", default="")
LANGBOT_RUNTIME_CALL_TIMEOUT = env.float("LANGBOT_RUNTIME_CALL_TIMEOUT", default=30.0)
# A run (or call) that finds the runtime gone waits this long for it to come back (`make run` restarts it,
# a stdio runtime is respawned) before failing with a retryable `runtime_error`.
LANGBOT_RUNTIME_RECONNECT_WAIT = env.float("LANGBOT_RUNTIME_RECONNECT_WAIT", default=10.0)
# LangBot's own plugin runtime (`lbp rt`, runtimes.langbot), opt-in: its control URL, e.g.
# ws://127.0.0.1:5400/control/ws; empty (default) leaves it out. The token is the runtime's
# LANGBOT_PLUGIN_RUNTIME_CONTROL_TOKEN when it was started with one. SETTLE: seconds a runner refresh waits for
# its plugins to come up (it launches them only once a host connected).
LANGBOT_LANGBOT_RUNTIME_URL = env.str("LANGBOT_LANGBOT_RUNTIME_URL", default="")
LANGBOT_LANGBOT_RUNTIME_TOKEN = env.str("LANGBOT_LANGBOT_RUNTIME_TOKEN", default="")
LANGBOT_LANGBOT_RUNTIME_SETTLE = env.float("LANGBOT_LANGBOT_RUNTIME_SETTLE", default=10.0)

# Event Gateway: bodies above LANGBOT_MAX_EVENT_BYTES answer 413; a raw platform payload (`data.raw`) above
# LANGBOT_RAW_INLINE_MAX_BYTES is moved out of the event into an artifact (`raw_ref`).
LANGBOT_MAX_EVENT_BYTES = env.int("LANGBOT_MAX_EVENT_BYTES", default=1024 * 1024)
LANGBOT_RAW_INLINE_MAX_BYTES = env.int("LANGBOT_RAW_INLINE_MAX_BYTES", default=64 * 1024)

# Chat platforms (platforms/delivery.py): the least seconds between two writes to one chat while a reply
# streams; unset, each platform's own (Telegram: 1 s). Only lower it for a fake or a self-hosted API.
LANGBOT_PLATFORM_EDIT_INTERVAL = env.float("LANGBOT_PLATFORM_EDIT_INTERVAL", default=None)
# The connector process (platforms/connectors.py): seconds between its looks at the bots (new, changed,
# disabled or deleted ones get their connection started, restarted or stopped).
LANGBOT_CONNECTORS_RESCAN_SECONDS = env.float("LANGBOT_CONNECTORS_RESCAN_SECONDS", default=10.0)
# Refused inbound platform requests (forged, replayed) are counted per bot, reason and source address in
# windows of this many seconds, one row and one log line each (platforms.inbound); a source past
# PER_WINDOW refusals in a window is answered 429 until the window ends.
LANGBOT_INBOUND_REFUSAL_WINDOW_SECONDS = env.int("LANGBOT_INBOUND_REFUSAL_WINDOW_SECONDS", default=600)
LANGBOT_INBOUND_REFUSALS_PER_WINDOW = env.int("LANGBOT_INBOUND_REFUSALS_PER_WINDOW", default=20)

# API request limits (foundation/limits.py): JSON bodies above LANGBOT_API_BODY_MAX_BYTES answer 413
# (`/events` and the uploads keep their own caps above); JSON nested deeper than LANGBOT_API_JSON_MAX_DEPTH
# answers 400 (the chat WebSocket's messages too).
LANGBOT_API_BODY_MAX_BYTES = env.int("LANGBOT_API_BODY_MAX_BYTES", default=1024 * 1024)
LANGBOT_API_JSON_MAX_DEPTH = env.int("LANGBOT_API_JSON_MAX_DEPTH", default=64)
# Origins (`scheme://host[:port]`) the chat WebSocket accepts besides its own (the scheme, host and port it
# is served at); list the public origin here behind a proxy that terminates TLS.
LANGBOT_WS_ALLOWED_ORIGINS = env.list("LANGBOT_WS_ALLOWED_ORIGINS", default=[])
# A chat socket whose client takes nothing for this long is closed with 4408; the close then waits this
# long for the client to read up to it (webchat.consumers).
LANGBOT_WS_SEND_STALL_SECONDS = env.float("LANGBOT_WS_SEND_STALL_SECONDS", default=10.0)
LANGBOT_WS_CLOSE_WAIT_SECONDS = env.float("LANGBOT_WS_CLOSE_WAIT_SECONDS", default=30.0)
# The website chat widget (webchat.widget): visitor tokens last this many days (each session renews them);
# per client address, new visitors per hour and session requests per minute; messages per visitor per minute.
# Over a limit: 429 `widget.rate_limited` (a `rate_limited` error frame on the socket). 0 turns a limit off.
LANGBOT_WIDGET_VISITOR_DAYS = env.int("LANGBOT_WIDGET_VISITOR_DAYS", default=90)
LANGBOT_WIDGET_NEW_VISITORS_PER_IP_HOUR = env.int("LANGBOT_WIDGET_NEW_VISITORS_PER_IP_HOUR", default=20)
LANGBOT_WIDGET_SESSIONS_PER_IP_MINUTE = env.int("LANGBOT_WIDGET_SESSIONS_PER_IP_MINUTE", default=60)
LANGBOT_WIDGET_MESSAGES_PER_VISITOR_MINUTE = env.int("LANGBOT_WIDGET_MESSAGES_PER_VISITOR_MINUTE", default=10)
# REST requests per API key (per user for browser sessions), `<n>/<second|minute|hour|day>`, counted in the
# cache; over it: 429 rate_limited with Retry-After (bindings/throttling.py). Generous by default (an
# integration at the throughput target stays under it); empty or `off` disables.
LANGBOT_API_THROTTLE_RATE = env.str("LANGBOT_API_THROTTLE_RATE", default="60000/minute")
# An API key found in the database is kept this many seconds per web process (bindings/authentication.py):
# no key lookup per request, but a revoked key is refused everywhere only after this long. 0 = no cache.
LANGBOT_API_KEY_CACHE_SECONDS = env.float("LANGBOT_API_KEY_CACHE_SECONDS", default=2.0)
# Platform actions waiting for an operator's approval expire after this long, and never after their run
# ends unless the runner asked that the action may outlive it (runners.actions.platform_actions).
LANGBOT_ACTION_APPROVAL_SECONDS = env.float("LANGBOT_ACTION_APPROVAL_SECONDS", default=600.0)

# Retention (runners.lifecycle.retention, the daily `retention-sweep`): days kept per kind, 0 = forever.
# Expired artifacts always go; artifacts older than ARTIFACT_DAYS too (not those a live run or a knowledge
# document uses); result events of runs finished RUN_EVENT_DAYS ago; proxy audit rows; blobs no artifact
# names, older than ORPHAN_GRACE_HOURS. LANGBOT_RETENTION_WORKSPACES overrides the days per workspace
# slug, as JSON: {"<slug>": {"artifact_days": 7, "run_event_days": 30, "proxy_audit_days": 30}}.
LANGBOT_RETENTION_ARTIFACT_DAYS = env.int("LANGBOT_RETENTION_ARTIFACT_DAYS", default=0)
LANGBOT_RETENTION_RUN_EVENT_DAYS = env.int("LANGBOT_RETENTION_RUN_EVENT_DAYS", default=90)
LANGBOT_RETENTION_PROXY_AUDIT_DAYS = env.int("LANGBOT_RETENTION_PROXY_AUDIT_DAYS", default=90)
# Counted refusals of inbound platform requests (platforms.InboundRefusal), by when they were last seen.
LANGBOT_RETENTION_INBOUND_REFUSAL_DAYS = env.int("LANGBOT_RETENTION_INBOUND_REFUSAL_DAYS", default=30)
# A person none of whose identities wrote for PERSON_DAYS is erased (people.retention; 0 keeps them).
LANGBOT_RETENTION_PERSON_DAYS = env.int("LANGBOT_RETENTION_PERSON_DAYS", default=0)
# A one-time link code (`/link`) lives this many seconds; a person may ask for this many an hour.
LANGBOT_PEOPLE_LINK_CODE_SECONDS = env.int("LANGBOT_PEOPLE_LINK_CODE_SECONDS", default=600)
LANGBOT_PEOPLE_LINK_CODES_PER_HOUR = env.int("LANGBOT_PEOPLE_LINK_CODES_PER_HOUR", default=5)
LANGBOT_RETENTION_ORPHAN_GRACE_HOURS = env.int("LANGBOT_RETENTION_ORPHAN_GRACE_HOURS", default=24)
LANGBOT_RETENTION_WORKSPACES: dict[str, dict[str, int]] = env.json("LANGBOT_RETENTION_WORKSPACES", default={})
LANGBOT_RETENTION_BATCH = env.int("LANGBOT_RETENTION_BATCH", default=1000)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "bindings.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Then the caller's role (a session) or scopes (an API key) against the scope each view names (bindings.roles).
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated", "bindings.roles.ScopePermission"],
    "DEFAULT_THROTTLE_CLASSES": ["bindings.throttling.ApiKeyRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "foundation.api_schema.ApiAutoSchema",
    # The API takes JSON (docs/architecture.md, "The REST API"); the artifact upload names its own multipart parser.
    "DEFAULT_PARSER_CLASSES": ["foundation.api_input.JSONParser"],
    "EXCEPTION_HANDLER": "foundation.api_errors.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "LangBot Host API",
    "DESCRIPTION": "Events in, agent runs out: bindings, runs, run events, transcripts and artifacts.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Served from our own static files: a self-hosted instance may have no route to a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        # The SSE endpoint is a plain Django view the generator cannot see.
        "foundation.api_schema.run_stream_document",
        # Each operation's scope and least role (bindings.roles), after the stream's operation exists.
        "bindings.schema.scopes_document",
    ],
    # Several resources have a `status` field with its own set of values; name each set after its owner.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": ["queued", "running", "completed", "failed", "cancelled", "timeout"],
        "EventStatusEnum": ["accepted", "no_binding", "conflict"],
        "RunnerStatusEnum": "bindings.models.RunnerDescriptor.Status",
    },
}

# Records logged while a run executes carry its id and workspace (`foundation.log_context`).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"run": {"()": "foundation.log_context.RunContextFilter"}},
    # Every line is redacted as it is formatted: no secret reaches the log at any level, whichever library
    # wrote the line (foundation/log_redaction.py).
    "formatters": {
        "plain": {
            "class": "foundation.log_redaction.RedactingFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s [run=%(run_id)s workspace=%(workspace)s]: %(message)s",
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["run"]}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# Prometheus metrics at `/metrics` (langbot_host/metrics_view.py): answered to `Authorization: Bearer
# <LANGBOT_METRICS_TOKEN>` and to superuser sessions; without a token, to superusers only. The web, worker
# and runtime-link processes of one host write their counters and histograms to one directory
# (prometheus-client's multiprocess mode), which `/metrics` adds up. prometheus-client reads the variable
# when it is first imported, so it is exported here, before any metric exists.
LANGBOT_METRICS_TOKEN = env.str("LANGBOT_METRICS_TOKEN", default="")

# Traces (docs/tracing.md): exported only when the standard OTEL_* variables configure OTLP export, which
# the OpenTelemetry SDK reads itself. The admin's run page links its trace id through this template, e.g.
# `http://jaeger:16686/trace/{trace_id}`; empty, it shows the id alone.
LANGBOT_TRACE_URL_TEMPLATE = env.str("LANGBOT_TRACE_URL_TEMPLATE", default="")
PROMETHEUS_MULTIPROC_DIR = env.str("PROMETHEUS_MULTIPROC_DIR", default="") or str(VAR_DIR / "metrics")
os.makedirs(PROMETHEUS_MULTIPROC_DIR, exist_ok=True)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = PROMETHEUS_MULTIPROC_DIR
