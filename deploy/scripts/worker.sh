#!/usr/bin/env bash
# The worker: expiry, reminders, escalation, digests, mail, webhook and Slack retries, audit
# sealing and checkpoints, and retention pruning. `manage.py worker` where the release has it,
# else its older spelling `expire_approvals --loop` (the same sweep).
source "$(dirname "$0")/_env.sh"
not_root
if "$PY" manage.py help worker >/dev/null 2>&1; then
  exec "$PY" manage.py worker
fi
exec "$PY" manage.py expire_approvals --loop
