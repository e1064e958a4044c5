#!/usr/bin/env bash
# Fuzzes the registrar API against its own OpenAPI document (issue 14):
# starts `toki serve` on a free 127.0.0.1 port over a fresh data folder,
# creates a tenant and two users, and runs schemathesis (pinned in
# scripts/requirements-test.txt) on /openapi.json with every check: no 5xx,
# every status, content type, header and body as documented, invalid data
# refused, valid data accepted. One more check, ours, compares the tenant's
# database before and after each request: a 4xx must have written nothing.
#
#   scripts/schemathesis.sh [TOKI]      # TOKI: the toki binary, default target/debug/toki
#
# Environment: TOKI_VENV (the venv with schemathesis, default .venv-tools),
# TOKI_SCHEMATHESIS_EXAMPLES (test cases per operation and phase, default 100: about a minute),
# TOKI_SCHEMATHESIS_SEED (to replay a run). Stops what it started; exits
# non-zero on any failure, with the server's log.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOKI="$(realpath "${1:-$ROOT/target/debug/toki}")"
VENV="${TOKI_VENV:-$ROOT/.venv-tools}"
EXAMPLES="${TOKI_SCHEMATHESIS_EXAMPLES:-100}"
SCHEMATHESIS="$VENV/bin/schemathesis"
[ -x "$TOKI" ] || { echo "no toki binary at $TOKI (cargo build --bin toki)" >&2; exit 2; }
[ -x "$SCHEMATHESIS" ] || {
  echo "no schemathesis in $VENV: (cd scripts && $VENV/bin/pip install -r requirements-test.txt)" >&2
  exit 2
}

WORK="$(mktemp -d "${TMPDIR:-/tmp}/toki-schemathesis.XXXXXX")"
SERVE_PID=""
cleanup() {
  if [ -n "$SERVE_PID" ]; then
    kill "$SERVE_PID" 2>/dev/null || true
    wait "$SERVE_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "schemathesis.sh: $*" >&2
  if grep -q "panicked at" "$WORK/serve.log"; then
    echo "--- toki serve panicked:" >&2
    grep -A2 "panicked at" "$WORK/serve.log" | head -n 30 >&2
  fi
  echo "--- toki serve's log (last 20 lines)" >&2
  tail -n 20 "$WORK/serve.log" >&2 || true
  exit 1
}

DATA="$WORK/data"
TENANT=acme
KEY="$("$TOKI" tenant create "$TENANT" --data-dir "$DATA" 2>"$WORK/tenant.log")" || {
  cat "$WORK/tenant.log" >&2
  exit 1
}
# One file per creation: tenants/<tenant>.<incarnation>.sqlite.
TENANT_DB="$(ls "$DATA/tenants/$TENANT".*.sqlite 2>/dev/null | head -n 1)"
[ -f "$TENANT_DB" ] || fail "toki tenant create left no database at $DATA/tenants/$TENANT.*.sqlite"

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
BASE="http://127.0.0.1:$PORT"
# Schemathesis sends as fast as the server answers, and its "valid data
# accepted" check would take a 429 for a failure: the per-tenant API rate is
# raised out of its way (429 stays documented, and is tested in-process).
# Its invalid-authentication checks send wrong keys from one address: the
# throttle on failed authentications is raised too (tested in-process).
TOKI_API_RATE=1000000 TOKI_API_BURST=1000000 TOKI_API_CONCURRENCY=1000000 \
  TOKI_AUTH_FAILURE_BURST=1000000 \
  "$TOKI" serve --listen "127.0.0.1:$PORT" --data-dir "$DATA" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 100); do
  curl -sf "$BASE/healthz" >/dev/null 2>&1 && break
  kill -0 "$SERVE_PID" 2>/dev/null || fail "toki serve exited"
  sleep 0.1
done
curl -sf "$BASE/healthz" >/dev/null || fail "toki serve did not come up on $BASE"

# The users the document's examples and the dictionaries below name, so that
# generated schedules can have participants that exist.
for user in ana bob; do
  code="$(curl -s -o "$WORK/user.json" -w '%{http_code}' -X PUT "$BASE/v1/tenants/$TENANT/users/$user" \
    -H "Authorization: Bearer $KEY" -H 'content-type: application/json' \
    -d "{\"name\": \"$user\", \"email\": \"$user@example.com\", \"slack_user_id\": \"U$(printf %s "$user" | tr a-z A-Z)\"}")"
  [ "$code" = 200 ] || fail "registering user $user: HTTP $code $(cat "$WORK/user.json")"
done

# Our check: the rows a write leaves (users, schedules and what hangs off
# them, the mirror's versions) are fingerprinted after every response; a 4xx
# must leave them as the previous response did. Runs with one worker, so that
# responses come in the order their requests went out. The daemon's and
# repair's own writes (deliveries, chat rows, the mirror's progress) are left
# out: they go on by themselves.
cat >"$WORK/hooks.py" <<'EOF'
import hashlib
import os
import sqlite3

import schemathesis

DB = os.environ["TOKI_SCHEMATHESIS_DB"]
COUNTS = os.environ["TOKI_SCHEMATHESIS_COUNTS"]
QUERIES = [
    "SELECT id, name, email, slack_user_id, time_zone, locale FROM users ORDER BY id",
    "SELECT id, title, body, starts_at, time_zone, version, recurrence FROM schedules ORDER BY id",
    "SELECT schedule_id, user_id, position FROM participants ORDER BY schedule_id, user_id",
    "SELECT schedule_id, minutes_before, channels FROM reminder_rules ORDER BY schedule_id, minutes_before",
    "SELECT schedule_id, version, deleted FROM schedule_mirror ORDER BY schedule_id",
]


