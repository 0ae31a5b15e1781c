#!/usr/bin/env bash
# HAProxy in front of the servers (deploy/haproxy.cfg; Debian's `haproxy` package). The
# configuration reads GAVEL_LB_BIND, GAVEL_WEB1, GAVEL_WEB2, GAVEL_LB_CHECK_PATH,
# GAVEL_LB_HOST and GAVEL_LB_SOCKET from the environment.
source "$(dirname "$0")/_env.sh"
export GAVEL_LB_BIND="${GAVEL_LB_BIND:-127.0.0.1:8080}"
export GAVEL_WEB1="${GAVEL_WEB1:-127.0.0.1:8001}"
export GAVEL_WEB2="${GAVEL_WEB2:-127.0.0.1:8002}"
export GAVEL_LB_CHECK_PATH="${GAVEL_LB_CHECK_PATH:-/readyz}"
export GAVEL_LB_HOST="${GAVEL_LB_HOST:-localhost}"
export GAVEL_LB_SOCKET="${GAVEL_LB_SOCKET:-/run/haproxy/gavel.sock}"
haproxy -c -q -f deploy/haproxy.cfg
exec haproxy -db -W -f deploy/haproxy.cfg
