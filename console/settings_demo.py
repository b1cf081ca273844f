"""Settings of `make run` (`manage.py run_demo`): the product as a user meets it, on this machine.

DEBUG is off, so that a wrong address or a refused page shows the console's own 404/403 pages rather
than Django's technical page; the demo still runs over plain http on 127.0.0.1, so the HTTPS-only
settings of production stay off, and static files come straight from the source folders (WhiteNoise).
"""
from console.settings import *  # noqa: F403

DEBUG = False
SECURE_SSL_REDIRECT = False
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
SECURE_HSTS_SECONDS = 0
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
# The demo's Prometheus starts empty with `make run`: team-nlp's idle GPUs show on the Idle GPUs page
# after 2 minutes instead of the production default of 30.
GPU_IDLE_WINDOW_MINUTES = float(__import__("os").environ.get("CONSOLE_GPU_IDLE_WINDOW_MINUTES", "2"))
# The demo's pools show fresh GPU figures soon after start.
GPUMETRICS_POOLS_EVERY = float(__import__("os").environ.get("CONSOLE_GPU_POOLS_EVERY", "10"))
