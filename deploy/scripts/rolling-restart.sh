#!/usr/bin/env bash
# Restart one server without a failed request: drain it in HAProxy (no new requests; the ones
# in flight finish), wait until it holds none, run the restart command given, wait until it
# answers warm, put it back and wait until HAProxy has it UP. Usage: rolling-restart.sh SERVER "RESTART COMMAND" ADDRESS
#   e.g. rolling-restart.sh web1 "systemctl restart gavel-web@1" 127.0.0.1:8001
source "$(dirname "$0")/_env.sh"
server="$1"; restart="$2"; address="$3"
socket="${GAVEL_LB_SOCKET:-/run/haproxy/gavel.sock}"
check_path="${GAVEL_LB_CHECK_PATH:-/readyz}"
lb() { echo "$1" | socat stdio "unix-connect:$socket"; }
lb "set server gavel/$server state drain" >/dev/null
for _ in $(seq 1 "${GAVEL_DRAIN_SECONDS:-40}"); do
  current="$(lb "show stat" | awk -F, -v s="$server" '$1 == "gavel" && $2 == s {print $5}')"
  [ "${current:-0}" = "0" ] && break
  sleep 1
done
lb "set server gavel/$server state maint" >/dev/null
eval "$restart"
# Back only once warm: the check path answers 200 and an API path answers (any status below
# 500, each within GAVEL_WARM_TIMEOUT seconds) three times in a row (a cold server stalls on
# its first requests: OPS_AUDIT §2.4).
probe() {
  "$PY" - "$address" "$1" "$2" "${GAVEL_WARM_TIMEOUT:-3}" <<'PYEOF'
import sys, urllib.error, urllib.request
address, path, want_ok, timeout = sys.argv[1], sys.argv[2], sys.argv[3] == "ok", float(sys.argv[4])
try:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout) as r:
        status = r.status
except urllib.error.HTTPError as error:
    status = error.code
except Exception:
    sys.exit(1)
sys.exit(0 if (status == 200 if want_ok else status < 500) else 1)
PYEOF
}
good=0
for _ in $(seq 1 240); do
  if probe "$check_path" ok && probe "${GAVEL_WARM_PATH:-/api/v1/runs}" answers; then
    good=$((good + 1)); [ "$good" -ge 3 ] && break
  else
    good=0
  fi
  sleep 0.5
done
[ "$good" -ge 3 ] || { echo "$server did not come back warm" >&2; exit 1; }
lb "set server gavel/$server state ready" >/dev/null
# ... and in rotation, its checks passing, before the caller moves on to the next server.
for _ in $(seq 1 60); do
  status="$(lb "show stat" | awk -F, -v s="$server" '$1 == "gavel" && $2 == s {print $18}')"
  [ "$status" = "UP" ] && break
  sleep 0.5
done
sleep "${GAVEL_SETTLE_SECONDS:-3}"
echo "$server restarted and back in rotation ($status)"
