#!/usr/bin/env bash
# The production install: a virtualenv with exactly the pinned runtime dependencies of
# deploy/requirements.lock (no dev extras, no SDK), then the console itself without
# resolving anything again. Python 3.11 (PYTHON=...).
source "$(dirname "$0")/_env.sh"
PYTHON="${PYTHON:-python3.11}"
test -x "$PY" || "$PYTHON" -m venv "$VENV"
"$PY" -m pip install --quiet --upgrade pip
"$PY" -m pip install --quiet --no-deps -r deploy/requirements.lock
"$PY" -m pip install --quiet --no-deps --no-build-isolation . 2>/dev/null \
  || "$PY" -m pip install --quiet --no-deps .
"$PY" -m pip check
echo "installed into $VENV"
