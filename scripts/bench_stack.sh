#!/usr/bin/env bash
# N reminders due at one instant on the aws backend's stack, all on this
# machine: LocalStack's SQS, moto's DynamoDB and Secrets Manager, the tenant
# databases on Postgres; interleaved round by round with the embedded
# backend, through scripts/bench_ab.py (medians and the worst p99).
#   scripts/bench_stack.sh N ROUNDS BINARY [AWS_LEAD_S [LABEL:ENV=V,... ...]]
# Each LABEL:ENV=V,... is one more aws variant with those settings (e.g.
# cache-off:TOKI_DATABASE_STATEMENT_CACHE=off).
# BINARY is a release `toki` with `toki-slack-standin` beside it. Needs the
# emulators' virtualenvs that scripts/test.sh makes (.venv-tools,
# .venv-localstack) and Postgres ($DATABASE_URL, else the local server).
# Each aws run starts on freshly started emulators (they keep everything in
# memory and slow down as it grows, which the services do not) and its own
# tables and queues. AWS_LEAD_S (default 10 + N/1000 × 6) must cover the
# registration on moto, which takes about 5 ms a delivery.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="$1" ROUNDS="$2" BIN="$(realpath "$3")"
LEAD="${4:-$((10 + N / 1000 * 6))}"
shift $(($# < 4 ? $# : 4))
for v in .venv-tools .venv-localstack; do
  [ -x "$ROOT/$v/bin/python" ] || { echo "$v missing: run scripts/test.sh once (it makes it)" >&2; exit 2; }
done
WORK="$(mktemp -d "${TMPDIR:-/tmp}/toki-stack.XXXXXX")"
stop_emulators() { for p in $(cat "$WORK/pids" 2>/dev/null); do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap stop_emulators EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
MOTO_PORT="$(free_port)" LS_PORT="$(free_port)"
# Restarts both emulators (the aws variant's BEFORE hook).
cat >"$WORK/emulators.sh" <<EOS
#!/usr/bin/env bash
for p in \$(cat "$WORK/pids" 2>/dev/null); do kill \$p 2>/dev/null || true; done
for p in \$(cat "$WORK/pids" 2>/dev/null); do while kill -0 \$p 2>/dev/null; do sleep 0.2; done; done
rm -rf "$WORK/run" "$WORK/pids"; mkdir -p "$WORK/run"
"$ROOT/.venv-tools/bin/python" "$ROOT/scripts/moto_server.py" -H 127.0.0.1 -p $MOTO_PORT >"$WORK/run/moto.log" 2>&1 &
echo \$! >>"$WORK/pids"
cd "$WORK/run"
OVERRIDE_IN_DOCKER=0 GATEWAY_LISTEN=127.0.0.1:$LS_PORT SERVICES=sqs LOCALSTACK_VOLUME_DIR="$WORK/run/ls" \
  "$ROOT/.venv-localstack/bin/python" -m localstack.runtime.main >"$WORK/run/localstack.log" 2>&1 &
echo \$! >>"$WORK/pids"
for _ in \$(seq 1 300); do
  curl -sf http://127.0.0.1:$MOTO_PORT/moto-api/ >/dev/null && curl -sf http://127.0.0.1:$LS_PORT/_localstack/health >/dev/null && exit 0
  sleep 0.1
done
echo "the emulators did not come up: $WORK/run" >&2; exit 1
EOS
chmod +x "$WORK/emulators.sh"
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
AWS="AWS_ENDPOINT_URL_SQS=http://127.0.0.1:$LS_PORT,AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$MOTO_PORT"
AWS+=",AWS_ENDPOINT_URL_SECRETS_MANAGER=http://127.0.0.1:$MOTO_PORT,AWS_REGION=us-east-1,AWS_ACCESS_KEY_ID=test,AWS_SECRET_ACCESS_KEY=test"
AWS+=",TOKI_INDEX_TABLE=i{run},TOKI_DIRECTORY_TABLE=t{run},TOKI_QUEUE_NAME=q{run},TOKI_DLQ_NAME=d{run}"
AWS+=",ARGS=--backend+aws+--lead+$LEAD,BEFORE=$WORK/emulators.sh"
echo "aws: LocalStack SQS :$LS_PORT, moto :$MOTO_PORT, Postgres $DATABASE_URL, lead $LEAD s" >&2
VARIANTS=("embedded=$BIN" "aws=$BIN:$AWS")
for v in "$@"; do VARIANTS+=("${v%%:*}=$BIN:$AWS,${v#*:}"); done
python3 "$ROOT/scripts/bench_ab.py" "$N" "$ROUNDS" "${VARIANTS[@]}"
