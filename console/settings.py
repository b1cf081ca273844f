"""Settings for the GPU capacity console.

Embedded defaults run anywhere (SQLite, in-memory channel layer, DEBUG on). Production is configured
through environment variables only; see docs/reference/settings.md.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


DEBUG = env_bool("DEBUG", default="SECRET_KEY" not in os.environ)
SECRET_KEY = os.environ.get("SECRET_KEY", "insecure-development-key-do-not-use-in-production")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# `manage.py sync_clusters` serves no HTTP: it leaves Daphne out (the app only brings its runserver, and
# importing it loads Twisted, a second before the sync's first list).
_SYNC_PROCESS = sys.argv[1:2] == ["sync_clusters"]
INSTALLED_APPS = [
    *([] if _SYNC_PROCESS else ["daphne"]),
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_tables2",
    "django_filters",
    "template_partials",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "axes",
    "csp",
    "access",
    "enforcers",
    "nodepools",
    "projects",
    "provisioning",
    "audit",
    "accounts",
    "usage",
    "ledger",
    "workloads",
    "ui",
]

MIDDLEWARE = [
    # First: a body over CONSOLE_MAX_BODY_BYTES is refused before anything reads it (common/limits.py;
    # under Daphne the ASGI wrapper of console/asgi.py has refused it already).
    "common.limits.BodyLimitMiddleware",
    # NUL and control characters in form fields and query strings: refused, naming the field.
    "common.parsing.ControlCharacterMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A GET or HEAD request reads what the fleet's sums cost once, and while the fleet holds still not again.
    "nodepools.memo.ReadsMemoMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "ui.middleware.VaryOnHtmxMiddleware",
    "audit.context.AuditViaMiddleware",
    # Last, as django-axes asks: it turns a locked-out log-in into the refusal (common/security.py).
    "axes.middleware.AxesMiddleware",
]

# --- Hostile input (common/limits.py, common/parsing.py; docs/reference/limits.md) ---
# The most bytes one request body may hold (pages, API, uploads): larger is a 413 naming the limit.
CONSOLE_MAX_BODY_BYTES = int(os.environ.get("CONSOLE_MAX_BODY_BYTES", str(1024 * 1024)))
# Django's own limits agree with it (form data held in memory; uploads are never spooled to disk).
DATA_UPLOAD_MAX_MEMORY_SIZE = CONSOLE_MAX_BODY_BYTES
FILE_UPLOAD_MAX_MEMORY_SIZE = CONSOLE_MAX_BODY_BYTES
# Nesting of JSON and YAML from users (request bodies, pod templates, rule sets): deeper is a 400.
CONSOLE_MAX_NESTING = int(os.environ.get("CONSOLE_MAX_NESTING", "64"))

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"
WSGI_APPLICATION = "console.wsgi.application"

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

# SQLite unless DATABASE_URL names another database (PostgreSQL in production).
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        conn_max_age=int(os.environ.get("CONN_MAX_AGE", "0")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web server read while the sync writes; the timeout rides out short write locks.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Tests use a file, not SQLite's shared-cache memory database: there a reader and a writer on two
    # threads (the live server, the sync) meet table locks that ignore the busy timeout ("database
    # table is locked"); a file in WAL mode waits as production does.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / ".test-db.sqlite3")}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # No JIT compilation: the console's queries are short, and PostgreSQL compiles any query whose estimated cost
    # passes `jit_above_cost`, which the quota and usage queries' correlated sums do on a fresh or small database
    # (about 0.5 s of compiling for a query that runs in 2 ms). A DATABASE_URL's own `options` are kept after it.
    options = DATABASES["default"].setdefault("OPTIONS", {})
    options["options"] = " ".join(filter(None, ["-c jit=off", options.get("options", "")]))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    # redis-py's default read timeout (5 s) equals channels_redis' blocking receive (BZPOPMIN, 5 s): an
    # idle websocket's receive would time out as Redis answers and end the consumer. Reads wait longer
    # than the blocking receive; a Redis that truly stops answering still fails.
    REDIS_CHANNEL_HOSTS = [{"address": REDIS_URL, "socket_timeout": 15}]
    # Redis pub/sub: a hint is published once and each web process, subscribed once per cluster, hands it
    # to its own open pages in memory. (The list-based layer queued one Redis message per open page, popped
    # one round trip each: with 200 open pages a hint took seconds to reach them, bench/load.py.) The
    # only messages are hints, which may be lost as a dropped connection loses them anyway: a page
    # compares its marks when its socket (re)connects.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            # CONSOLE_CHANNEL_PREFIX: consoles (or test workers) sharing one Redis keep their hints apart.
            "CONFIG": {"hosts": REDIS_CHANNEL_HOSTS, "prefix": os.environ.get("CONSOLE_CHANNEL_PREFIX", "asgi")},
        }
    }
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    # django-axes first: a locked-out (username, address) is refused before the password is checked.
    "common.security.LoginLockoutBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
# Served by the app itself (WhiteNoise); in development straight from the source folders.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

DJANGO_TABLES2_TEMPLATE = "django_tables2/bootstrap5.html"

REST_FRAMEWORK = {
    # Personal API tokens (Authorization: Bearer ...) or the browser session (with CSRF on writes).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "common.api.Pagination",
    # Bounded parsing: nesting depth, NUL and control characters refused naming the field (common/parsing.py).
    "DEFAULT_PARSER_CLASSES": [
        "common.parsing.BoundedJSONParser",
        "common.parsing.BoundedFormParser",
        "common.parsing.BoundedMultiPartParser",
    ],
    "EXCEPTION_HANDLER": "common.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU capacity console API",
    "DESCRIPTION": (
        "Clusters, node pools, nodes, departments, projects, quotas, priority lists, role assignments, the "
        "audit trail and usage history. Authenticate with a personal API token (`Authorization: Bearer <token>`, "
        "created under /account/tokens/) or the browser session (writes then need the `X-CSRFToken` header). "
        "Errors are JSON: `{\"detail\": ..., \"errors\": {field: [messages]}}`. Quota writes need `If-Match` "
        "with the ETag of the last read: 412 when it is stale, 428 when it is missing."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI's assets come from the drf-spectacular-sidecar package, served by the app (no CDN).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {"PlacementStrategyEnum": "nodepools.models.PlacementStrategy"},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "common.api.document_error_responses",
    ],
}

# Content-Security-Policy (django-csp). Styles allow 'unsafe-inline' for htmx's indicator style and
# Swagger UI's page style; scripts are same-origin files only (JSON data blocks are not scripts).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}
# Login lockout (django-axes, common/security.py): after this many failures for one username from one
# address, each within the window (seconds) of the last, further attempts are refused until the window
# has passed without one.
LOGIN_FAILURE_LIMIT = int(os.environ.get("LOGIN_FAILURE_LIMIT", "5"))
LOGIN_FAILURE_WINDOW = int(os.environ.get("LOGIN_FAILURE_WINDOW", "900"))
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"  # shared by every web process
AXES_FAILURE_LIMIT = "common.security.failure_limit"  # LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = "common.security.failure_window"  # LOGIN_FAILURE_WINDOW
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_CLIENT_IP_CALLABLE = "common.security.client_address"
AXES_USERNAME_CALLABLE = "common.security.login_username"
AXES_LOCKOUT_CALLABLE = "common.security.lockout_response"
AXES_RESET_ON_SUCCESS = True
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False  # refused attempts do not extend the lockout
AXES_DISABLE_ACCESS_LOG = True  # successful log-ins are not recorded (as before)
AXES_VERBOSE = False
# Usage history (usage/): seconds between snapshots taken by `manage.py snapshot_usage`.
USAGE_SNAPSHOT_EVERY = int(os.environ.get("USAGE_SNAPSHOT_EVERY", "900"))
# Retention, applied by the snapshot job a batch (RETENTION_BATCH rows) per transaction: usage snapshots
# for this many days; the GPU-hours ledger's hourly rows for this many days (its daily rows stay).
USAGE_RETENTION_DAYS = float(os.environ.get("CONSOLE_USAGE_RETENTION_DAYS", "14"))
LEDGER_HOURLY_RETENTION_DAYS = float(os.environ.get("CONSOLE_LEDGER_HOURLY_RETENTION_DAYS", "730"))
RETENTION_BATCH = int(os.environ.get("CONSOLE_RETENTION_BATCH", "5000"))
# The GPU-hours ledger (ledger/): each cluster's sync leader looks every LEDGER_EVERY seconds for hours
# ended LEDGER_CLOSE_DELAY seconds ago to close, spending at most LEDGER_ROUND_BUDGET seconds a round; a
# late event corrects closed hours up to LEDGER_CORRECTION_DAYS back (pods' lifetimes are kept that long
# after they end).
LEDGER_EVERY = float(os.environ.get("CONSOLE_LEDGER_EVERY", "60"))
LEDGER_CLOSE_DELAY = float(os.environ.get("CONSOLE_LEDGER_CLOSE_DELAY", "120"))
LEDGER_ROUND_BUDGET = float(os.environ.get("CONSOLE_LEDGER_ROUND_BUDGET", "20"))
LEDGER_CORRECTION_DAYS = float(os.environ.get("CONSOLE_LEDGER_CORRECTION_DAYS", "14"))
# Idle allocated GPUs (gpumetrics, projects/utilization.py, the usage app's Idle GPUs page): a GPU held by a
# pod whose utilization stayed under the threshold (%) for the whole window (minutes); since-when is
# looked for over the lookback (hours).
GPUMETRICS_IDLE_THRESHOLD = float(os.environ.get("CONSOLE_GPU_IDLE_THRESHOLD", "5"))
GPU_IDLE_WINDOW_MINUTES = float(os.environ.get("CONSOLE_GPU_IDLE_WINDOW_MINUTES", "30"))
GPU_IDLE_LOOKBACK_HOURS = float(os.environ.get("CONSOLE_GPU_IDLE_LOOKBACK_HOURS", "24"))
# The Idle GPUs page's budget (seconds) for Prometheus, shared by its queries of every cluster: a slow
# Prometheus holds the page that long at most, then it shows "—" with the reason.
GPUMETRICS_IDLE_TIMEOUT = float(os.environ.get("CONSOLE_GPU_IDLE_TIMEOUT", "5"))
# The pools' GPU figures (utilization of allocated GPUs, idle allocated GPUs) are read by the sync's leader
# every so many seconds, one Prometheus query per cluster (the DCGM exporter itself samples every 30 s).
GPUMETRICS_POOLS_EVERY = float(os.environ.get("CONSOLE_GPU_POOLS_EVERY", "30"))
GPUMETRICS_REFRESH_TIMEOUT = float(os.environ.get("CONSOLE_GPU_REFRESH_TIMEOUT", "10"))

if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# The styled 403 page for a failed CSRF check too (common/errors.py).
CSRF_FAILURE_VIEW = "common.errors.csrf_failure"

# A refused request (403, 404, CSRF failure) is one line: method, path, status, user; no traceback.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"refused": {"()": "common.log.RefusedRequestFilter"}},
    # Each line of a request ends with its id (common/requestid.py), the one its error answer gives.
    "formatters": {"plain": {"()": "common.requestid.PlainFormatter",
                             "fmt": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "django.request": {"filters": ["refused"]},
        "django.security.csrf": {"filters": ["refused"]},
    },
}

# --- Operations (console/health.py, common/metrics.py, common/jsonlog.py; docs/administration/health-and-metrics.md)
# /healthz, /readyz and /metrics are answered first, before the HTTPS redirect and the host check: the
# kubelet and Prometheus call a pod by its IP over plain HTTP. Every other request is timed.
MIDDLEWARE.insert(0, "console.health.OpsMiddleware")
# Before everything else: every request gets an id (X-Request-ID), on its log lines and error answers.
MIDDLEWARE.insert(0, "common.requestid.RequestIdMiddleware")
# A file holding the bearer token Prometheus sends to /metrics; unset, /metrics refuses everyone (403).
METRICS_TOKEN_FILE = os.environ.get("METRICS_TOKEN_FILE", "")
# LOG_FORMAT=json: one JSON object a line (timestamp, level, logger, message, path/status, exception).
LOG_FORMAT = os.environ.get("LOG_FORMAT", "plain")
if LOG_FORMAT == "json":
    LOGGING["formatters"]["json"] = {"()": "common.jsonlog.JsonFormatter"}
    for _handler in LOGGING["handlers"].values():
        if _handler.get("class") == "logging.StreamHandler" or "formatter" in _handler:
            _handler["formatter"] = "json"

# --- Single sign-on through OpenID Connect (accounts/oidc.py; docs/administration/sso.md) --------------
# Off while OIDC_ISSUER or OIDC_CLIENT_ID is unset. The client secret is read from a file (a mounted Secret).
OIDC_ISSUER = os.environ.get("OIDC_ISSUER", "")
OIDC_CLIENT_ID = os.environ.get("OIDC_CLIENT_ID", "")
OIDC_CLIENT_SECRET_FILE = os.environ.get("OIDC_CLIENT_SECRET_FILE", "")
OIDC_SCOPES = os.environ.get("OIDC_SCOPES", "openid profile email")
OIDC_GROUPS_CLAIM = os.environ.get("OIDC_GROUPS_CLAIM", "groups")
OIDC_USERNAME_CLAIM = os.environ.get("OIDC_USERNAME_CLAIM", "preferred_username")
OIDC_PROVIDER_NAME = os.environ.get("OIDC_PROVIDER_NAME", "single sign-on")
# LOCAL_LOGIN=0 hides the password form and refuses passwords (API tokens still work).
LOCAL_LOGIN = env_bool("LOCAL_LOGIN", True)
