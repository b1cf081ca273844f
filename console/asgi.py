"""ASGI entry point: HTTP through Django, websockets through Channels (served by Daphne).

HTTP goes through the request body limit first (common/limits.py): a body over CONSOLE_MAX_BODY_BYTES
is answered 413 before Django reads it, and Daphne keeps no more than the limit of any body; a request
line or headers over Twisted's limits (16 KiB) get 414 or 431 with a short message, not a closed connection.

Websockets are origin-checked against ALLOWED_HOSTS and carry the Django session (AuthMiddlewareStack);
the consumer refuses anonymous connections and joins only the clusters the user may view.
"""
import os
import sys

from django.core.asgi import get_asgi_application

# The event loop (websockets, the hints to open pages) shares the interpreter with the thread running the
# views: at Python's default 5 ms switch interval each of the loop's many short steps waits for a view
# that holds the GIL, and a hint to 100 open pages took most of a second (bench/load.py).
sys.setswitchinterval(float(os.environ.get("CONSOLE_GIL_SWITCH_INTERVAL", "0.001")))

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from common.limits import BodyLimitASGI, daphne_body_cap, daphne_header_limits  # noqa: E402
from common.metrics import WebsocketMetricsMiddleware  # noqa: E402
from nodepools.consumers import LiveConsumer  # noqa: E402

websocket_urlpatterns = [path("ws/live/", LiveConsumer.as_asgi())]

daphne_body_cap()
daphne_header_limits()

application = ProtocolTypeRouter({
    "http": BodyLimitASGI(django_asgi_app),
    "websocket": WebsocketMetricsMiddleware(
        AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
    ),
})
