#!/usr/bin/env bash
# Apply every tenant's retention policy now (the worker does it continuously).
source "$(dirname "$0")/_env.sh"
not_root
exec "$PY" manage.py prune "$@"
