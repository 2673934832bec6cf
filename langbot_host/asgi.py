"""ASGI entry point served by daphne: HTTP goes to Django, WebSockets to the Channels router."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "langbot_host.settings")

# Django must be set up before anything that imports models (the WebSocket routes do).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import re_path  # noqa: E402

from foundation.process import startup_objects_freeze  # noqa: E402
from foundation.tracing import asgi_wrap, tracing_configure  # noqa: E402
from langbot_host.routing import platform_websocket_urlpatterns, websocket_urlpatterns  # noqa: E402

# Traced only when the OTEL_* variables configure export (docs/tracing.md): a server span per HTTP request.
tracing_configure(role="web")

application = ProtocolTypeRouter(
    {
        "http": asgi_wrap(django_asgi_app),
        "websocket": URLRouter(
            [
                *platform_websocket_urlpatterns,
                re_path(r"^", AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))),
            ]
        ),
    }
)

# Last: daphne imports this module once, before it serves anything.
startup_objects_freeze()
