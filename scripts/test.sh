#!/usr/bin/env bash
# The whole test suite: the hermetic tests (`cargo test --workspace` alone
# runs those) and the ones on real parts, ignored by plain cargo test and run
# here (cargo-nextest --run-ignored all; cargo test -- --include-ignored).
# Checks its prerequisites before building (what is missing and how to get
# it); as root with apt-get it installs the missing Debian packages itself
# (CI's fresh machine), without root it installs nothing and needs no sudo
# when the services are there. It starts what it needs, and stops what it
# started:
#   - .venv-tools: moto (AWS emulator), aiosmtpd (SMTP capture), cfn-lint, awscli (pinned)
#   - moto servers (one shared, one for the SES tests) and an SMTP capture server on free 127.0.0.1 ports
#   - LocalStack on the host for SQS (.venv-localstack, Python >= 3.12), for a
#     second pass of the AWS tests with SQS there and DynamoDB on moto
#   - Postgres: $TOKI_TEST_DATABASE_URL / $DATABASE_URL, else the local server
#     (started if installed and stopped, installed from Debian's packages if absent)
#   - Chromium from Debian's packages if absent (the report page's browser test)
# Then, side by side in one pass: the workspace's tests (all of them, the
# ignored ones included), the AWS tests again on LocalStack, infra/check.sh
# (cfn-lint, emulator deploy) and schemathesis against a live toki serve
# (scripts/schemathesis.sh). No test runs on its own, and none is retried.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv-tools"
# Python's bytecode kept, under target/: where the environment sets
# PYTHONDONTWRITEBYTECODE, every start of a tool compiled its modules again
# (the aws CLI: 3.1 s of CPU a call against 1.1 s; the tests start it dozens
# of times, and moto, LocalStack, cfn-lint and schemathesis once or more).
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${CARGO_TARGET_DIR:-$ROOT/target}/pycache"
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

# ---------------------------------------------------------------- prerequisites
# Checked before the build (minutes cold): each missing one is named with the
# command that gets it. As root with apt-get (CI: a fresh Debian with Rust,
# Python and Debian's packages), the missing Debian packages are installed:
# the small ones now, Chromium and PostgreSQL in the background while cargo
# builds. Without root nothing is installed.
step "prerequisites"
ROOT_APT=""
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then ROOT_APT=1; fi
MISSING=()   # "what: how to get it"
APT_NOW=()   # Debian packages root installs before the build
APT_BG=()    # ... and beside it
need_pkg() { # when-now|bg package what
  if [ -n "$ROOT_APT" ]; then
    if [ "$1" = now ]; then APT_NOW+=("$2"); else APT_BG+=("$2"); fi
    echo "  $3: missing; installing Debian's $2"
  else
    MISSING+=("$3: sudo apt-get install $2")
  fi
}
have() { command -v "$1" >/dev/null 2>&1; }
have cargo || MISSING+=("the Rust toolchain (cargo): https://rustup.rs, then open a new shell")
if ! have python3; then
  need_pkg now python3 "Python 3.10+ (python3)"
