#!/usr/bin/env bash
# Builds the scanner, registrar and repair Lambdas as zips for the provided.al2023
# runtime, with cargo-lambda (pinned, from PyPI, into the repo's tools venv;
# it brings zig, which links against an old glibc so the binary runs on
# Amazon Linux 2023 whatever this machine's glibc is).
#
#   scripts/build-lambdas.sh            # x86_64 (LambdaArchitecture=x86_64)
#   scripts/build-lambdas.sh --arm64    # Graviton (LambdaArchitecture=arm64)
#
# Writes <target>/lambda/toki-scanner-lambda/bootstrap.zip and
# <target>/lambda/toki-registrar-lambda/bootstrap.zip (the CodeUris of
# infra/template.yaml); both architectures write the same paths, so build the
# one you deploy last. Environment: TOKI_VENV (default .venv-tools, relative to
# the repo root), CARGO_TARGET_DIR, CARGO_LAMBDA_COMPILER (cargo-zigbuild or
# cargo; default: zig when it runs, else plain cargo for x86_64),
# TOKI_LAMBDA_PROFILE (default lambda-release).
#
#   scripts/build-lambdas.sh --from-build target/debug
#
# packages binaries that are already built (CI: its test build's, made by
# `cargo build --workspace --bins --tests` on top of the tests' units, so
# no crate is compiled twice) into zips of the same form, without cargo-lambda,
# under <target>/lambda-ci/ (not <target>/lambda/, which a deploy reads).
# Those are checks that the Lambdas build and package, not deployable
# artefacts: they are unoptimised, linked against this machine's glibc, and
# built with the workspace's features.
set -euo pipefail

CARGO_LAMBDA_VERSION=1.9.2
BINS=(toki-scanner-lambda toki-registrar-lambda toki-repair-lambda)

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }

arch=x86_64
from_build=""
while [ $# -gt 0 ]; do
  case "$1" in
    --from-build)
      case "${2:-}" in
        "" | -*) echo "build-lambdas: --from-build needs the folder of the built binaries" >&2; exit 2 ;;
      esac
      # Absolute: the script works from the repository root.
      from_build=$(cd "$2" && pwd)
      shift ;;
    --arm64) arch=arm64 ;;
    --x86-64 | --x86_64) arch=x86_64 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "build-lambdas: unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# Writes <out>/<bin>/bootstrap.zip around $1/<bin> (named bootstrap,
# executable: the provided runtimes run that file).
zip_built() { # dir out
  for bin in "${BINS[@]}"; do
    if [ ! -x "$1/$bin" ]; then
      echo "build-lambdas: $1/$bin is missing (build it first: cargo build --workspace --bins --tests)" >&2
      exit 1
    fi
    mkdir -p "$2/$bin"
    python3 - "$1/$bin" "$2/$bin/bootstrap.zip" <<'PY'
import sys, zipfile
info = zipfile.ZipInfo("bootstrap")
info.external_attr = 0o100755 << 16
info.compress_type = zipfile.ZIP_DEFLATED
with open(sys.argv[1], "rb") as f, zipfile.ZipFile(sys.argv[2], "w") as z:
    z.writestr(info, f.read(), compresslevel=1)
PY
  done
}

# Checks each <out>/<bin>/bootstrap.zip and prints its size.
check_zips() { # out
  for bin in "${BINS[@]}"; do
    local zip=$1/$bin/bootstrap.zip
    if [ ! -f "$zip" ]; then
      echo "build-lambdas: $zip is missing" >&2
      exit 1
    fi
    # The runtime runs the file named bootstrap at the root of the zip.
    python3 -c 'import sys, zipfile; n = zipfile.ZipFile(sys.argv[1]).namelist(); sys.exit(0 if "bootstrap" in n else "no bootstrap in %s: %s" % (sys.argv[1], n))' "$zip"
    printf '%s\t%s bytes\t(%s)\n' "$zip" "$(stat -c %s "$zip")" "$(du -h "$zip" | cut -f1)"
  done
}

target_dir=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')

if [ -n "$from_build" ]; then
  [ "$arch" = x86_64 ] || { echo "build-lambdas: --from-build packages this machine's x86_64 binaries only" >&2; exit 2; }
  started=$(date +%s)
  echo "build-lambdas: packaging ${BINS[*]} from $from_build into $target_dir/lambda-ci (not for deployment)"
  zip_built "$from_build" "$target_dir/lambda-ci"
  echo "build-lambdas: done in $(($(date +%s) - started)) s"
  check_zips "$target_dir/lambda-ci"
  exit 0
fi

venv=$root/${TOKI_VENV:-.venv-tools}

# cargo-lambda, pinned.
if [ ! -x "$venv/bin/python" ]; then
  echo "build-lambdas: creating $venv"
  python3 -m venv "$venv"
fi
export PATH="$venv/bin:$PATH"
if ! cargo lambda --version 2>/dev/null | grep -q "^cargo-lambda $CARGO_LAMBDA_VERSION "; then
  echo "build-lambdas: installing cargo-lambda==$CARGO_LAMBDA_VERSION into $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "cargo-lambda==$CARGO_LAMBDA_VERSION"
fi
cargo lambda --version

# The compiler: zig (cargo-zigbuild, cargo-lambda's default) when it runs, which
# also cross-compiles for arm64; otherwise plain cargo, x86_64 only, linked
# against this machine's glibc.
compiler=${CARGO_LAMBDA_COMPILER:-}
if [ -z "$compiler" ]; then
  if "$venv/bin/python" -m ziglang version >/dev/null 2>&1 || command -v zig >/dev/null 2>&1; then
    compiler=cargo-zigbuild
  elif [ "$arch" = x86_64 ] && [ "$(uname -m)" = x86_64 ]; then
    compiler=cargo
    echo "build-lambdas: zig does not run here; building with --compiler cargo (x86_64 only)" >&2
  else
    echo "build-lambdas: --arm64 needs zig (pip package ziglang, installed with cargo-lambda), which does not run here" >&2
    exit 1
  fi
fi

if [ "$arch" = arm64 ]; then
  triple=aarch64-unknown-linux-gnu
  arch_flag=--arm64
else
  triple=x86_64-unknown-linux-gnu
  arch_flag=--x86-64
fi
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$triple"; then
  echo "build-lambdas: adding the Rust target $triple"
  rustup target add "$triple"
fi

started=$(date +%s)
compiler_flag=()
[ "$compiler" = cargo-zigbuild ] || compiler_flag=(--compiler "$compiler")
echo "build-lambdas: ${BINS[*]} ($arch, $compiler)"
# All three in one cargo invocation: their dependencies are compiled once, with
# the features unified (one invocation per package compiled them three times).
# --package too: the root manifest is a package, so --bin alone looks only there.
# The lambda-release profile (Cargo.toml) rather than cargo-lambda's own
# release tuning (codegen-units=1 + LTO: ~2x the build time for a ~20%
# smaller binary of functions that wait on the network).
selection=()
for bin in "${BINS[@]}"; do selection+=(--package "$bin" --bin "$bin"); done
profile=${TOKI_LAMBDA_PROFILE:-lambda-release}
echo "build-lambdas: profile $profile"
cargo lambda build --profile "$profile" --disable-optimizations --output-format zip \
  "$arch_flag" "${compiler_flag[@]}" "${selection[@]}"

echo "build-lambdas: done in $(($(date +%s) - started)) s ($arch)"
check_zips "$target_dir/lambda"
