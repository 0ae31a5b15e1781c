#!/usr/bin/env bash
# One server: pages, static files, the API and WebSockets. Run N of them behind the load
# balancer (deploy/haproxy.cfg). HOST/PORT: where it listens.
source "$(dirname "$0")/_env.sh"
not_root
exec "$VENV/bin/daphne" -b "${HOST:-127.0.0.1}" -p "${PORT:-8000}" console.asgi:application