def fingerprint():
    db = sqlite3.connect(f"file:{DB}?mode=ro", uri=True, timeout=10)
    try:
        digest = hashlib.sha256()
        for q in QUERIES:
            for row in db.execute(q):
                digest.update(repr(row).encode())
        return digest.hexdigest()
    finally:
        db.close()


@schemathesis.check
class nothing_written_on_4xx:
    """A 4xx answer leaves the tenant's data as it was."""

    def __init__(self):
        self.last = fingerprint()
        self.checked = 0

    def after_response(self, ctx, response, case):
        now = fingerprint()
        before, self.last = self.last, now
        if 400 <= response.status_code < 500:
            self.checked += 1
            with open(COUNTS, "w") as f:
                f.write(str(self.checked))
            if now != before:
                raise AssertionError(
                    f"{case.method} {case.formatted_path} answered {response.status_code} "
                    "but the tenant's users or schedules changed"
                )
EOF

# Values the generator draws from some of the time, so that generated
# requests reach past validation: users that exist, real zones, times and
# rules, the ids of schedules written before.
cat >"$WORK/schemathesis.toml" <<EOF
[dictionaries.users]
values = ["ana", "bob"]
[dictionaries.zones]
values = ["UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo", "Australia/Lord_Howe"]
[dictionaries.times]
values = ["2030-01-07T09:00:00", "2030-01-07T09:00:00+09:00", "2030-03-10T02:30:00", "2030-11-03T01:30:00",
          "2030-01-21T09:00:00", "2030-01-21T00:00:00Z", "1970-01-01T00:00:00Z", "2262-01-01T00:00:00Z", "9999-12-31T23:59:59"]
[dictionaries.rules]
values = ["FREQ=DAILY;COUNT=3", "FREQ=WEEKLY;BYDAY=MO,WE,FR", "FREQ=MONTHLY;BYMONTHDAY=31;COUNT=12",
          "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", "FREQ=WEEKLY;INTERVAL=2;UNTIL=20310101T000000Z"]
[dictionaries.schedules]
values = ["standup-1", "standup-2"]

# Every check (schemathesis' default; said here so that it stays so, and so
# that an operation's own setting below can still turn one off).
[checks]
enabled = true

[parameters]
"path.tenant" = "$TENANT"
"path.id" = { dictionary = "schedules", probability = 0.5 }
"path.original" = { dictionary = "times", probability = 0.7 }
"query.from" = { dictionary = "times", probability = 0.5 }
"query.to" = { dictionary = "times", probability = 0.5 }
"body.participants[*]" = { dictionary = "users", probability = 0.9 }
"body.time_zone" = { dictionary = "zones", probability = 0.7 }
"body.starts_at" = { dictionary = "times", probability = 0.7 }
"body.recurrence.rrule" = { dictionary = "rules", probability = 0.8 }
"body.schedule.participants[*]" = { dictionary = "users", probability = 0.9 }
"body.schedule.starts_at" = { dictionary = "times", probability = 0.7 }
"body.schedules[*].participants[*]" = { dictionary = "users", probability = 0.9 }
"body.schedules[*].starts_at" = { dictionary = "times", probability = 0.7 }

# Valid by the document is not valid by the registrar: a zone, a rule or a
# time must exist, participants must be users, a series must repeat. The
# document says so (422), and positive data may rightly get it.
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "401", "404", "422"]

# The stateful phase chains operations by inferred links, and its negative
# mutations can land on a parameter pinned above (path.tenant, path.id):
# the request sent is then valid, and a 200 to it is reported as "invalid
# data accepted" (ST201 on PUT users/{id}, its "invalid component" a
# positive test case). Invalid data is still refused-checked by the
# examples, coverage and fuzzing phases.
[phases.stateful.checks.negative_data_rejection]
enabled = false

# A batch answers 200 with a status per item: an invalid item is refused in
# its result (422 naming schedules[i].<field>) while the others are written.
# Invalid data inside the items is refused there, not by the call's status;
# the batch's own 400/422 are the router tests'.
[[operations]]
include-operation-id = "put_schedules"
checks.negative_data_rejection.enabled = false
EOF

# The request timeout only catches a server that hangs: it is no latency
# check. At 10 s, two requests of a run beside a build on 2 cores timed out
# (scripts/test.sh runs this at idle priority, so toki serve gets only the
# CPU the rest leaves).
echo "schemathesis $("$SCHEMATHESIS" --version | awk '{print $NF}') against $BASE/openapi.json (toki: $TOKI)"
START=$SECONDS
set +e
TOKI_SCHEMATHESIS_DB="$TENANT_DB" TOKI_SCHEMATHESIS_COUNTS="$WORK/checked-4xx" \
  SCHEMATHESIS_HOOKS="$WORK/hooks.py" \
  "$SCHEMATHESIS" --config-file "$WORK/schemathesis.toml" run "$BASE/openapi.json" \
  --workers 1 \
  --max-examples "$EXAMPLES" \
  ${TOKI_SCHEMATHESIS_SEED:+--seed "$TOKI_SCHEMATHESIS_SEED"} \
  --generation-with-security-parameters false \
  --header "Authorization: Bearer $KEY" \
  --request-timeout 120 \
  --no-color
status=$?
set -e
echo "schemathesis: exit $status in $((SECONDS - START)) s"
[ "$status" = 0 ] || fail "schemathesis found failures (above)"
checked="$(cat "$WORK/checked-4xx" 2>/dev/null || echo 0)"
[ "$checked" -gt 0 ] || fail "the nothing-written-on-4xx check saw no 4xx: was it loaded?"
echo "nothing written on $checked answers 4xx"
kill -0 "$SERVE_PID" 2>/dev/null || fail "toki serve died during the run"
