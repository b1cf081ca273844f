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
