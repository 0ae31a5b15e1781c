"""HTTP to Django behind the body limit (console/bodylimit.py); WebSockets behind the Origin
check and the session (console/routing.py). Under daphne, its HTTP channel is bounded too
(console/serving.py: bodies refused before they are read, header and body deadlines)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from console.core import serving  # noqa: E402
from console.core.bodylimit import BodyLimit  # noqa: E402
from console.live import frames as wsframes  # noqa: E402
from console.routing import websocket_urlpatterns  # noqa: E402

serving.install()  # under daphne: its HTTP edge bounded (a no-op under any other server)

application = ProtocolTypeRouter(
    {
        "http": BodyLimit(django_asgi_app),
        # wsframes.capture: live frames go straight to daphne's transport (console/wsframes.py)
        "websocket": wsframes.capture(
            AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)
