#!/usr/bin/env bash
# Registration through the registrar API under load, as a user would run it:
# `toki serve` on a fresh embedded data folder, one tenant with two users, then
# wrk (Debian's package) for DURATION with CONNECTIONS connections, either one
# schedule per PUT or BATCH schedules per POST .../schedules:batch. Each
# schedule has 2 participants x 2 channels (4 deliveries) and starts 12 minutes
# ahead, so its reminders fall inside the scanner's window and are enqueued
# directly: the whole write path (tenant database, index, queue) is measured
# (TOKI_STARTS_IN="+1 day" measures writes whose reminders wait for the scanner).
#
#   scripts/register_load.sh put   [DURATION=20s] [CONNECTIONS=32]
#   scripts/register_load.sh batch [DURATION=20s] [CONNECTIONS=8] [BATCH=100]
set -euo pipefail
mode=${1:?put or batch}
duration=${2:-20s}
connections=${3:-$([ "$mode" = batch ] && echo 8 || echo 32)}
batch=${4:-100}
root=$(cd "$(dirname "$0")/.." && pwd)
toki=${TOKI_BIN:-$root/target/release/toki}
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }

data=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cleanup() { [ -n "${serve_pid:-}" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null; rm -rf "$data"; }
trap cleanup EXIT

key=$("$toki" tenant create acme --data-dir "$data" 2>/dev/null)
"$toki" serve --data-dir "$data" --listen "127.0.0.1:$port" >"$data/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
for u in 0 1; do
  curl -fsS -X PUT "http://127.0.0.1:$port/v1/tenants/acme/users/user$u" \
    -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    -d "{\"name\":\"User $u\",\"email\":\"user$u@example.com\",\"slack_user_id\":\"U$u\",\"time_zone\":\"Asia/Tokyo\",\"locale\":\"en\"}" >/dev/null
done

export TOKI_TENANT=acme TOKI_API_KEY=$key TOKI_BATCH=$batch
TOKI_STARTS_AT=$(date -u -d "${TOKI_STARTS_IN:-+12 minutes}" +%Y-%m-%dT%H:%M:%SZ)
export TOKI_STARTS_AT
script=$root/scripts/wrk/$([ "$mode" = batch ] && echo post_batch.lua || echo put_schedule.lua)
wrk -t2 -c"$connections" -d"$duration" --latency -s "$script" "http://127.0.0.1:$port"
errors=$(grep -c ' 5[0-9][0-9] \|status=5' "$data/serve.log" || true)
echo "serve log lines mentioning a 5xx: $errors"
