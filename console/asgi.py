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

from console.core import requestthreads, serving  # noqa: E402
from console.core.bodylimit import BodyLimit  # noqa: E402
from console.live import frames as wsframes  # noqa: E402
from console.live import realtime  # noqa: E402
from console.routing import websocket_urlpatterns  # noqa: E402
from gateway.asgi import mount as mcp_beside  # noqa: E402
from ops import serving as ops_serving  # noqa: E402

serving.install()  # under daphne: its HTTP edge bounded (a no-op under any other server)
ops_serving.install()  # under daphne: warm before ready, drain on SIGTERM (ops/serving.py)

application = realtime.serving(  # its loops are servers' loops (console/live/realtime.py)
    ProtocolTypeRouter(
        {
            # /mcp/{name}: gateway/asgi.py; Django's requests on kept threads (requestthreads.py)
            "http": BodyLimit(mcp_beside(requestthreads.kept_threads(django_asgi_app))),
            # wsframes.capture: live frames go straight to daphne's transport (console/wsframes.py)
            "websocket": wsframes.capture(
                ops_serving.sockets(  # counted, and closed with 1012 on SIGTERM
                    AllowedHostsOriginValidator(
                        AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
                    )
                )
            ),
        }
    )
)
