#!/usr/bin/env bash
# Before every release starts serving: the deploy checks (any warning stops the rollout,
# unless GAVEL_CHECK_FAIL_LEVEL says otherwise), then the migrations. Expand-only migrations
# (docs/operations.md, "Upgrades") keep the previous release serving meanwhile.
source "$(dirname "$0")/_env.sh"
not_root
"$PY" manage.py check --deploy --fail-level "${GAVEL_CHECK_FAIL_LEVEL:-WARNING}"
"$PY" manage.py migrate --noinput
"$PY" manage.py migrate --check
