#!/usr/bin/env bash
# The whole test suite. Needs the Rust toolchain and Python 3.10+ with pip;
# installs and starts everything else, and stops what it started:
#   - .venv-tools: moto (AWS emulator), aiosmtpd (SMTP capture), cfn-lint, awscli (pinned)
#   - moto server and an SMTP capture server on free 127.0.0.1 ports
#   - Postgres: $TOKI_TEST_DATABASE_URL / $DATABASE_URL, else the local server
#     (started if installed and stopped, installed from Debian's packages if absent)
# Then: cargo test for the whole workspace, and infra/check.sh (cfn-lint, emulator deploy).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv-tools"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/toki-test.XXXXXX")"
PIDS=()
PG_STARTED=""
START=$SECONDS

step() { printf '\n== [%4ss] %s\n' "$((SECONDS - START))" "$*"; }

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "${TOKI_TEST_DATABASE_URL:-}" ] && command -v psql >/dev/null; then
    # Drop the per-test databases this run made.
    psql "$TOKI_TEST_DATABASE_URL" -Atc "SELECT datname FROM pg_database WHERE datname LIKE 'toki\_test\_%'" 2>/dev/null |
      while read -r db; do psql "$TOKI_TEST_DATABASE_URL" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true; done
  fi
  if [ -n "$PG_STARTED" ]; then pg_ctlcluster --skip-systemctl-redirect $PG_STARTED stop || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_for() { # url-or-port what
  for _ in $(seq 1 100); do
    if [[ "$1" == http* ]]; then curl -sf "$1" >/dev/null 2>&1 && return 0
    else (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; fi
    sleep 0.1
  done
  echo "$2 did not come up" >&2; return 1
}

step "python tools (.venv-tools, pinned in scripts/requirements-test.txt)"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
STAMP="$VENV/.toki-test.sha256"
WANT="$(cat scripts/requirements-test.txt infra/requirements-tools.txt | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  (cd scripts && "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-test.txt)
  echo "$WANT" >"$STAMP"
fi

step "AWS emulator (moto server)"
MOTO_PORT="$(free_port)"
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" >"$WORK/moto.log" 2>&1 &
PIDS+=($!)
wait_for "http://127.0.0.1:$MOTO_PORT/moto-api/" "moto server"
export TOKI_TEST_AWS_ENDPOINT="http://127.0.0.1:$MOTO_PORT"
echo "moto on $TOKI_TEST_AWS_ENDPOINT"

step "SMTP capture (aiosmtpd)"
SMTP_PORT="$(free_port)"

"$VENV/bin/python" -m aiosmtpd -n -l "127.0.0.1:$SMTP_PORT" -c aiosmtpd.handlers.Mailbox "$WORK/maildir" >"$WORK/smtp.log" 2>&1 &
PIDS+=($!)
wait_for "$SMTP_PORT" "aiosmtpd"
export TOKI_TEST_SMTP="127.0.0.1:$SMTP_PORT" TOKI_TEST_SMTP_MAILDIR="$WORK/maildir"
echo "smtp on $TOKI_TEST_SMTP"

step "Postgres"
if [ -z "${TOKI_TEST_DATABASE_URL:-}" ] && [ -n "${DATABASE_URL:-}" ]; then export TOKI_TEST_DATABASE_URL="$DATABASE_URL"; fi
if [ -z "${TOKI_TEST_DATABASE_URL:-}" ]; then
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
      echo "installing PostgreSQL from Debian's packages"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
    PG_STARTED="$(ls /etc/postgresql | sort -V | tail -1) main"
    pg_ctlcluster --skip-systemctl-redirect $PG_STARTED start
    wait_for 5432 "postgres"
    # A local test server: let the test user connect over TCP with a password.
    su postgres -c "psql -qc \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null
  fi
  if ! command -v psql >/dev/null || psql "postgres://postgres@127.0.0.1:5432/postgres" -Atc 'select 1' >/dev/null 2>&1; then
    export TOKI_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres"
  else
    export TOKI_TEST_DATABASE_URL="postgres://postgres:postgres@127.0.0.1:5432/postgres"
  fi
fi
if command -v psql >/dev/null; then psql "$TOKI_TEST_DATABASE_URL" -Atc 'select version()' | head -1 || true; fi
echo "tests create their databases on $TOKI_TEST_DATABASE_URL"

step "cargo test --workspace"
cargo test --workspace --all-targets --no-fail-fast "$@"

step "infra: cfn-lint and emulator deploy (infra/check.sh)"
TOKI_VENV="$VENV" bash infra/check.sh

step "all tests passed"
