#!/usr/bin/env bash
# Offline check of Toki's AWS infrastructure. Needs only Python >= 3.10 + pip.
#
#   1. creates/reuses a venv at ${TOKI_VENV:-.venv-tools} (relative to the repo
#      root) with the pinned tools of infra/requirements-tools.txt
#   2. cfn-lint on every CloudFormation/SAM template in infra/ (must be clean),
#      then `sam validate` and `sam validate --lint` (SAM CLI; both run offline:
#      the translator and cfn-lint are local, telemetry is off)
#   3. starts moto server on a free 127.0.0.1 port, expands the SAM template
#      (aws-sam-translator), deploys it twice (defaults with DatabaseMode=aurora /
#      every option with DatabaseMode=existing) into moto's CloudFormation with a
#      placeholder Lambda zip, checks the resources, then deletes the first stack
#      and checks what must be retained; resource types moto does not implement
#      are listed as skipped (their key properties are checked in the template)
#   4. runs localstack/init-aws.sh against the same moto server twice
#      (idempotency) and checks what it created
# moto is stopped on exit. Exit status is non-zero on any failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="${TOKI_VENV:-.venv-tools}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PYTHON="${PYTHON:-python3}"
REQS="$ROOT/infra/requirements-tools.txt"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/toki-check.XXXXXX")"
MOTO_PID=""
START=$SECONDS

cleanup() {
  if [ -n "$MOTO_PID" ] && kill -0 "$MOTO_PID" 2>/dev/null; then
    kill "$MOTO_PID" 2>/dev/null || true
    wait "$MOTO_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
die() { printf 'check.sh: FAILED: %s\n' "$*" >&2; exit 1; }

# ------------------------------------------------------------------ 1. tools
step "tools: venv ${VENV#"$ROOT"/}"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
  || die "$PYTHON is older than 3.10"
if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -m venv "$VENV" 2>"$WORK/venv.err"; then
    # Debian/Ubuntu without python3-venv: fall back to virtualenv from pip.
    rm -rf "$VENV"
    "$PYTHON" -m pip install --user --quiet virtualenv >/dev/null || { cat "$WORK/venv.err" >&2; die "cannot create a venv"; }
    "$PYTHON" -m virtualenv --quiet "$VENV" || die "cannot create a venv"
  fi
fi
STAMP="$VENV/.toki-tools.sha256"
WANT="$("$VENV/bin/python" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$REQS")"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  echo "installing $(grep -v '^#' "$REQS" | tr '\n' ' ')"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS" \
    || die "pip install -r infra/requirements-tools.txt"
  echo "$WANT" >"$STAMP"
fi
"$VENV/bin/python" - <<'EOF'
from importlib.metadata import version
print("  " + ", ".join(f"{p} {version(p)}" for p in ("cfn-lint", "aws-sam-cli", "moto", "aws-sam-translator", "awscli", "boto3")))
EOF
export PATH="$VENV/bin:$PATH"

# ------------------------------------------------------------------ 2. cfn-lint
step "cfn-lint"
mapfile -t TEMPLATES < <(grep -lE '^(AWSTemplateFormatVersion|Transform):' infra/*.yaml infra/*.yml infra/*.json 2>/dev/null || true)
[ "${#TEMPLATES[@]}" -gt 0 ] || die "no templates found in infra/"
for t in "${TEMPLATES[@]}"; do
  if cfn-lint -- "$t"; then
    echo "  ok    $t: clean"
  else
    die "cfn-lint reported problems in $t"
  fi
done

# SAM CLI: its own translation (what `sam deploy` runs) and its lint. Offline:
# it needs a region and dummy credentials; its version check fails quietly.
step "sam validate"
for t in "${TEMPLATES[@]}"; do
  grep -q '^Transform:.*Serverless' "$t" || continue
  for lint in "" --lint; do
    env -u AWS_PROFILE SAM_CLI_TELEMETRY=0 AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \
      sam validate $lint --region eu-west-1 --template-file "$t" >"$WORK/sam.log" 2>&1 \
      || { cat "$WORK/sam.log" >&2; die "sam validate $lint $t"; }
    echo "  ok    $t: sam validate${lint:+ $lint}"
  done
done

# ------------------------------------------------------------------ 3. moto deploy
PORT="$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
ENDPOINT="http://127.0.0.1:$PORT"
step "moto server on $ENDPOINT"
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$PORT" >"$WORK/moto.log" 2>&1 &
MOTO_PID=$!
"$VENV/bin/python" - "$ENDPOINT" <<'EOF' || { tail -20 "$WORK/moto.log" >&2; die "moto server did not start"; }
import sys, time, urllib.request
for _ in range(150):
    try:
        urllib.request.urlopen(sys.argv[1] + "/moto-api/", timeout=1)
        sys.exit(0)
    except Exception:
        time.sleep(0.2)
sys.exit(1)
EOF
echo "  ok    ready"

export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=eu-west-1 AWS_DEFAULT_REGION=eu-west-1
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL

step "deploy infra/template.yaml into moto CloudFormation (Lambda code: placeholder zip)"
"$VENV/bin/python" infra/emulator_deploy.py --endpoint "$ENDPOINT" --expanded-out "$WORK/expanded.json" \
  || die "emulator deploy"
# The expanded (plain CloudFormation) template must lint clean as well.
cfn-lint -- "$WORK/expanded.json" || die "cfn-lint on the SAM-expanded template"
echo "  ok    SAM-expanded template: cfn-lint clean"

# ------------------------------------------------------------------ 4. init-aws.sh
step "localstack/init-aws.sh against moto (twice)"
curl_reset() { "$VENV/bin/python" -c 'import sys,urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1]+"/moto-api/reset", method="POST"))' "$ENDPOINT"; }
curl_reset
URL1="$(AWS_ENDPOINT_URL="$ENDPOINT" bash localstack/init-aws.sh 2>"$WORK/init1.log")" \
  || { cat "$WORK/init1.log" >&2; die "init-aws.sh (first run)"; }
URL2="$(AWS_ENDPOINT_URL="$ENDPOINT" bash localstack/init-aws.sh 2>"$WORK/init2.log")" \
  || { cat "$WORK/init2.log" >&2; die "init-aws.sh (second run)"; }
[ -n "$URL1" ] && [ "$URL1" = "$URL2" ] || die "init-aws.sh printed '$URL1' then '$URL2'"
echo "  ok    both runs succeeded; queue URL $URL1"
"$VENV/bin/python" infra/emulator_deploy.py --endpoint "$ENDPOINT" --verify-init || die "init-aws.sh resources"

printf '\ncheck.sh: all checks passed in %ss (templates: %s)\n' "$((SECONDS - START))" "${TEMPLATES[*]}"
