# Shared by deploy/scripts/*.sh: where the code and its virtualenv are, and a refusal to run
# the console as root (set GAVEL_ALLOW_ROOT=1 only for a throwaway container build step).
set -euo pipefail
GAVEL_HOME="${GAVEL_HOME:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
VENV="${GAVEL_VENV:-$GAVEL_HOME/.venv}"
PY="$VENV/bin/python"
cd "$GAVEL_HOME"

not_root() {
  if [ "$(id -u)" = "0" ] && [ "${GAVEL_ALLOW_ROOT:-0}" != "1" ]; then
    echo "refusing to run the console as root: start it as its own user (deploy/README.md)" >&2
    exit 1
  fi
}