elif ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  MISSING+=("Python 3.10+: python3 is $(python3 -c 'import platform; print(platform.python_version())'); install a newer one (Debian 12 has 3.11) or put one first on PATH as python3")
fi
if have python3 && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  need_pkg now python3-venv "Python's venv with pip (python3-venv)"
fi
have curl || need_pkg now curl "curl"
have openssl || need_pkg now openssl "openssl (a certificate for Postgres' TLS)"
# Postgres: a server the tests can reach ($TOKI_TEST_DATABASE_URL,
# $DATABASE_URL, else 127.0.0.1:5432), and psql to set it up and clean up.
pg_up() { # host port
  if have pg_isready; then pg_isready -q -h "$1" -p "$2" 2>/dev/null
  else (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; fi
}
PG_URL="${TOKI_TEST_DATABASE_URL:-${DATABASE_URL:-}}"
PG_INSTALL=""
if [ -n "$PG_URL" ]; then
  if have psql; then
    psql "$PG_URL" -Atc 'select 1' >/dev/null 2>&1 \
      || MISSING+=("Postgres at \$TOKI_TEST_DATABASE_URL/\$DATABASE_URL ($PG_URL): does not answer; start it, or unset both to use a local server")
  else
    need_pkg bg postgresql-client "psql (to set up and clean up the test databases)"
  fi
elif pg_up 127.0.0.1 5432; then
  have psql || need_pkg bg postgresql-client "psql (to set up and clean up the test databases)"
elif ls /etc/postgresql/*/main >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || MISSING+=("Postgres: installed but not running on 127.0.0.1:5432: sudo pg_ctlcluster $(ls /etc/postgresql | sort -V | tail -1) main start (or set TOKI_TEST_DATABASE_URL)")
else
  PG_INSTALL=1
  need_pkg bg postgresql "PostgreSQL (none on 127.0.0.1:5432, no TOKI_TEST_DATABASE_URL)"
fi
# Chromium, for the report page's browser test (tests/report_page.rs).
CHROMIUM="${TOKI_CHROMIUM:-/usr/bin/chromium}"
[ -x "$CHROMIUM" ] || need_pkg bg chromium "Chromium ($CHROMIUM, or TOKI_CHROMIUM)"
# Optional: said, not required.
if cargo nextest --version >/dev/null 2>&1; then echo "  cargo-nextest: $(cargo nextest --version | head -1)"
else echo "  cargo-nextest: not found; the tests run with cargo test, one binary after another (cargo install cargo-nextest --locked)"; fi
if [ "${#MISSING[@]}" -gt 0 ]; then
  echo >&2
  echo "Missing (nothing was built or started):" >&2
  for m in "${MISSING[@]}"; do echo "  - $m" >&2; done
  exit 2
fi
apt_install() { # packages...
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq \
    && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" >/dev/null
}
if [ "${#APT_NOW[@]}" -gt 0 ]; then apt_install "${APT_NOW[@]}"; fi
echo "  all there"

# The Python tools install while cargo builds the tests (both take minutes cold).
step "python tools in the background (.venv-tools, pinned in scripts/requirements-test.txt; .venv-localstack)"
# Installed with uv (pinned, from PyPI, into each venv by its pip): pip took
# about 80 s of CPU for the tools alone, uv about 5, and the installs share
# the two cores with the test build (README, Tests: CI). uv does not compile
# bytecode up front; Python does it for the modules a tool imports.
UV_VERSION=0.13.9
uv_into() { # venv
  [ -x "$1/bin/uv" ] && [ "$("$1/bin/uv" --version | cut -d' ' -f2)" = "$UV_VERSION" ] && return 0
  "$1/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
}
install_tools() {
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  local stamp="$VENV/.toki-test.sha256" want
  want="$(cat scripts/requirements-test.txt infra/requirements-tools.txt | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    uv_into "$VENV"
    (cd scripts && "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" -r requirements-test.txt)
    # infra/check.sh's own stamp: its tools are in already.
    sha256sum infra/requirements-tools.txt | cut -d' ' -f1 >"$VENV/.toki-tools.sha256"
    echo "$want" >"$stamp"
  fi
}
# LocalStack needs Python >= 3.12 (pyenv's on the project's machines). Without
# one, the second pass is skipped, and says so.
LS_PY=""
for p in python3.13 python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3; do
  # Run it: a pyenv shim answers `command -v` but may fail when called.
  if "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then LS_PY="$p"; break; fi
done
LS_VENV="$ROOT/.venv-localstack"
install_localstack() {
  [ -x "$LS_VENV/bin/python" ] || "$LS_PY" -m venv "$LS_VENV"
  local want
  want="$(sha256sum scripts/requirements-localstack.txt | cut -d' ' -f1)"
  if [ "$(cat "$LS_VENV/.toki.sha256" 2>/dev/null)" != "$want" ]; then
    uv_into "$LS_VENV"
    "$LS_VENV/bin/uv" pip install --quiet --python "$LS_VENV/bin/python" -r scripts/requirements-localstack.txt
    echo "$want" >"$LS_VENV/.toki.sha256"
  fi
}
install_tools >"$WORK/tools-install.log" 2>&1 &
TOOLS_PID=$!
PIDS+=("$TOOLS_PID")
LS_INSTALL_PID=""
if [ -n "$LS_PY" ]; then
  install_localstack >"$WORK/localstack-install.log" 2>&1 &
  LS_INSTALL_PID=$!
  PIDS+=("$LS_INSTALL_PID")
fi
# What root installs from Debian's packages (Chromium, PostgreSQL), in the
# background while cargo builds.
APT_PID=""
if [ "${#APT_BG[@]}" -gt 0 ]; then
  apt_install "${APT_BG[@]}" >"$WORK/apt-install.log" 2>&1 &
  APT_PID=$!
  PIDS+=("$APT_PID")
fi
# Waits for an install; on failure shows its log and stops.
installed() { # pid log what
  if ! wait "$1"; then echo "installing $3 failed:" >&2; cat "$2" >&2; exit 1; fi
}

if cargo nextest --version >/dev/null 2>&1; then
  step "build the tests (cargo nextest run --no-run)"
  cargo nextest run --workspace --no-run "$@"
else
  step "build the tests (cargo test --no-run)"
  cargo test --workspace --all-targets --no-run
fi

installed "$TOOLS_PID" "$WORK/tools-install.log" "the Python tools"
[ -z "$APT_PID" ] || installed "$APT_PID" "$WORK/apt-install.log" "${APT_BG[*]} (Debian's packages)"
step "AWS emulator (moto server)"
MOTO_PORT="$(free_port)"
"$VENV/bin/python" scripts/moto_server.py -H 127.0.0.1 -p "$MOTO_PORT" >"$WORK/moto.log" 2>&1 &
PIDS+=($!)
wait_for "http://127.0.0.1:$MOTO_PORT/moto-api/" "moto server"
export TOKI_TEST_AWS_ENDPOINT="http://127.0.0.1:$MOTO_PORT"
echo "moto on $TOKI_TEST_AWS_ENDPOINT"
# A second moto for the SES tests, which read its model dump back (the shared
# one, full of other tests' resources, can fail to serialise it); started here
# so its start-up does not load the machine while timing tests run.
SES_MOTO_PORT="$(free_port)"
"$VENV/bin/python" scripts/moto_server.py -H 127.0.0.1 -p "$SES_MOTO_PORT" >"$WORK/moto-ses.log" 2>&1 &
PIDS+=($!)
wait_for "http://127.0.0.1:$SES_MOTO_PORT/moto-api/" "moto server for SES"
export TOKI_TEST_SES_ENDPOINT="http://127.0.0.1:$SES_MOTO_PORT"

step "LocalStack on the host (SQS), for a second pass of the AWS tests"
LS_PORT=""
if [ -n "$LS_PY" ]; then
  installed "$LS_INSTALL_PID" "$WORK/localstack-install.log" "LocalStack"
  LS_PORT="$(free_port)"
  mkdir -p "$WORK/localstack"
  (cd "$WORK/localstack" && exec env OVERRIDE_IN_DOCKER=0 GATEWAY_LISTEN="127.0.0.1:$LS_PORT" SERVICES=sqs \
    LOCALSTACK_VOLUME_DIR="$WORK/localstack/volume" "$LS_VENV/bin/python" -m localstack.runtime.main \
    >"$WORK/localstack.log" 2>&1) &
  PIDS+=($!)
  wait_for "http://127.0.0.1:$LS_PORT/_localstack/health" "LocalStack"
  echo "LocalStack SQS on http://127.0.0.1:$LS_PORT"
else
  echo "SKIPPED: no Python >= 3.12 for LocalStack; the AWS tests run against moto only"
fi

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
  if ! pg_up 127.0.0.1 5432; then
    # Installed (above, as root, if it was not) but not running: started
    # here (root: checked before the build) and stopped at the end.
    [ -z "$PG_INSTALL" ] || echo "PostgreSQL installed from Debian's packages"
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
# TLS to Postgres is tested (RDS forces it): a local server without SSL gets a
# self-signed certificate, as Debian's own packages set one up.
if command -v psql >/dev/null && [ "$(psql "$TOKI_TEST_DATABASE_URL" -Atc 'SHOW ssl' 2>/dev/null)" = "off" ]; then
  PGDATA_DIR="$(psql "$TOKI_TEST_DATABASE_URL" -Atc 'SHOW data_directory')"
  if [ -d "$PGDATA_DIR" ]; then
    echo "turning SSL on for the local Postgres (self-signed certificate)"
    openssl req -new -x509 -days 3650 -nodes -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost" \
      -keyout "$PGDATA_DIR/toki-test.key" -out "$PGDATA_DIR/toki-test.crt" >/dev/null 2>&1
    chown postgres:postgres "$PGDATA_DIR/toki-test.key" "$PGDATA_DIR/toki-test.crt" 2>/dev/null || true
    chmod 600 "$PGDATA_DIR/toki-test.key"
    psql "$TOKI_TEST_DATABASE_URL" -qc "ALTER SYSTEM SET ssl_cert_file = 'toki-test.crt'" \
      -c "ALTER SYSTEM SET ssl_key_file = 'toki-test.key'" -c "ALTER SYSTEM SET ssl = on" -c "SELECT pg_reload_conf()" >/dev/null
  fi
fi
echo "tests create their databases on $TOKI_TEST_DATABASE_URL"

# Four parts run side by side: the workspace's tests, the LocalStack pass,
# the infra check and schemathesis; each part's output is printed when it
# ends. Together they keep both cores busy (docs/testing.md, "CI timings").
PARTS=()
# Run once, in the LocalStack pass when there is one (SQS there as it is
# in LocalStack's own container): the init script and the aws demo. The
# pass takes the tests that touch SQS; the DynamoDB tests are moto's in
# both passes, so they run in the first only.
LS_ONLY='test(/^conformance_aws::init_aws_script/) | test(demo_against_the_aws_emulator)'
part() { # name command...
  local name="$1"; shift
  ( "$@" >"$WORK/part-$name.log" 2>&1; echo $? >"$WORK/part-$name.rc" ) &
  PIDS+=($!)
  PARTS+=("$name:$!")
}
# Every test of the workspace in this one pass: the hermetic ones and those
# on the real parts (ignored by plain cargo test, run here).
if cargo nextest --version >/dev/null 2>&1; then
  step "in parallel: cargo nextest run --workspace --run-ignored all; the AWS tests on LocalStack; infra/check.sh; schemathesis"
  # Without arguments only: nextest ORs -E filtersets, so a caller's own -E
  # beside this one would select nearly everything.
  skip_ls_only=()
  [ -n "$LS_PORT" ] && [ "$#" -eq 0 ] && skip_ls_only=(-E "not ($LS_ONLY)")
  part tests cargo nextest run --workspace --no-fail-fast --run-ignored all ${skip_ls_only[@]+"${skip_ls_only[@]}"} "$@"
else
  step "in parallel: cargo test --workspace -- --include-ignored (cargo-nextest not installed); the AWS tests on LocalStack; infra/check.sh; schemathesis"
  part tests cargo test --workspace --all-targets --no-fail-fast -- --include-ignored "$@"
fi
if [ -n "$LS_PORT" ]; then
  # The AWS conformance suite and the aws demo again, with SQS on LocalStack
  # and DynamoDB on moto (each chosen by the SDK's per-service endpoints).
  # --workspace, as above, so that nothing is rebuilt with other features.
  if cargo nextest --version >/dev/null 2>&1; then
    part localstack env TOKI_TEST_SQS_ENDPOINT="http://127.0.0.1:$LS_PORT" cargo nextest run --workspace --no-fail-fast \
      --run-ignored all -E "test(/^conformance_aws::(queue_|ensure_resources)/) | $LS_ONLY"
  else
    part localstack env TOKI_TEST_SQS_ENDPOINT="http://127.0.0.1:$LS_PORT" cargo test --no-fail-fast \
      --test integration -- --include-ignored conformance_aws:: demo::demo_against_the_aws_emulator
  fi
fi
part infra env TOKI_VENV="$VENV" bash infra/check.sh
# CI's Lambda zips (TOKI_TEST_ZIPS=1, set by .ci/run): the binaries without
# tests built on top of the test build, and zipped, beside the tests (at idle
# priority it waited for them, then ran alone). Started once the test parts have their binaries (else
# its build would hold cargo's lock while they wait for it).
if [ -n "${TOKI_TEST_ZIPS:-}" ]; then
  zips() {
    local name
    for name in tests localstack; do
      [ -e "$WORK/part-$name.log" ] || continue
      until grep -qE '^ *Starting|^running [0-9]+ test' "$WORK/part-$name.log" || [ -e "$WORK/part-$name.rc" ]; do sleep 1; done
    done
    cargo build --workspace --bins --tests
    scripts/build-lambdas.sh --from-build "${CARGO_TARGET_DIR:-target}/debug"
  }
  part zips bash -c "$(declare -f zips); WORK='$WORK'; zips"
fi
# The registrar API fuzzed against its own OpenAPI document, on the debug
# toki the test build made (a toki serve of its own on a free port), at the
# tests' priority: about two minutes of one core, which at idle priority it
# got only after the tests, alone (no test asserts a time).
part schemathesis env TOKI_VENV="$VENV" bash scripts/schemathesis.sh "${CARGO_TARGET_DIR:-target}/debug/toki"
FAILED=()
for p in "${PARTS[@]}"; do
  name="${p%%:*}"
  wait "${p#*:}" || true
  rc="$(cat "$WORK/part-$name.rc" 2>/dev/null || echo 1)"
  case "$name" in
    tests) title="cargo tests of the workspace" ;;
    localstack) title="AWS tests with LocalStack's SQS + moto's DynamoDB" ;;
    infra) title="infra: cfn-lint and emulator deploy (infra/check.sh)" ;;
    schemathesis) title="schemathesis against toki serve (scripts/schemathesis.sh)" ;;
    zips) title="CI's Lambda zips: cargo build --workspace --bins --tests; scripts/build-lambdas.sh --from-build" ;;
  esac
  step "$title: exit $rc"
  cat "$WORK/part-$name.log"
  [ "$rc" = 0 ] || FAILED+=("$name")
done
if [ "${#FAILED[@]}" -gt 0 ]; then
  step "FAILED: ${FAILED[*]}"
  exit 1
fi

step "all tests passed"
